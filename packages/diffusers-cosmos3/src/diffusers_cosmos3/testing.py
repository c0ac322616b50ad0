"""Tiny Cosmos3 checkpoints with random weights, built offline in seconds, for tests and examples.

Real upstream classes at toy sizes: `Cosmos3OmniTransformer`, `AutoencoderKLWan` (Wan2.2 style),
`UniPCMultistepScheduler`, `Cosmos3AVAEAudioTokenizer`, plus the tokenizer, ViT and reasoner config
of `transformers_cosmos3.testing`. Not imported by `import diffusers_cosmos3`.

    from diffusers_cosmos3.testing import save_tiny_cosmos3, save_tiny_cosmos3_layouts
    repo = save_tiny_cosmos3("/tmp/tiny-cosmos3")               # diffusers export layout
    layouts = save_tiny_cosmos3_layouts("/tmp/layouts")         # one folder per layout
"""

from __future__ import annotations

from pathlib import Path

import torch

from transformers_cosmos3.testing import (
    ROPE_THETA,
    TINY,
    Sizes,
    build_processor,
    build_tokenizer,
    build_vision_encoder,
    randomize_weights,
    reasoner_config,
    vocab_size,
)

# Wan2.2 VAE at toy width: 16x spatial (8x conv + 2x2 patchify), 4x temporal compression.
LATENT_CHANNELS = 8
LATENT_PATCH = 2
ACTION_DIM = 16
SOUND_DIM = 64  # audio latent channels, as in Cosmos3


def build_transformer(
    tokenizer, action: bool = False, sound: bool = False, seed: int = 0, sizes: Sizes = TINY
):
    from diffusers import Cosmos3OmniTransformer

    torch.manual_seed(seed)
    transformer = Cosmos3OmniTransformer(
        head_dim=sizes.head_dim,
        hidden_size=sizes.hidden,
        intermediate_size=sizes.intermediate,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        num_hidden_layers=sizes.layers,
        latent_channel=LATENT_CHANNELS,
        latent_patch_size=LATENT_PATCH,
        patch_latent_dim=LATENT_CHANNELS * LATENT_PATCH**2,
        rope_theta=ROPE_THETA,
        rope_scaling={
            "mrope_section": list(sizes.mrope_section),
            "mrope_interleaved": True,
            "rope_type": "default",
        },
        vocab_size=vocab_size(tokenizer),
        action_gen=action,
        action_dim=ACTION_DIM if action else None,
        sound_gen=sound,
        sound_dim=SOUND_DIM if sound else None,
    )
    randomize_weights(transformer)
    return transformer.eval()


def build_vae(seed: int = 0):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    vae = AutoencoderKLWan(
        base_dim=8,
        decoder_base_dim=8,
        z_dim=LATENT_CHANNELS,
        dim_mult=[1, 2, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        is_residual=True,
        in_channels=3 * 2 * 2,
        out_channels=3 * 2 * 2,
        patch_size=2,
        scale_factor_temporal=4,
        scale_factor_spatial=16,
        latents_mean=[0.0] * LATENT_CHANNELS,
        latents_std=[1.0] * LATENT_CHANNELS,
    )
    return vae.eval()


def build_scheduler():
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, num_train_timesteps=1000
    )


def build_sound_tokenizer(seed: int = 0):
    """A decoder-only Cosmos3 AVAE at toy width (48 kHz stereo, 1920 samples per latent step)."""
    from diffusers import Cosmos3AVAEAudioTokenizer

    torch.manual_seed(seed)
    return Cosmos3AVAEAudioTokenizer(vocoder_input_dim=SOUND_DIM, dec_dim=4, encoder_enabled=False).eval()


def build_pipeline(action: bool = False, sound: bool = False, seed: int = 0, sizes: Sizes = TINY):
    """The tiny diffusers `Cosmos3OmniPipeline` (safety checker off: it needs cosmos_guardrail)."""
    from diffusers import Cosmos3OmniPipeline

    tokenizer = build_tokenizer()
    return Cosmos3OmniPipeline(
        transformer=build_transformer(tokenizer, action=action, sound=sound, seed=seed, sizes=sizes),
        text_tokenizer=tokenizer,
        vae=build_vae(seed=seed),
        scheduler=build_scheduler(),
        sound_tokenizer=build_sound_tokenizer(seed=seed) if sound else None,
        enable_safety_checker=False,
    )


def save_tiny_cosmos3(
    path: str | Path, action: bool = False, sound: bool = False, seed: int = 0, sizes: Sizes = TINY
) -> Path:
    """Write a tiny Cosmos3 repo in the framework-export diffusers layout.

    The folder holds the diffusers pipeline plus the `vision_encoder/` sidecar, the root
    `config.json` and the root safetensors index, so diffusers, transformers and vLLM all load it.
    """
    from .export import save_export

    pipeline = build_pipeline(action=action, sound=sound, seed=seed, sizes=sizes)
    tokenizer = pipeline.text_tokenizer
    return save_export(
        pipeline,
        Path(path),
        vision_encoder=build_vision_encoder(seed=seed, sizes=sizes),
        reasoner_config=reasoner_config(tokenizer, sizes),
        processor=build_processor(tokenizer),
    )


def save_tiny_cosmos3_layouts(
    root: str | Path, action: bool = False, seed: int = 0, sizes: Sizes = TINY
) -> dict[str, Path]:
    """The same tiny model in every checkpoint layout: {layout name: folder}."""
    from .convert import convert

    root = Path(root)
    diffusers_dir = save_tiny_cosmos3(root / "diffusers", action=action, seed=seed, sizes=sizes)
    folders = {"diffusers": diffusers_dir}
    for layout in ("transformers", "flat", "framework", "vllm"):
        folders[layout] = convert(diffusers_dir, root / layout, to=layout)
    add_training_copy(folders["framework"])
    return folders


def add_training_copy(framework_dir: Path, seed: int = 0) -> None:
    """Make a raw framework checkpoint hold both copies, as training writes it.

    The model itself becomes the EMA copy (`net_ema.`); `net.` gets perturbed weights, so a
    loader that picks the wrong copy gives different outputs.
    """
    from safetensors.torch import load_file, save_file

    weights = framework_dir / "model.safetensors"
    ema = load_file(weights)
    generator = torch.Generator().manual_seed(seed)
    raw = {k: v + 0.01 * torch.randn(v.shape, generator=generator).to(v.dtype) for k, v in ema.items()}
    tensors = {"net_ema." + k.removeprefix("net."): v for k, v in ema.items()} | raw
    save_file(tensors, weights, metadata={"format": "pt"})
