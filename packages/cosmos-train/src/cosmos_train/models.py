"""Load the model and its processor for a job, freeze what the job asks, and build its LoRA config.

One path for a hub id or a local folder. Families:
- Cosmos3 reasoners (`cosmos3_omni`: Nano, Super; `cosmos3_edge`: Edge): through transformers-cosmos3, so
  every checkpoint layout loads.
- Other vision-language models (Qwen3-VL, Qwen2.5-VL, ...): `AutoModelForImageTextToText`.
- Causal text LMs (Qwen3, ...): `AutoModelForCausalLM`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from .config import ConfigError, LoraSection, ModelSection
from .launch.zero3 import init_deepspeed_comm

logger = logging.getLogger(__name__)

# Where the vision towers of the supported VLMs live; frozen with `freeze = ["vision"]` and kept free
# of LoRA adapters unless the job names them.
VISION_TOWER_PATTERN = r"(^|\.)(visual|vision_tower|vision_model)\."


@dataclass
class LoadedModel:
    model: PreTrainedModel
    processing_class: object  # a processor for VLMs, a tokenizer for text LMs
    is_vision_language: bool


def _dtype(name: str):
    return "auto" if name == "auto" else getattr(torch, name)


def load_model(section: ModelSection, packing: bool = False) -> LoadedModel:
    """Model and processor (VLMs) or tokenizer (text LMs) for `section.name_or_path`.

    With `packing` and no attention implementation asked for, packed rows use `segment_sdpa`
    (per-sequence SDPA), since plain SDPA would score every packed sequence against every other.
    """
    from transformers_cosmos3 import Reasoner, reasoner_class

    from . import attention

    init_deepspeed_comm()  # ZeRO-3 builds the model partitioned, over DeepSpeed's comm layer
    kwargs = {"dtype": _dtype(section.dtype), "trust_remote_code": section.trust_remote_code}
    if section.attn_implementation:
        kwargs["attn_implementation"] = section.attn_implementation
    elif packing:
        kwargs["attn_implementation"] = attention.NAME
    config = AutoConfig.from_pretrained(section.name_or_path, trust_remote_code=section.trust_remote_code)
    if config.model_type in set(Reasoner):
        model = reasoner_class(config).from_pretrained(section.name_or_path, **kwargs)
        is_vlm = True
    elif config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        model = AutoModelForImageTextToText.from_pretrained(section.name_or_path, **kwargs)
        is_vlm = True
    else:
        model = AutoModelForCausalLM.from_pretrained(section.name_or_path, **kwargs)
        is_vlm = False
    loader = AutoProcessor if is_vlm else AutoTokenizer
    processing_class = loader.from_pretrained(
        section.name_or_path, trust_remote_code=section.trust_remote_code
    )
    freeze(model, section.freeze)
    return LoadedModel(model, processing_class, is_vlm)


def freeze(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Turn off gradients for parameters whose name matches any regex; `vision` means the vision tower.

    Returns the frozen names. A pattern that matches nothing is an error: it is almost always a typo.
    """
    frozen = []
    for pattern in patterns:
        regex = re.compile(VISION_TOWER_PATTERN if pattern == "vision" else pattern)
        matched = [name for name, _ in model.named_parameters() if regex.search(name)]
        if not matched:
            raise ConfigError(f"[model] freeze pattern {pattern!r} matches no parameter")
        frozen += matched
    for name, parameter in model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)
    if frozen:
        logger.info("froze %d parameter tensors", len(set(frozen)))
    return frozen


def lora_config(section: LoraSection, is_vision_language: bool):
    """The PEFT `LoraConfig`; by default adapters skip the vision tower of a VLM."""
    from peft import LoraConfig

    exclude = section.exclude_modules
    if exclude is None and is_vision_language:
        exclude = [r".*(visual|vision_tower|vision_model)\..*"]
    return LoraConfig(
        r=section.r,
        lora_alpha=section.alpha,
        lora_dropout=section.dropout,
        target_modules=section.target_modules or "all-linear",
        exclude_modules="|".join(f"(?:{p})" for p in exclude) if exclude else None,
        task_type="CAUSAL_LM",
    )
