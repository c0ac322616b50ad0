"""Fallback configs, used only where the installed transformers lacks `cosmos3_omni`.

The Cosmos3 reasoner is a Qwen3-VL clone; upstream (transformers >= 5.11) ships it natively and
then these classes are never registered.
"""

from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig


class Cosmos3OmniConfig(Qwen3VLConfig):
    model_type = "cosmos3_omni"
