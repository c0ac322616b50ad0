"""`cosmos-train quickstart`: the whole toolkit on a tiny Cosmos3, offline, in well under a minute.

1. Build a tiny random Cosmos3 (real upstream classes) and save it as a diffusers export.
2. Convert it to every checkpoint layout with `cosmos3-convert`'s engine.
3. Load the raw framework layout through diffusers-cosmos3 and generate one image (PNG).
4. Load the framework layout through transformers-cosmos3 and generate one text reply.
5. LoRA-SFT that reasoner on the bundled LLaVA-format shapes sample, showing the loss fall.
6. Export the merged model, reload it with `from_pretrained`, and answer one prompt.
7. Build a tiny random Stable Diffusion 3 pipeline, LoRA flow-matching SFT its transformer on the bundled
   `pairs` sample (cached latents), load the exported LoRA with `pipe.load_lora_weights` in plain
   diffusers and generate one image (PNG).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from .errors import OutputDirError

MARKER = ".cosmos-train-quickstart"

SFT_JOB = """\
# Written by `cosmos-train quickstart`; run it again with: cosmos-train sft -c {job}
kind = "sft"

[model]
name_or_path = "{model}"
freeze = ["vision"]

[lora]
r = 16
alpha = 32

[data]
format = "llava"
path = "{data}/llava.json"
media_dir = "{data}"
max_length = 512

[train]
output_dir = "{output}"
learning_rate = 1e-2
max_steps = 40
per_device_train_batch_size = 4
logging_steps = 5
save_strategy = "no"
report_to = "none"
seed = 0
disable_tqdm = true
"""


DIFFUSION_JOB = """\
# Written by `cosmos-train quickstart`; run it again with: cosmos-train diffusion-sft -c {job}
kind = "diffusion-sft"

[model]
name_or_path = "{model}"

[lora]
r = 8
alpha = 16

[data]
path = "{data}"
height = 32
width = 32
cache = true

[diffusion]
max_sequence_length = 64                # T5 tokens (the tiny tokenizers are byte-level)

