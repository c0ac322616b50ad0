"""`cosmos-train quickstart` end to end, with its fine-tuned answer checked against an independent load."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from diffusers import DiffusionPipeline
from PIL import Image
from sft_helpers import SHAPES, cli_in_process
from transformers import AutoModelForImageTextToText, AutoProcessor

import transformers_cosmos3  # noqa: F401  (registers Cosmos3 with the transformers Auto classes)


def _greedy_answer(model_dir: Path) -> str:
    """What a model loaded with plain `from_pretrained` answers to the quickstart's question, greedily."""
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    question = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What color is the shape?"}]}
    ]
    inputs = processor(
        text=[processor.apply_chat_template(question, add_generation_prompt=True)],
        images=[Image.open(SHAPES / "images" / "blue_circle.png").convert("RGB")],
        return_tensors="pt",
    )
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    return processor.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def _diffusion_image(summary: dict, lora: bool) -> np.ndarray:
    """The quickstart's SD3 sample remade here: the tiny pipeline loaded with plain diffusers, with the
    exported LoRA through the documented `pipe.load_lora_weights(folder)` or without it."""
    pipe = DiffusionPipeline.from_pretrained(summary["diffusion_pipeline"])
    pipe.set_progress_bar_config(disable=True)
    if lora:
        pipe.load_lora_weights(summary["diffusion_lora"])
    call = dict(summary["diffusion_call"])
    generator = torch.Generator().manual_seed(call.pop("seed"))
    return np.asarray(pipe(call.pop("prompt"), generator=generator, **call).images[0], dtype=np.int16)


def test_quickstart_cli_builds_converts_loads_and_generates(tmp_path):
    exe = Path(sys.executable).with_name("cosmos-train")
    out = tmp_path / "qs"
    result = subprocess.run(
        [exe, "quickstart", "--output-dir", out], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "quickstart.json").read_text())
    image = Image.open(summary["image"])
    assert image.format == "PNG" and image.size == (64, 64)
    assert Path(summary["reply"]).read_text().strip() != ""
    for layout in ("diffusers", "transformers", "flat", "framework", "vllm"):
        assert Path(summary[f"checkpoint:{layout}"]).is_dir()
    assert "text2image.png" in result.stdout
    # The LoRA SFT step learned: the loss it printed fell by a margin over all 40 steps...
    printed = re.search(r"\] loss (\S+) -> (\S+) over (\d+) steps: (.*)$", result.stdout, re.MULTILINE)
    assert printed, result.stdout
    losses = [float(value) for value in printed.group(4).split()]
    assert int(printed.group(3)) == 40 and len(losses) == 8, printed.group(0)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(summary["sft_losses"]), rtol=0, atol=0.006)
    assert losses[-1] < 0.75 * losses[0], printed.group(0)
    # ...and its answer is the merged export's: reloaded here independently, and unlike the base model's.
    answer = re.search(r"answers: (.*)$", result.stdout, re.MULTILINE)
    assert answer and ast.literal_eval(answer.group(1)) == summary["answer"], result.stdout
    assert summary["answer"] == _greedy_answer(Path(summary["export"]))
    assert summary["answer"] != _greedy_answer(Path(summary["checkpoint:transformers"]))

    # The diffusion-SFT stage: the tiny SD3's flow-matching loss it printed fell...
    printed = re.search(r"flow-matching loss \S+ -> \S+ over (\d+) steps: (.*)$", result.stdout, re.MULTILINE)
    assert printed, result.stdout
    losses = [float(value) for value in printed.group(2).split()]
    assert int(printed.group(1)) == 30 and len(losses) == 6, printed.group(0)
    torch.testing.assert_close(
        torch.tensor(losses), torch.tensor(summary["diffusion_losses"]), rtol=0, atol=0.006
    )
    assert losses[-1] < 0.9 * losses[0], printed.group(0)
    # ...and its PNG is what the exported LoRA, loaded with the documented diffusers call, generates, unlike
    # the base pipeline's image.
    assert (Path(summary["diffusion_lora"]) / "pytorch_lora_weights.safetensors").is_file()
    png = Image.open(summary["diffusion_image"])
    assert png.format == "PNG" and png.size == (32, 32)
    png = np.asarray(png.convert("RGB"), dtype=np.int16)
    assert np.abs(_diffusion_image(summary, lora=True) - png).max() <= 1
    assert np.abs(_diffusion_image(summary, lora=False) - png).mean() > 2

    # A second run replaces its own output; a foreign folder is refused with a one-line error.
    again = cli_in_process("quickstart", "--output-dir", out)  # in this process: the console script ran above
    assert again.returncode == 0, again.stderr[-3000:]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    refused = cli_in_process("quickstart", "--output-dir", foreign)
    assert refused.returncode == 2 and "error:" in refused.stderr
    assert (foreign / "keep.txt").read_text() == "precious"


def test_cli_help_lists_commands():
    exe = Path(sys.executable).with_name("cosmos-train")
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "quickstart" in result.stdout


def test_an_output_dir_that_cannot_be_written_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(app, ["quickstart", "--output-dir", str(blocker / "out")])
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip()
        == f"error: cannot write {blocker / 'out'} (Not a directory); pick another --output-dir"
    )
