"""Cosmos3 for Hugging Face transformers.

`Cosmos3ForConditionalGeneration.from_pretrained` (Nano, Super) and
`Cosmos3EdgeForConditionalGeneration.from_pretrained` (Edge) load the reasoner from any checkpoint
layout; `reasoner_class(config)` picks between them. The model classes are transformers' own
`cosmos3_omni` and `cosmos3_edge` (transformers >= 5.15 ships both), so nothing is registered. `import transformers_cosmos3` is cheap: torch and transformers load only when the model
class is first used, so tools that need only the key table (`layouts`) stay fast.
"""

from .layouts import (
    Layout,
    Reasoner,
    WeightNamesError,
    canonical_names,
    detect_layout,
    from_layout,
    to_layout,
)

__version__ = "0.1.0"

_FROM_MODELING = (
    "Cosmos3ForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration",
    "MissingWeightsError",
    "reasoner_class",
)


def __getattr__(name: str):
    if name in _FROM_MODELING:
        from . import modeling

        return getattr(modeling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Cosmos3EdgeForConditionalGeneration",
    "Cosmos3ForConditionalGeneration",
    "Layout",
    "MissingWeightsError",
    "Reasoner",
    "WeightNamesError",
    "canonical_names",
    "detect_layout",
    "from_layout",
    "reasoner_class",
    "to_layout",
]
