"""What diffusers loads, written from a diffusion training run.

- `export_pipeline(adapter, folder, lora)`: the adapter's pipeline as it is in memory: `folder/lora/` for
  `pipe.load_lora_weights` when a LoRA trains, or (with `merge_lora`, and for full fine-tuning) a whole pipeline
  for `DiffusionPipeline.from_pretrained`. The trainers write one under `output_dir/safetensors/step_N/`.
- `export_run(checkpoint, out)`: `cosmos-train export` of any diffusion run: the run's job record
  (`cosmos_train_job.toml`) names the pipeline and the LoRA, the checkpoint's `model.safetensors` holds the
  trained weights, and its `ema.safetensors` (under ZeRO-3, each process's slices of it) the EMA (exported by
  default when present, as the trainers' own exports do). Other trainer state in the checkpoint (an old policy,
  optimizer state) is not exported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .adapter import DiffusionAdapter

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
{job}"""


def export_pipeline(
    adapter: DiffusionAdapter,
    folder: Path,
    lora: dict | None,
    merge_lora: bool = False,
    overwrite: bool = False,
    card: str | None = None,
    extras: Callable[[Path, DiffusionAdapter], None] | None = None,
) -> Path:
    """Write the adapter's pipeline as users load it, atomically (see the module docstring); `card` becomes the
    folder's README.md; `extras(folder, adapter)` adds a kind's own files inside the same atomic write."""
    from transformers_cosmos3.checkpoint import atomic_directory

    with atomic_directory(folder, overwrite=overwrite) as scratch:
        if lora is not None and not merge_lora:
            from peft.utils import get_peft_model_state_dict

            (scratch / "lora").mkdir()
            state = get_peft_model_state_dict(adapter.transformer)
            adapter.save_lora(scratch / "lora", state, alpha=lora["alpha"], rank=lora["r"])
        else:
            if lora is not None:
                adapter.transformer.fuse_lora()
                adapter.transformer.unload_lora()
            adapter.pipeline.save_pretrained(scratch)
        if card is not None:
            (scratch / "README.md").write_text(card)
        if extras is not None:
            extras(scratch, adapter)
    return folder


def export_run(
    checkpoint: Path,
    out: Path,
    kind: str,
    record: dict,
    merge_lora: bool = False,
    ema: bool | None = None,
    overwrite: bool = False,
    extras: Callable[[Path, DiffusionAdapter], None] | None = None,
) -> Path:
    """Export a diffusion run's checkpoint (`record` is its job record); every refusal comes before loading.
    `extras` as `export_pipeline`'s."""
    from safetensors.torch import load_file

    from ..config import LoraSection, PipelineSection
    from ..export import check_destination, check_weights_readable, job_section
    from .loading import load_adapter, prepare_training
    from .weights import ExponentialAverage

    check_destination(out, overwrite)
    weights = checkpoint / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{checkpoint} has no model.safetensors")
    lora_section = LoraSection.model_validate(record["lora"]) if "lora" in record else None
    if merge_lora and lora_section is None:
        raise ValueError(f"{checkpoint} is a full fine-tune, not a LoRA; drop --merge-lora")
    has_ema = ExponentialAverage.saved_in(checkpoint)
    if ema and not has_ema:
        raise FileNotFoundError(
            f"{checkpoint} has no {ExponentialAverage.filename} (the run kept no EMA); drop --ema"
        )
    use_ema = has_ema if ema is None else ema
    check_weights_readable(checkpoint)

    model = PipelineSection.model_validate(record["model"])
    adapter = load_adapter(model)
    lora = prepare_training(adapter, lora_section)  # the trained parameters, as in the run
    adapter.transformer.load_state_dict(load_file(weights), strict=True)
    if use_ema:
        average = ExponentialAverage(adapter.transformer, decay=0.5)
        average.load(checkpoint)
        average.copy_into_model()

    where = out.resolve()  # the card's paths are absolute, as its base model's is: it is read from anywhere
    what = "LoRA merged into the weights" if merge_lora else ("LoRA" if lora else "full fine-tune")
    what += ", EMA weights" if use_ema else ""
    if lora and not merge_lora:
        usage = (
            "from diffusers import DiffusionPipeline\n\n"
            f'pipe = DiffusionPipeline.from_pretrained("{model.name_or_path}")\n'
            f"{adapter.lora_loading_call(where / 'lora')}"
        )
    else:
        usage = (
            f'from diffusers import DiffusionPipeline\n\npipe = DiffusionPipeline.from_pretrained("{where}")'
        )
    card = CARD.format(
        base=model.name_or_path, kind=kind, name=out.name, what=what, usage=usage, job=job_section(checkpoint)
    )
    return export_pipeline(
        adapter, out, lora, merge_lora=merge_lora, overwrite=overwrite, card=card, extras=extras
    )
