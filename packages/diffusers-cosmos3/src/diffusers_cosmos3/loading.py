"""Load a Cosmos3 diffusers pipeline or transformer from a checkpoint of any layout.

Upstream `Cosmos3OmniTransformer.from_pretrained` reads the diffusers layout only. These helpers
also take the flat, transformers, vLLM and raw framework layouts (through the one key table),
check that every tensor is accounted for, and keep action and sound heads.
"""

from __future__ import annotations

import os

import torch
from accelerate import init_empty_weights
from diffusers import Cosmos3OmniTransformer, DiffusionPipeline

from transformers_cosmos3.checkpoint import (
    checkpoint_tensor_files,
    config_folders,
    load_tensors,
    resolve_folder,
)
from transformers_cosmos3.layouts import Layout, canonical_names, check_names, is_vision_key


def load_transformer(
    name_or_path: str | os.PathLike,
    prefer_ema: bool = True,
    dtype: torch.dtype | None = None,
    base: str | os.PathLike | None = None,
    trust_dcp_pickle: bool = False,
) -> Cosmos3OmniTransformer:
    """The generator transformer (with its reasoner tower) from a folder in any layout.

    `base`, a Cosmos3 repo of the same architecture, supplies the config a raw trainer checkpoint lacks.
    `trust_dcp_pickle` allows reading a torch DCP checkpoint (pickled metadata): only one you trust.
    """
    folder = resolve_folder(name_or_path)
    layout, files = checkpoint_tensor_files(folder, trust_dcp_pickle)
    if layout is Layout.DIFFUSERS and base is None:
        return Cosmos3OmniTransformer.from_pretrained(folder, subfolder="transformer", torch_dtype=dtype)
    _, pipeline_dir = config_folders(folder, layout, base)
    return _transformer_from(folder, layout, files, pipeline_dir / "transformer", prefer_ema, dtype)


def _transformer_from(folder, layout, files, config_dir, prefer_ema, dtype) -> Cosmos3OmniTransformer:
    """Build the transformer from `config_dir` on the meta device and give it the checkpoint's tensors
    (memory-mapped, as upstream's loader reads them), after checking their names."""
    canonical = canonical_names(files, layout, prefer_ema=prefer_ema)
    names = {stored: name for stored, name in canonical.items() if not is_vision_key(name)}
    with init_empty_weights():  # parameters on meta; buffers (rotary frequencies) are computed
        transformer = Cosmos3OmniTransformer.from_config(Cosmos3OmniTransformer.load_config(config_dir))
    check_names(names, transformer.state_dict(), folder)
    transformer.load_state_dict(load_tensors(files, names), strict=True, assign=True)
    if dtype is not None:
        transformer.to(dtype)
    return transformer.eval()


def load_pipeline(
    name_or_path: str | os.PathLike,
    prefer_ema: bool = True,
    base: str | os.PathLike | None = None,
    trust_dcp_pickle: bool = False,
    **kwargs,
) -> DiffusionPipeline:
    """A `Cosmos3OmniPipeline` from a folder in any layout (keyword arguments go to diffusers).

    `base`, a Cosmos3 repo of the same architecture, supplies everything but the weights (configs,
    VAE, tokenizer, scheduler): a raw trainer checkpoint holds weights only. `trust_dcp_pickle` allows
    reading a torch DCP checkpoint, whose metadata is pickled: only for checkpoints you trust.
    """
    folder = resolve_folder(name_or_path)
    layout, files = checkpoint_tensor_files(folder, trust_dcp_pickle)
    if layout is Layout.DIFFUSERS and base is None:
        return DiffusionPipeline.from_pretrained(folder, **kwargs)
    _, pipeline_dir = config_folders(folder, layout, base)
    transformer = _transformer_from(
        folder, layout, files, pipeline_dir / "transformer", prefer_ema, kwargs.get("torch_dtype")
    )
    return DiffusionPipeline.from_pretrained(pipeline_dir, transformer=transformer, **kwargs)
