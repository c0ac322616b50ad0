"""Tiny diffusers pipelines with random weights, one per family cosmos-train's diffusion trainers support.

Each is built offline from the family's real classes (transformer, VAE, text encoders, tokenizers,
scheduler) at toy sizes and saved with `save_pretrained`, so training loads it through the same
`DiffusionPipeline.from_pretrained` path as a hub id. For tests, examples and `cosmos-train make-tiny`.

    from cosmos_train.tiny_pipelines import save_tiny_pipeline
    save_tiny_pipeline("sd3", "/tmp/tiny-sd3")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from transformers_cosmos3.testing import randomize_weights


def byte_tokenizer(max_length: int, **special_tokens):
    """A byte-level BPE tokenizer (256 byte tokens, no merges) from an in-memory vocab, with a pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {symbol: index for index, symbol in enumerate(sorted(ByteLevel.alphabet()))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokens = {"pad_token": "<pad>", "eos_token": "</s>", "bos_token": "<s>", **special_tokens}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **tokens)
    tokenizer.model_max_length = max_length
    return tokenizer


def _vocab(tokenizer) -> int:
    return (len(tokenizer) + 7) // 8 * 8


def _seeded(seed: int, module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(seed)
    randomize_weights(module)
    return module.eval()


def build_sd3(seed: int = 0):
    """`StableDiffusion3Pipeline`: a 2-block MMDiT, two CLIP text encoders with projections, T5, a 2x VAE."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    clip_tokenizer = byte_tokenizer(77)
    t5_tokenizer = byte_tokenizer(64)

    def clip(offset: int):
        torch.manual_seed(seed + offset)
        config = CLIPTextConfig(
            vocab_size=_vocab(clip_tokenizer),
            hidden_size=32,
            intermediate_size=64,
            projection_dim=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=77,
            pad_token_id=clip_tokenizer.pad_token_id,
            eos_token_id=clip_tokenizer.eos_token_id,
        )
        return CLIPTextModelWithProjection(config).eval()

    torch.manual_seed(seed + 3)
    t5 = T5EncoderModel(
        T5Config(vocab_size=_vocab(t5_tokenizer), d_model=64, d_ff=64, d_kv=16, num_layers=2, num_heads=4)
    ).eval()
    transformer = SD3Transformer2DModel(
        sample_size=16,
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=64,
        caption_projection_dim=16,
        pooled_projection_dim=64,
        pos_embed_max_size=32,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(8, 16),
        layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=4,
        sample_size=32,
        shift_factor=0.0609,
        scaling_factor=1.5035,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    return StableDiffusion3Pipeline(
        transformer=_seeded(seed, transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_seeded(seed + 4, vae),
        text_encoder=clip(1),
        tokenizer=clip_tokenizer,
        text_encoder_2=clip(2),
        tokenizer_2=byte_tokenizer(77),
        text_encoder_3=t5,
        tokenizer_3=t5_tokenizer,
    )


# {family: (description, builder)}. Adapters' tests and `make-tiny` iterate over it.
PIPELINES: dict[str, tuple[str, Callable]] = {
    "sd3": ("StableDiffusion3Pipeline (MMDiT, CLIP x2 + T5, 2x VAE), 32x32 images", build_sd3),
}


def build_tiny_pipeline(family: str, seed: int = 0):
    if family not in PIPELINES:
        raise ValueError(f"unknown tiny pipeline {family!r}; expected one of: {', '.join(PIPELINES)}")
    return PIPELINES[family][1](seed=seed)


def save_tiny_pipeline(family: str, path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random pipeline of `family` (a key of `PIPELINES`) with `save_pretrained`."""
    path = Path(path)
    build_tiny_pipeline(family, seed=seed).save_pretrained(path)
    return path
