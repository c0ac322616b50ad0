"""`cosmos-train export` of a language-model run (SFT, GRPO): a checkpoint as a `save_pretrained` folder with a
model card. Diffusion runs export through `cosmos_train.diffusion.export`; `kinds.py` says which a run's kind uses.

A LoRA checkpoint is exported as the adapter, or with `merge_lora` as the merged full model. The
tokenizer/processor travels along, and the folder appears atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from .config import ModelSection
from .jobs import JOB_RECORD

# The safetensors names PEFT and transformers save under (their SAFETENSORS_WEIGHTS_NAME,
# SAFE_WEIGHTS_NAME and SAFE_WEIGHTS_INDEX_NAME), spelled out so a refusal needs neither library.
ADAPTER_WEIGHTS = ("adapter_model.safetensors",)
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")

CARD = """---
library_name: {library}
base_model: {base}
tags: [cosmos-train, {kind}]
---

# {name}

Fine-tuned with [cosmos-train](https://pypi.org/project/cosmos-train/) from `{base}`
({kind}{merged}).

```python
{usage}
```
{job}"""


def _usage(kind: str, out: Path, base: str) -> str:
    if kind == "lora":
        return (
            "from peft import PeftModel\nfrom transformers import AutoModelForImageTextToText\n\n"
            f'base = AutoModelForImageTextToText.from_pretrained("{base}")\n'
            f'model = PeftModel.from_pretrained(base, "{out}")'
        )
    return f'from transformers import AutoModelForImageTextToText\n\nmodel = AutoModelForImageTextToText.from_pretrained("{out}")'


def job_section(checkpoint: Path) -> str:
    """The model card's "Training job" section: the run's job record (in `checkpoint` or its parent), or ''. Both
    exporters' cards end with it."""
    for folder in (checkpoint, checkpoint.parent):
        job = folder / JOB_RECORD
        if job.is_file():
            return f"\n## Training job\n\n```toml\n{job.read_text()}```\n"
    return ""


def check_destination(out: Path, overwrite: bool) -> None:
    """`out` may be written: it does not exist, or `overwrite` is given and it is a previous export (or an empty
    folder). A folder of anything else (a user's own files) is never replaced."""
    if not out.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    if not is_export(out):
        raise FileExistsError(
            f"{out} is not a previous export (no model card tagged cosmos-train beside exported weights); "
            "--overwrite replaces only an export: remove it yourself or pick another folder"
        )


def is_export(folder: Path) -> bool:
    """Whether `folder` is what an export writes (so --overwrite may replace it): an empty folder, or one with its
    model card (README.md tagged cosmos-train) and exported weights (an adapter, a model, `lora/` or a pipeline)."""
    if not folder.is_dir():
        return False
    if not any(folder.iterdir()):
        return True
    card = folder / "README.md"
    try:
        front = card.read_text().split("---")[1] if card.is_file() else ""
    except (OSError, UnicodeDecodeError, IndexError):
        return False
    tagged = any(line.startswith("tags:") and "cosmos-train" in line for line in front.splitlines())
    exported = ("adapter_config.json", "config.json", "model_index.json", "lora")
    return tagged and any((folder / name).exists() for name in exported)


def check_weights_readable(checkpoint: Path) -> None:
    """Every safetensors file of `checkpoint` reads (headers only): a truncated file is named in one line before
    any model loads."""
    from .checkpoints import unreadable_weights

    bad = unreadable_weights(checkpoint)
    if bad is not None:
        raise ValueError(f"{bad[0]}: unreadable weights file ({bad[1]}); export another checkpoint")


def export_run(
    checkpoint: Path,
    out: Path,
    kind: str | None = None,
    record: dict | None = None,
    merge_lora: bool = False,
    ema: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """The exporter of the language kinds (`kinds.EXPORTERS`): `export`, which needs no job record."""
    if ema is not None:
        raise ValueError(f"{checkpoint}: --ema/--no-ema applies to diffusion runs only")
    return export(checkpoint, out, merge_lora=merge_lora, overwrite=overwrite)


def export(
    checkpoint: str | Path, out: str | Path, merge_lora: bool = False, overwrite: bool = False
) -> Path:
    checkpoint, out = Path(checkpoint), Path(out)
    # Every refusal comes before loading: a model load (and a merge) can take minutes.
    check_destination(out, overwrite)
    is_adapter = _check_checkpoint(checkpoint)
    if merge_lora and not is_adapter:
        raise ValueError(f"{checkpoint} is a full model, not a LoRA adapter; drop --merge-lora")
    check_weights_readable(checkpoint)

    from transformers_cosmos3.checkpoint import atomic_directory

    if is_adapter:
        from peft import PeftModel

        base = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
        loaded = load_model(ModelSection(name_or_path=base))
        model = PeftModel.from_pretrained(loaded.model, checkpoint)
        kind = "full" if merge_lora else "lora"
        if merge_lora:
            model = model.merge_and_unload()
    else:
        loaded = load_model(ModelSection(name_or_path=str(checkpoint)))
        model, base, kind = loaded.model, str(checkpoint), "full"
    processing_class = _processing_class(checkpoint, loaded.processing_class)

    with atomic_directory(out, overwrite=overwrite) as scratch:
        model.save_pretrained(scratch)
        processing_class.save_pretrained(scratch)
        card = CARD.format(
            library="peft" if kind == "lora" else "transformers",
            base=base,
            kind=kind,
            name=out.name,
            merged=", LoRA merged into the weights" if merge_lora else "",
            usage=_usage(kind, out.resolve(), base),
            job=job_section(checkpoint),
        )
        (scratch / "README.md").write_text(card)
    return out


def _check_checkpoint(checkpoint: Path) -> bool:
    """True for a LoRA adapter, False for a full model; raises if `checkpoint` holds neither with weights.

    Only safetensors weights count: what the Trainer writes, and never unpickled.
    """
    if not checkpoint.is_dir():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    is_adapter = (checkpoint / "adapter_config.json").is_file()
    if not is_adapter and not (checkpoint / "config.json").is_file():
        raise FileNotFoundError(f"{checkpoint} has neither adapter_config.json nor config.json")
    weights = ADAPTER_WEIGHTS if is_adapter else MODEL_WEIGHTS
    if not any((checkpoint / name).is_file() for name in weights):
        raise FileNotFoundError(f"{checkpoint} has no weights ({' or '.join(weights)})")
    return is_adapter


def load_model(section: ModelSection):
    """`cosmos_train.models.load_model`, imported on first use: the refusals need no torch."""
    from .models import load_model as load

    return load(section)


def _processing_class(checkpoint: Path, fallback):
    """The processor/tokenizer saved with the checkpoint (the Trainer saves it), else the base model's."""
    if (checkpoint / "tokenizer_config.json").is_file():
        return type(fallback).from_pretrained(checkpoint)
    return fallback
