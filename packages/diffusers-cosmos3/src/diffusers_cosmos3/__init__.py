"""Cosmos3 for Hugging Face diffusers.

A repo whose `model_index.json` names this package loads with `DiffusionPipeline.from_pretrained`:
diffusers looks the classes up here, and upstream's are re-exported, never replaced. The
`cosmos3-omni` AutoPipeline key is upstream's own (diffusers >= 0.39), so nothing is registered.

Adds what upstream lacks: `load_pipeline` / `load_transformer` for every checkpoint layout, the
`cosmos3-convert` converter (keeps action and sound weights), and LoRA key translation between
framework and diffusers names.

Importing the package is cheap (so `cosmos3-convert --help` is instant): diffusers and torch load
when one of the names below that needs them is first used.
"""

import importlib

from .convert import ConversionError, convert
from .lora import (
    lora_to_diffusers,
    lora_to_framework,
    target_modules_to_diffusers,
    target_modules_to_framework,
)

__version__ = "0.1.0"

# {name: module it is loaded from on first use}. ModelMixin, SchedulerMixin and DiffusionPipeline are
# the loadable base classes diffusers checks a `["diffusers_cosmos3", "<Class>"]` entry against.
_LAZY = {
    "AutoencoderKLWan": "diffusers",
    "Cosmos3PackedBatch": "diffusers_cosmos3.batched",
    "Cosmos3ReasonerCache": "diffusers_cosmos3.batched",
    "Cosmos3SegmentAttnProcessor": "diffusers_cosmos3.batched",
    "Cosmos3TrainingSample": "diffusers_cosmos3.batched",
    "Cosmos3OmniPipeline": "diffusers",
    "Cosmos3OmniTransformer": "diffusers",
    "DiffusionPipeline": "diffusers",
    "ModelMixin": "diffusers",
    "SchedulerMixin": "diffusers",
    "UniPCMultistepScheduler": "diffusers",
    "batched_forward": "diffusers_cosmos3.batched",
    "pack_samples": "diffusers_cosmos3.batched",
    "per_sample_forward": "diffusers_cosmos3.batched",
    "save_export": "diffusers_cosmos3.export",
    "load_pipeline": "diffusers_cosmos3.loading",
    "load_transformer": "diffusers_cosmos3.loading",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AutoencoderKLWan",
    "ConversionError",
    "Cosmos3OmniPipeline",
    "Cosmos3OmniTransformer",
    "Cosmos3PackedBatch",
    "Cosmos3ReasonerCache",
    "Cosmos3SegmentAttnProcessor",
    "Cosmos3TrainingSample",
    "DiffusionPipeline",
    "ModelMixin",
    "SchedulerMixin",
    "UniPCMultistepScheduler",
    "batched_forward",
    "convert",
    "load_pipeline",
    "load_transformer",
    "lora_to_diffusers",
    "lora_to_framework",
    "pack_samples",
    "per_sample_forward",
    "save_export",
    "target_modules_to_diffusers",
    "target_modules_to_framework",
]
