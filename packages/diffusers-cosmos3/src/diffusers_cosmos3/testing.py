"""Tiny Cosmos3 checkpoints with random weights, built offline in seconds, for tests and examples.

Real upstream classes at toy sizes: `Cosmos3OmniTransformer`, `AutoencoderKLWan` (Wan2.2 style),
`UniPCMultistepScheduler`, `Cosmos3AVAEAudioTokenizer`, plus the tokenizer, ViT and reasoner config
of `transformers_cosmos3.testing`. `family="cosmos3_edge"` builds Cosmos3 Edge instead of Nano: the
transformer with relu2 MLPs and no text q/k norms, and Edge's SigLIP2 ViT with its projector. Not
imported by `import diffusers_cosmos3`.

    from diffusers_cosmos3.testing import save_tiny_cosmos3, save_tiny_cosmos3_layouts
    repo = save_tiny_cosmos3("/tmp/tiny-cosmos3")               # diffusers export layout
    layouts = save_tiny_cosmos3_layouts("/tmp/layouts")         # one folder per layout
    edge = save_tiny_cosmos3("/tmp/tiny-edge", family="cosmos3_edge")
"""

from __future__ import annotations

from pathlib import Path

import torch

from transformers_cosmos3.layouts import EDGE_VISION_ROOTS, Reasoner
from transformers_cosmos3.testing import (
    TINY,
    Sizes,
    build_processor,
    build_reasoner,
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


# Edge's text tower in the diffusers transformer: relu2 MLP without a gate, Nemotron norms, no q/k norms
# on the reasoner's attention (the generator's keys get a norm of their own).
EDGE_TRANSFORMER = {"hidden_act": "relu2", "qk_norm_for_text": False, "use_und_k_norm_for_gen": True}


def build_transformer(
    tokenizer,
    action: bool = False,
    sound: bool = False,
    seed: int = 0,
    sizes: Sizes = TINY,
    family: Reasoner | str = Reasoner.OMNI,
):
    from diffusers import Cosmos3OmniTransformer

    torch.manual_seed(seed)
    transformer = Cosmos3OmniTransformer(
        **(EDGE_TRANSFORMER if Reasoner(family) is Reasoner.EDGE else {}),
        head_dim=sizes.head_dim,
        hidden_size=sizes.hidden,
        intermediate_size=sizes.intermediate,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        num_hidden_layers=sizes.layers,
        latent_channel=LATENT_CHANNELS,
        latent_patch_size=LATENT_PATCH,
        patch_latent_dim=LATENT_CHANNELS * LATENT_PATCH**2,
        rope_theta=sizes.rope_theta,
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


def build_pipeline(
    action: bool = False,
    sound: bool = False,
    seed: int = 0,
    sizes: Sizes = TINY,
    family: Reasoner | str = Reasoner.OMNI,
):
    """The tiny diffusers `Cosmos3OmniPipeline` (safety checker off: it needs cosmos_guardrail)."""
    from diffusers import Cosmos3OmniPipeline

    tokenizer = build_tokenizer()
    return Cosmos3OmniPipeline(
        transformer=build_transformer(
            tokenizer, action=action, sound=sound, seed=seed, sizes=sizes, family=family
        ),
        text_tokenizer=tokenizer,
        vae=build_vae(seed=seed),
        scheduler=build_scheduler(),
        sound_tokenizer=build_sound_tokenizer(seed=seed) if sound else None,
        enable_safety_checker=False,
    )


def build_edge_vision_encoder(tokenizer, seed: int = 0, sizes: Sizes = TINY) -> dict[str, torch.Tensor]:
    """Edge's SigLIP2 ViT and projector under their canonical names (`model.visual.*`, `model.projector.*`),
    taken from a native `Cosmos3EdgeForConditionalGeneration` with random weights."""
    reasoner = build_reasoner(tokenizer, seed=seed, sizes=sizes, family=Reasoner.EDGE)
    return {k: v.clone() for k, v in reasoner.state_dict().items() if k.startswith(EDGE_VISION_ROOTS)}


def save_tiny_cosmos3(
    path: str | Path,
    action: bool = False,
    sound: bool = False,
    seed: int = 0,
    sizes: Sizes = TINY,
    family: Reasoner | str = Reasoner.OMNI,
) -> Path:
    """Write a tiny Cosmos3 repo in the framework-export diffusers layout.

    The folder holds the diffusers pipeline plus the `vision_encoder/` sidecar, the root
    `config.json` and the root safetensors index, so diffusers, transformers and vLLM all load it.
    """
    from .export import save_export

    family = Reasoner(family)
    pipeline = build_pipeline(action=action, sound=sound, seed=seed, sizes=sizes, family=family)
    tokenizer = pipeline.text_tokenizer
    if family is Reasoner.EDGE:
        vision_encoder = build_edge_vision_encoder(tokenizer, seed=seed, sizes=sizes)
    else:
        vision_encoder = build_vision_encoder(seed=seed, sizes=sizes)
    return save_export(
        pipeline,
        Path(path),
        vision_encoder=vision_encoder,
        reasoner_config=reasoner_config(tokenizer, sizes, family),
        processor=build_processor(tokenizer, family),
    )


# The layouts each family has: vLLM reads Edge from the diffusers export only (see `convert.check_target`).
LAYOUTS = {
    Reasoner.OMNI: ("transformers", "flat", "framework", "vllm"),
    Reasoner.EDGE: ("transformers", "flat", "framework"),
}


def save_tiny_cosmos3_layouts(
    root: str | Path,
    action: bool = False,
    seed: int = 0,
    sizes: Sizes = TINY,
    family: Reasoner | str = Reasoner.OMNI,
) -> dict[str, Path]:
    """The same tiny model in every checkpoint layout of its family: {layout name: folder}."""
    from .convert import convert

    root = Path(root)
    diffusers_dir = save_tiny_cosmos3(
        root / "diffusers", action=action, seed=seed, sizes=sizes, family=family
    )
    folders = {"diffusers": diffusers_dir}
    for layout in LAYOUTS[Reasoner(family)]:
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
