"""Cosmos3 for Hugging Face diffusers.

`import diffusers_cosmos3` makes repos whose `model_index.json` names this package loadable with
`DiffusionPipeline.from_pretrained`, and registers the `cosmos3-omni` AutoPipeline key where the
installed diffusers lacks it. Upstream classes are re-exported, never replaced.

Adds what upstream lacks: `load_pipeline` / `load_transformer` for every checkpoint layout, the
`cosmos3-convert` converter (keeps action and sound weights), and LoRA key translation between
framework and diffusers names.
"""

from diffusers import (
    AutoencoderKLWan,
    Cosmos3OmniPipeline,
    Cosmos3OmniTransformer,
    DiffusionPipeline,
    ModelMixin,
    SchedulerMixin,
    UniPCMultistepScheduler,
)
from diffusers.pipelines import auto_pipeline

from .convert import ConversionError, convert
from .export import save_export
from .loading import load_pipeline, load_transformer
from .lora import (
    lora_to_diffusers,
    lora_to_framework,
    target_modules_to_diffusers,
    target_modules_to_framework,
)

__version__ = "0.1.0"


def register() -> list[str]:
    """Register the AutoPipeline key where missing; returns what was registered."""
    mapping = auto_pipeline.AUTO_CONDITION2VIDEO_PIPELINES_MAPPING  # where upstream files it
    if "cosmos3-omni" in mapping:
        return []
    mapping["cosmos3-omni"] = Cosmos3OmniPipeline
    return ["cosmos3-omni"]


REGISTERED = register()

# A `model_index.json` entry ["diffusers_cosmos3", "<Class>"] makes diffusers look the class and its
# loadable base classes up on this module; the names above (ModelMixin, SchedulerMixin,
# DiffusionPipeline) are what it checks against.
__all__ = [
    "REGISTERED",
    "AutoencoderKLWan",
    "ConversionError",
    "Cosmos3OmniPipeline",
    "Cosmos3OmniTransformer",
    "DiffusionPipeline",
    "ModelMixin",
    "SchedulerMixin",
    "UniPCMultistepScheduler",
    "convert",
    "load_pipeline",
    "load_transformer",
    "lora_to_diffusers",
    "lora_to_framework",
    "register",
    "save_export",
    "target_modules_to_diffusers",
    "target_modules_to_framework",
]
