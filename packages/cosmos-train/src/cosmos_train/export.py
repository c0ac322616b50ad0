"""`cosmos-train export`: a trained checkpoint as a `save_pretrained` folder with a model card.

A LoRA checkpoint is exported as the adapter, or with `merge_lora` as the merged full model. The
tokenizer/processor travels along, and the folder appears atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers_cosmos3.checkpoint import atomic_directory

from .config import ModelSection
from .models import load_model

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


def _job_text(checkpoint: Path) -> str:
    for folder in (checkpoint, checkpoint.parent):
        job = folder / "cosmos_train_job.toml"
        if job.is_file():
            return f"\n## Training job\n\n```toml\n{job.read_text()}```\n"
    return ""


def export(
    checkpoint: str | Path, out: str | Path, merge_lora: bool = False, overwrite: bool = False
) -> Path:
    checkpoint, out = Path(checkpoint), Path(out)
    adapter_config = checkpoint / "adapter_config.json"
    if adapter_config.is_file():
        from peft import PeftModel

        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        loaded = load_model(ModelSection(name_or_path=base))
        model = PeftModel.from_pretrained(loaded.model, checkpoint)
        kind = "full" if merge_lora else "lora"
        if merge_lora:
            model = model.merge_and_unload()
    elif (checkpoint / "config.json").is_file():
        if merge_lora:
            raise ValueError(f"{checkpoint} is a full model, not a LoRA adapter; drop --merge-lora")
        loaded = load_model(ModelSection(name_or_path=str(checkpoint)))
        model, base, kind = loaded.model, str(checkpoint), "full"
    else:
        raise FileNotFoundError(f"{checkpoint} has neither adapter_config.json nor config.json")
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
            usage=_usage(kind, out, base),
            job=_job_text(checkpoint),
        )
        (scratch / "README.md").write_text(card)
    return out


def _processing_class(checkpoint: Path, fallback):
    """The processor/tokenizer saved with the checkpoint (the Trainer saves it), else the base model's."""
    if (checkpoint / "tokenizer_config.json").is_file():
        return type(fallback).from_pretrained(checkpoint)
    return fallback