[train]
output_dir = "{output}"
learning_rate = 1e-2
max_steps = 30
per_device_train_batch_size = 8
logging_steps = 5
save_strategy = "no"
report_to = "none"
seed = 0
disable_tqdm = true
"""

# How the quickstart samples the fine-tuned tiny SD3 (recorded in quickstart.json, so the image can be remade).
DIFFUSION_CALL = {
    "prompt": "a red square on a white background",
    "height": 32,
    "width": 32,
    "num_inference_steps": 4,
    "max_sequence_length": 64,
    "seed": 0,
}


def _prepare(output_dir: Path) -> None:
    if output_dir.exists() and not (output_dir / MARKER).exists():
        raise OutputDirError(f"{output_dir} exists and was not made by quickstart; pick another --output-dir")
    try:
        if output_dir.exists():
            shutil.rmtree(output_dir)
        output_dir.mkdir(parents=True)
        (output_dir / MARKER).write_text("made by cosmos-train quickstart; safe to delete\n")
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OutputDirError(f"cannot write {output_dir} ({reason}); pick another --output-dir") from None


def run(output_dir: Path, log: Callable[[str], None] = print) -> dict[str, str]:
    """Run the quickstart into `output_dir`; returns {what: where}."""
    import torch

    start = time.perf_counter()

    def step(message: str) -> None:
        log(f"[{time.perf_counter() - start:5.1f}s] {message}")

    output_dir = Path(output_dir).resolve()
    _prepare(output_dir)
    torch.manual_seed(0)

    step("building a tiny random Cosmos3 and writing it in every checkpoint layout")
    from diffusers_cosmos3 import testing as tiny

    layouts = tiny.save_tiny_cosmos3_layouts(output_dir / "checkpoints")
    for name, folder in layouts.items():
        step(f"  {name:<12} {folder}")

    step("loading the raw framework checkpoint through diffusers-cosmos3 (net_ema. weights)")
    import diffusers_cosmos3

    pipeline = diffusers_cosmos3.load_pipeline(layouts["framework"])
    pipeline.set_progress_bar_config(disable=True)
    image = pipeline(
        "a red cube on a wooden table",
        num_frames=1,
        height=64,
        width=64,
        num_inference_steps=4,
        guidance_scale=4.0,
        generator=torch.Generator().manual_seed(0),
        output_type="pil",
    ).video[0]
    image_path = output_dir / "text2image.png"
    image.save(image_path)
    step(f"text-to-image -> {image_path} ({image.width}x{image.height})")

    step("loading the same checkpoint's reasoner through transformers-cosmos3")
    from transformers import AutoProcessor

    from transformers_cosmos3 import Cosmos3ForConditionalGeneration

    model = Cosmos3ForConditionalGeneration.from_pretrained(layouts["framework"]).eval()
    processor = AutoProcessor.from_pretrained(layouts["framework"])
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is on the table?"}]}
    ]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[prompt], images=[image], return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    reply = processor.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    reply_path = output_dir / "reply.txt"
    reply_path.write_text(reply + "\n")
    step(f"image+text -> text reply (random weights, so it is noise): {reply!r} -> {reply_path}")

    step("LoRA SFT of that reasoner on the bundled shapes sample (LLaVA format, 40 steps)")
    from cosmos_train.algorithms.sft.trainer import run_sft
    from cosmos_train.jobs import read_job
    from cosmos_train.samples import shapes_dir

    job_path = output_dir / "sft_job.toml"
    job_path.write_text(
        SFT_JOB.format(
            job=job_path, model=layouts["framework"], data=shapes_dir(), output=output_dir / "sft-run"
        )
    )
    job = read_job(job_path)
    trainer = run_sft(job)
    history = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    step(
        f"loss {history[0]:.3f} -> {history[-1]:.3f} over {trainer.state.global_step} steps: "
        + " ".join(f"{value:.2f}" for value in history)
    )

    step("exporting the merged model and reloading it with from_pretrained")
    from PIL import Image

    from cosmos_train.export import export

    exported = export(trainer.args.output_dir, output_dir / "sft-export", merge_lora=True)
    model = Cosmos3ForConditionalGeneration.from_pretrained(exported).eval()
    processor = AutoProcessor.from_pretrained(exported)
    question = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What color is the shape?"}]}
    ]
    shape = Image.open(shapes_dir() / "images" / "blue_circle.png").convert("RGB")
    inputs = processor(
        text=[processor.apply_chat_template(question, add_generation_prompt=True)],
        images=[shape],
        return_tensors="pt",
    )
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    answer = processor.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    step(f"fine-tuned model, asked the color of a blue circle, answers: {answer!r}")

    step("building a tiny random Stable Diffusion 3 pipeline (real diffusers classes)")
    from cosmos_train.algorithms.diffusion_sft.trainer import run_diffusion_sft
    from cosmos_train.samples import pairs_dir
    from cosmos_train.tiny_models.pipelines import save_tiny_pipeline

    sd3 = save_tiny_pipeline("sd3", output_dir / "tiny-sd3")
    step("LoRA flow-matching SFT of its transformer on the bundled pairs sample (cached latents, 30 steps)")
    diffusion_job = output_dir / "diffusion_sft_job.toml"
    diffusion_job.write_text(
        DIFFUSION_JOB.format(
            job=diffusion_job, model=sd3, data=pairs_dir(), output=output_dir / "diffusion-sft-run"
        )
    )
    diffusion_trainer = run_diffusion_sft(read_job(diffusion_job))
    diffusion_losses = [entry["loss"] for entry in diffusion_trainer.state.log_history if "loss" in entry]
    step(
        f"flow-matching loss {diffusion_losses[0]:.3f} -> {diffusion_losses[-1]:.3f} over "
        f"{diffusion_trainer.state.global_step} steps: " + " ".join(f"{v:.2f}" for v in diffusion_losses)
    )
    exports = Path(diffusion_trainer.args.output_dir) / "safetensors"  # what users load: step_N/lora/
    lora = exports / f"step_{diffusion_trainer.state.global_step}" / "lora"
    step(f'loading the LoRA into plain diffusers: pipe.load_lora_weights("{lora}")')
    from diffusers import DiffusionPipeline
    from diffusers.utils import logging as diffusers_logging

    pipe = DiffusionPipeline.from_pretrained(sd3)
    pipe.set_progress_bar_config(disable=True)
    verbosity = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity_error()  # "no LoRA keys for the text encoders": it trains the transformer
    try:
        pipe.load_lora_weights(lora)
    finally:
        diffusers_logging.set_verbosity(verbosity)
    call = dict(DIFFUSION_CALL)
    generated = pipe(
        call.pop("prompt"), generator=torch.Generator().manual_seed(call.pop("seed")), **call
    ).images[0]
    diffusion_image = output_dir / "diffusion_sft.png"
    generated.save(diffusion_image)
    step(
        f"fine-tuned SD3, {DIFFUSION_CALL['prompt']!r} -> {diffusion_image} ({generated.width}x{generated.height})"
    )

    results = {
        "image": str(image_path),
        "reply": str(reply_path),
        "sft_job": str(job_path),
        "sft_losses": history,
        "export": str(exported),
        "answer": answer,
        "diffusion_pipeline": str(sd3),
        "diffusion_job": str(diffusion_job),
        "diffusion_losses": diffusion_losses,
        "diffusion_lora": str(lora),
        "diffusion_call": DIFFUSION_CALL,
        "diffusion_image": str(diffusion_image),
    } | {f"checkpoint:{name}": str(folder) for name, folder in layouts.items()}
    (output_dir / "quickstart.json").write_text(json.dumps(results, indent=2) + "\n")
    step(f"done; summary in {output_dir / 'quickstart.json'}")
    return results
