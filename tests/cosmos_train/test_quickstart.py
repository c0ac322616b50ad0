import json
import subprocess
import sys
from pathlib import Path

from PIL import Image


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
    # The LoRA SFT step learned: loss fell by a margin, and the merged export reloads and answers.
    history = summary["sft_losses"]
    assert len(history) >= 5 and history[-1] < 0.8 * history[0], history
    assert (Path(summary["export"]) / "config.json").is_file() and isinstance(summary["answer"], str)

    # A second run replaces its own output; a foreign folder is refused with a one-line error.
    again = subprocess.run(
        [exe, "quickstart", "--output-dir", out], capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    refused = subprocess.run(
        [exe, "quickstart", "--output-dir", foreign], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "error:" in refused.stderr
    assert (foreign / "keep.txt").read_text() == "precious"


def test_cli_help_lists_commands():
    exe = Path(sys.executable).with_name("cosmos-train")
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "quickstart" in result.stdout
