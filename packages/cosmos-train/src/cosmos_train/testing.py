"""Tiny models with random weights for the families cosmos-train trains, built offline in seconds.

Each is saved with `save_pretrained` (weights, config, tokenizer/processor), so the same loading
code that takes a hub id takes its folder. The Cosmos3 builders live in the shims
(`transformers_cosmos3.testing`, `diffusers_cosmos3.testing`); the text LM and VLMs here reuse
their tokenizer, chat template and ViT sizes.

    from cosmos_train.testing import save_tiny_model
    save_tiny_model("qwen3_vl", "/tmp/tiny-qwen3-vl")
"""

from __future__ import annotations

from pathlib import Path

import torch

from cosmos_train.tiny_pipelines import PIPELINES, save_tiny_pipeline
from transformers_cosmos3.testing import (
    CHAT_TEMPLATE,
    ROPE_THETA,
    TINY,
    Sizes,
    build_processor,
    build_tokenizer,
    randomize_weights,
    save_tiny_cosmos3_reasoner,
    text_config,
    vision_config,
)

__all__ = ["KINDS", "save_tiny_cosmos3_reasoner", "save_tiny_model", "save_tiny_text_lm", "save_tiny_vlm"]


def save_tiny_text_lm(path: str | Path, seed: int = 0, sizes: Sizes = TINY) -> Path:
    """A tiny Qwen3 causal LM with the tiny tokenizer, saved with `save_pretrained`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**text_config(tokenizer, sizes)))
    randomize_weights(model)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def save_tiny_vlm(path: str | Path, family: str = "qwen3_vl", seed: int = 0, sizes: Sizes = TINY) -> Path:
    """A tiny Qwen3-VL or Qwen2.5-VL with its processor, saved with `save_pretrained`; `sizes` sets the
    text tower (benchmarks use bigger ones)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    tokenizer = build_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    text = text_config(tokenizer, sizes, mrope=family == "qwen3_vl")
    if family == "qwen3_vl":
        vision = vision_config(sizes).to_dict()
    elif family == "qwen2_5_vl":
        text["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": ROPE_THETA,
            "mrope_section": [4, 2, 2],
        }
        vision = {
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 8,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": sizes.hidden,
            "window_size": 32,
            "fullatt_block_indexes": [1],
        }
    else:
        raise ValueError(f"unknown tiny VLM family {family!r}; expected qwen3_vl or qwen2_5_vl")
    config = AutoConfig.for_model(
        family,
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    randomize_weights(model)
    model.save_pretrained(path)
    _vlm_processor(tokenizer, family).save_pretrained(path)
    return Path(path)


def _vlm_processor(tokenizer, family: str):
    if family == "qwen3_vl":
        return build_processor(tokenizer)
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    side = 16
    size = {"shortest_edge": side * side, "longest_edge": 64 * side * side}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=8, merge_size=2, size=size),
        video_processor=Qwen2VLVideoProcessor(patch_size=8, merge_size=2, temporal_patch_size=2, size=size),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


# What `save_tiny_model` builds: {kind: description}.
KINDS = {
    "qwen3": "Qwen3 text LM with its tokenizer",
    "qwen3_vl": "Qwen3-VL with its processor",
    "qwen2_5_vl": "Qwen2.5-VL with its processor",
    "cosmos3": "Cosmos3 reasoner (transformers layout) with its processor",
    "cosmos3_edge": "Cosmos3 Edge reasoner (transformers layout) with its processor",
}
# Diffusers pipelines for the diffusion trainers (`cosmos_train.tiny_pipelines`); a family named like a
# model kind above gets a `_pipeline` suffix (`cosmos3_pipeline`).
PIPELINE_KINDS = {(f"{f}_pipeline" if f in KINDS else f): f for f in PIPELINES}
KINDS |= {kind: PIPELINES[family][0] for kind, family in PIPELINE_KINDS.items()}


def save_tiny_model(kind: str, path: str | Path) -> Path:
    """Save a tiny random model of `kind` (one of `KINDS`) to `path`; returns the folder."""
    if kind == "qwen3":
        return save_tiny_text_lm(path)
    if kind in ("qwen3_vl", "qwen2_5_vl"):
        return save_tiny_vlm(path, family=kind)
    if kind == "cosmos3":
        return save_tiny_cosmos3_reasoner(path)
    if kind == "cosmos3_edge":
        return save_tiny_cosmos3_reasoner(path, family="cosmos3_edge")
    if kind in PIPELINE_KINDS:
        return save_tiny_pipeline(PIPELINE_KINDS[kind], path)
    raise ValueError(f"unknown tiny model kind {kind!r}; expected one of: {', '.join(KINDS)}")
