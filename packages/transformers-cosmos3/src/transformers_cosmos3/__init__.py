"""Cosmos3 for Hugging Face transformers.

`Cosmos3ForConditionalGeneration.from_pretrained` loads the reasoner from any checkpoint layout.
The model class is transformers' own `cosmos3_omni` (transformers >= 5.11 ships it), so nothing is
registered. `import transformers_cosmos3` is cheap: torch and transformers load only when the model
class is first used, so tools that need only the key table (`layouts`) stay fast.
"""

from .layouts import Layout, WeightNamesError, canonical_names, detect_layout, from_layout, to_layout

__version__ = "0.1.0"

_FROM_MODELING = ("Cosmos3ForConditionalGeneration", "MissingWeightsError")


def __getattr__(name: str):
    if name in _FROM_MODELING:
        from . import modeling

        return getattr(modeling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Cosmos3ForConditionalGeneration",
    "Layout",
    "MissingWeightsError",
    "WeightNamesError",
    "canonical_names",
    "detect_layout",
    "from_layout",
    "to_layout",
]
