"""`cosmos-train export` for diffusion runs: a checkpoint (or a run's output_dir) as what diffusers loads.

The run's job record (`cosmos_train_job.toml`) names the pipeline and the LoRA; the trained transformer
weights come from the checkpoint's `model.safetensors`, and the EMA from its `ema.safetensors` (used by
default when present, as the trainer's own exports do).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..jobs import JOB_RECORD

DIFFUSION_KINDS = ("diffusion-sft", "nft", "flow-grpo", "ddrl")
CARD = """---
library_name: diffusers
base_model: {base}
tags: [cosmos-train, {kind}]
---

# {name}

Fine-tuned with [cosmos-train](https://pypi.org/project/cosmos-train/) from `{base}` ({what}).

```python
{usage}
```
"""


def run_record(checkpoint: Path) -> dict | None:
    """The job record of the run `checkpoint` belongs to (in it, or in its parent), or None."""
    for folder in (checkpoint, checkpoint.parent):
        path = folder / JOB_RECORD
        if path.is_file():
            return tomllib.loads(path.read_text())
    return None


def is_diffusion_run(checkpoint: Path) -> bool:
    record = run_record(checkpoint)
    return record is not None and record.get("kind") in DIFFUSION_KINDS


def export_diffusion(
    checkpoint: Path, out: Path, merge_lora: bool = False, ema: bool | None = None, overwrite: bool = False
) -> Path:
    """Export a diffusion run's checkpoint to `out` (see the module docstring); refusals come before loading."""
    import torch
    from safetensors.torch import load_file

    from ..config import LoraSection
    from ..trainers.diffusion_common import EMA_FILE, EMACallback, export_pipeline
    from ..trainers.diffusion_config import PipelineSection
    from .adapter import AdapterOptions
    from .loading import add_lora, load_adapter

    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    record = run_record(checkpoint)
    weights = checkpoint / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{checkpoint} has no model.safetensors")
    lora_section = LoraSection.model_validate(record["lora"]) if "lora" in record else None
    if merge_lora and lora_section is None:
        raise ValueError(f"{checkpoint} is a full fine-tune, not a LoRA; drop --merge-lora")
    has_ema = (checkpoint / EMA_FILE).is_file()
    if ema and not has_ema:
        raise FileNotFoundError(f"{checkpoint} has no {EMA_FILE} (the run kept no EMA); drop --ema")
    use_ema = has_ema if ema is None else ema

    model = PipelineSection.model_validate(record["model"])
    adapter = load_adapter(model.name_or_path, AdapterOptions(), dtype=model.dtype)
    lora = None
    if lora_section is not None:
        targets = add_lora(
            adapter, lora_section.r, lora_section.alpha, lora_section.dropout, lora_section.target_modules
        )
        lora = {"r": lora_section.r, "alpha": lora_section.alpha, "target_modules": targets}
    else:
        adapter.prepare_full_finetuning()  # the trained parameters, as in the run: the EMA's keys
    adapter.transformer.load_state_dict(load_file(weights), strict=True)
    if use_ema:
        average = EMACallback(adapter.transformer, decay=0.5)
        average.load(checkpoint)
        with torch.no_grad():
            average.ema.copy_to(average.parameters)

    export_pipeline(adapter, out, lora, merge_lora=merge_lora, overwrite=overwrite)
    what = "LoRA merged into the weights" if merge_lora else ("LoRA" if lora else "full fine-tune")
    what += ", EMA weights" if use_ema else ""
    if lora and not merge_lora:
        usage = (
            "from diffusers import DiffusionPipeline\n\n"
            f'pipe = DiffusionPipeline.from_pretrained("{model.name_or_path}")\n'
            f"{adapter.lora_loading_call(out / 'lora')}"
        )
    else:
        usage = (
            f'from diffusers import DiffusionPipeline\n\npipe = DiffusionPipeline.from_pretrained("{out}")'
        )
    (out / "README.md").write_text(
        CARD.format(base=model.name_or_path, kind=record["kind"], name=out.name, what=what, usage=usage)
    )
    return out
