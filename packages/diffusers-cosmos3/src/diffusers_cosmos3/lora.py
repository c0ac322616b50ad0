"""LoRA key translation between framework and diffusers names for the Cosmos3 transformer.

Framework adapters name the generator copies `q_proj_moe_gen` ... under `net.language_model.model.`;
diffusers/PEFT adapters on `Cosmos3OmniTransformer` name them `add_q_proj` / `to_add_out` under
`layers.N.` (optionally behind `transformer.` or `base_model.model.`). Module paths go through the
same key table as full checkpoints, so adapters and checkpoints can never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from transformers_cosmos3.layouts import Layout, from_layout, to_layout

# The adapter tensor's own part of the key: everything from the `lora_` segment on.
_LORA_SUFFIX = re.compile(
    r"\.(lora_(?:A|B|embedding_A|embedding_B|magnitude_vector)(?:\.[^.]+)?\.?(?:weight|bias)?)$"
)
_WRAPPERS = ("base_model.model.", "transformer.")


def _split(key: str) -> tuple[str, str]:
    match = _LORA_SUFFIX.search(key)
    if match is None:
        raise ValueError(f"{key!r} is not a LoRA tensor name (no lora_A/lora_B segment)")
    return key[: match.start()], match.group(1)


def _module_to(module: str, layout: Layout, framework_prefix: str) -> str:
    return to_layout(module + ".weight", layout, framework_prefix=framework_prefix).removesuffix(".weight")


def _module_from(module: str, layout: Layout) -> str:
    return from_layout(module + ".weight", layout).removesuffix(".weight")


def lora_to_framework(state_dict: Mapping, framework_prefix: str = "net.") -> dict:
    """Diffusers/PEFT LoRA tensors -> framework names (`net.language_model.model.layers.N...`)."""
    out = {}
    for key, value in state_dict.items():
        module, suffix = _split(key)
        for wrapper in _WRAPPERS:
            module = module.removeprefix(wrapper)
        out[f"{_module_to(module, Layout.FRAMEWORK, framework_prefix)}.{suffix}"] = value
    return out


def lora_to_diffusers(state_dict: Mapping, wrapper: str = "") -> dict:
    """Framework LoRA tensors -> diffusers names; `wrapper` (e.g. "transformer.") is prepended."""
    out = {}
    for key, value in state_dict.items():
        module, suffix = _split(key)
        for prefix in ("net_ema.", "net."):
            if module.startswith(prefix):
                module = module[len(prefix) :]
                break
        out[f"{wrapper}{_module_from(module, Layout.FRAMEWORK)}.{suffix}"] = value
    return out


def target_modules_to_framework(names: Iterable[str]) -> list[str]:
    """PEFT `target_modules` leaf names: `add_q_proj` -> `q_proj_moe_gen`, `to_q` -> `q_proj`, ..."""
    return [_module_to(f"layers.0.self_attn.{n}", Layout.FRAMEWORK, "").rsplit(".", 1)[-1] for n in names]


def target_modules_to_diffusers(names: Iterable[str]) -> list[str]:
    """PEFT `target_modules` leaf names: `q_proj_moe_gen` -> `add_q_proj`, `q_proj` -> `to_q`, ..."""
    return [
        _module_from(f"language_model.model.layers.0.self_attn.{n}", Layout.FRAMEWORK).rsplit(".", 1)[-1]
        for n in names
    ]
