"""`cosmos-train quickstart`: the whole toolkit on a tiny Cosmos3, offline, in well under a minute.

1. Build a tiny random Cosmos3 (real upstream classes) and save it as a diffusers export.
2. Convert it to every checkpoint layout with `cosmos3-convert`'s engine.
3. Load the raw framework layout through diffusers-cosmos3 and generate one image (PNG).
4. Load the framework layout through transformers-cosmos3 and generate one text reply.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

MARKER = ".cosmos-train-quickstart"


def _prepare(output_dir: Path) -> None:
    if output_dir.exists():
        if not (output_dir / MARKER).exists():
            raise FileExistsError(
                f"{output_dir} exists and was not made by quickstart; pick another --output-dir"
            )
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True)
    (output_dir / MARKER).write_text("made by cosmos-train quickstart; safe to delete\n")


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
    from cosmos_train import tiny

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

    results = {"image": str(image_path), "reply": str(reply_path)} | {
        f"checkpoint:{name}": str(folder) for name, folder in layouts.items()
    }
    (output_dir / "quickstart.json").write_text(json.dumps(results, indent=2) + "\n")
    step(f"done; summary in {output_dir / 'quickstart.json'}")
    return results
