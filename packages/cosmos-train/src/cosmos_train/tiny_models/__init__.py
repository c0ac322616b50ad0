"""Tiny models with random weights for the families cosmos-train trains, built offline in seconds.

Each is saved with `save_pretrained` (weights, config, tokenizer/processor), so the same loading
code that takes a hub id takes its folder. The Cosmos3 builders live in the shims
(`transformers_cosmos3.testing`, `diffusers_cosmos3.testing`); the text LM and VLMs here reuse
their tokenizer, chat template and ViT sizes.

    from cosmos_train.tiny_models import save_tiny_model
    save_tiny_model("qwen3_vl", "/tmp/tiny-qwen3-vl")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# What `save_tiny_model` builds: {kind: description}. Kept free of heavy imports: `make-tiny --help` lists it.
KINDS = {
    "qwen3": "Qwen3 text LM with its tokenizer",
    "qwen3_vl": "Qwen3-VL with its processor",
    "qwen2_5_vl": "Qwen2.5-VL with its processor",
    "cosmos3": "Cosmos3 reasoner (transformers layout) with its processor",
    "cosmos3_edge": "Cosmos3 Edge reasoner (transformers layout) with its processor",
    "sd3": "StableDiffusion3Pipeline (MMDiT, CLIP x2 + T5, 2x VAE), 32x32 images",
    "cosmos3_pipeline": "Cosmos3OmniPipeline (reasoner + generator MoT, Wan2.2 VAE), 9 frames of 32x32",
    "cosmos3_action": "Cosmos3OmniPipeline with action heads (action_dim 16, 32 domains), for action-sft",
    "sana": "SanaPipeline (linear DiT, Gemma2, 4x DC-AE), 32x32 images",
    "sana_video": "SanaVideoPipeline (video DiT, Gemma2, Wan VAE), 9 frames of 32x32",
    "cosmos_predict2_5": "Cosmos2_5_PredictBasePipeline (Cosmos DiT, Qwen2.5-VL, Wan VAE), 9 frames of 32x32",
}
# Diffusers pipelines for the diffusion trainers: kind -> `cosmos_train.tiny_models.pipelines` family (a family named like
# a model kind above gets a `_pipeline` suffix).
PIPELINE_KINDS = {
    "sd3": "sd3",
    "cosmos3_pipeline": "cosmos3",
    "cosmos3_action": "cosmos3_action",
    "sana": "sana",
    "sana_video": "sana_video",
    "cosmos_predict2_5": "cosmos_predict2_5",
}

__all__ = ["KINDS", "PIPELINE_KINDS", "save_tiny_model", "save_tiny_text_lm", "save_tiny_vlm"]


def __getattr__(name: str) -> Any:
    # The shims' builders, re-exported without importing torch for `KINDS`.
    if name in ("save_tiny_cosmos3_reasoner", "Sizes", "TINY"):
        from transformers_cosmos3 import testing

        return getattr(testing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save_tiny_text_lm(path: str | Path, seed: int = 0, sizes=None) -> Path:
    """A tiny Qwen3 causal LM with the tiny tokenizer, saved with `save_pretrained`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from transformers_cosmos3.testing import TINY, build_tokenizer, randomize_weights, text_config

    sizes = sizes or TINY
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**text_config(tokenizer, sizes)))
    randomize_weights(model)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def save_tiny_vlm(path: str | Path, family: str = "qwen3_vl", seed: int = 0, sizes=None) -> Path:
    """A tiny Qwen3-VL or Qwen2.5-VL with its processor, saved with `save_pretrained`; `sizes` sets the
    text tower (benchmarks use bigger ones)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from transformers_cosmos3.testing import (
        ROPE_THETA,
        TINY,
        build_tokenizer,
        randomize_weights,
        text_config,
        vision_config,
    )

    sizes = sizes or TINY
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
    from transformers_cosmos3.testing import CHAT_TEMPLATE, build_processor

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


def save_tiny_model(kind: str, path: str | Path) -> Path:
    """Save a tiny random model of `kind` (one of `KINDS`) to `path`; returns the folder."""
    if kind == "qwen3":
        return save_tiny_text_lm(path)
    if kind in ("qwen3_vl", "qwen2_5_vl"):
        return save_tiny_vlm(path, family=kind)
    if kind in ("cosmos3", "cosmos3_edge"):
        from transformers_cosmos3.testing import save_tiny_cosmos3_reasoner

        return (
            save_tiny_cosmos3_reasoner(path)
            if kind == "cosmos3"
            else save_tiny_cosmos3_reasoner(path, family=kind)
        )
    if kind in PIPELINE_KINDS:
        from cosmos_train.tiny_models.pipelines import save_tiny_pipeline

        return save_tiny_pipeline(PIPELINE_KINDS[kind], path)
    raise ValueError(f"unknown tiny model kind {kind!r}; expected one of: {', '.join(KINDS)}")
