"""Cosmos3 for Hugging Face transformers.

`import transformers_cosmos3` registers `cosmos3_omni` with the Auto classes only where the
installed transformers lacks it (>= 5.11 has it natively, and the native classes stay).
`Cosmos3ForConditionalGeneration.from_pretrained` loads the reasoner from any checkpoint layout.
"""

from transformers import AutoConfig, AutoModel, AutoModelForImageTextToText
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .layouts import Layout, canonical_names, detect_layout, from_layout, to_layout

__version__ = "0.1.0"


def register() -> list[str]:
    """Register the model types the installed transformers lacks; returns what was registered."""
    if "cosmos3_omni" in CONFIG_MAPPING:
        return []
    from transformers import Qwen3VLForConditionalGeneration, Qwen3VLModel

    from .configuration import Cosmos3OmniConfig

    model = type("Cosmos3OmniModel", (Qwen3VLModel,), {"config_class": Cosmos3OmniConfig})
    generation = type(
        "Cosmos3OmniForConditionalGeneration",
        (Qwen3VLForConditionalGeneration,),
        {"config_class": Cosmos3OmniConfig},
    )
    AutoConfig.register("cosmos3_omni", Cosmos3OmniConfig)
    AutoModel.register(Cosmos3OmniConfig, model)
    AutoModelForImageTextToText.register(Cosmos3OmniConfig, generation)
    return ["cosmos3_omni"]


REGISTERED = register()

from .modeling import Cosmos3ForConditionalGeneration, MissingWeightsError  # noqa: E402

__all__ = [
    "REGISTERED",
    "Cosmos3ForConditionalGeneration",
    "Layout",
    "MissingWeightsError",
    "canonical_names",
    "detect_layout",
    "from_layout",
    "register",
    "to_layout",
]
