"""`Cosmos3ForConditionalGeneration`: the Cosmos3 reasoner from a checkpoint of any layout.

It is the native transformers class (a Qwen3-VL clone) with a stricter `from_pretrained`: the
folder may be a transformers, diffusers-export, flat, raw framework (`net.`/`net_ema.`) or vLLM
checkpoint, and every tensor must be accounted for. Generator-tower weights are skipped on
purpose; an unknown or a missing reasoner weight is an error that names it, never a silent
random init.
"""

from __future__ import annotations

import os

import torch
from transformers import AutoConfig
from transformers import Cosmos3OmniForConditionalGeneration as _Reasoner

from . import layouts
from .checkpoint import checkpoint_tensor_files, load_tensors, resolve_folder

HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download")


# The error every Cosmos3 loader raises for unknown, missing or doubled tensors (`layouts.check_names`);
# the old name stays importable.
MissingWeightsError = layouts.WeightNamesError


def reasoner_weight_names(config) -> set[str]:
    """The transformers names of the reasoner weights a checkpoint must provide for `config`."""
    with torch.device("meta"):
        names = set(_Reasoner(config).state_dict())
    text_config = getattr(config, "text_config", config)
    if getattr(config, "tie_word_embeddings", False) or getattr(text_config, "tie_word_embeddings", False):
        names.discard("lm_head.weight")  # tied to the embedding: not stored
    return names


def reasoner_state_dict_names(
    stored_names, model_names: set[str], layout: layouts.Layout, prefer_ema: bool = True, source="checkpoint"
) -> dict[str, str]:
    """{stored name: transformers name} for the reasoner's tensors; raise on unknown or missing ones.

    Generator-tower tensors are left out on purpose (the reasoner does not use them).
    """
    canonical = layouts.canonical_names(stored_names, layout, prefer_ema=prefer_ema)
    wanted = {
        stored: layouts.to_layout(name, layouts.Layout.TRANSFORMERS)
        for stored, name in canonical.items()
        if not layouts.is_generator_key(name)
    }
    layouts.check_names(wanted, model_names, source)
    return wanted


class Cosmos3ForConditionalGeneration(_Reasoner):
    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *args, prefer_ema: bool = True, **kwargs
    ):
        """Load from a hub id or folder in any Cosmos3 layout.

        `prefer_ema` picks the `net_ema.` copy of a raw framework checkpoint (else `net.`).
        Other keyword arguments (`dtype`, `device_map`, `attn_implementation`, ...) go to
        transformers' `from_pretrained` unchanged.
        """
        hub_kwargs = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
        folder = resolve_folder(pretrained_model_name_or_path, **hub_kwargs)
        config = kwargs.pop("config", None)
        if config is None:
            if not (folder / "config.json").is_file():
                raise FileNotFoundError(
                    f"{folder} has no config.json; a diffusers repo needs the root config.json of a Cosmos3 "
                    "export (`cosmos3-convert SRC DST --to diffusers` writes one)"
                )
            config = AutoConfig.from_pretrained(folder)
        layout, files = checkpoint_tensor_files(folder)
        names = reasoner_state_dict_names(
            files, reasoner_weight_names(config), layout, prefer_ema=prefer_ema, source=folder
        )
        state_dict = load_tensors(files, names)
        for key in HUB_KWARGS:
            kwargs.pop(key, None)
        model = super().from_pretrained(None, *args, config=config, state_dict=state_dict, **kwargs)
        # Record where the weights came from, as a path load would (PEFT adapters save it as their base).
        model.config._name_or_path = model.name_or_path = str(pretrained_model_name_or_path)
        return model
