"""Tiny Cosmos3 checkpoints with random weights, built offline in seconds.

Real upstream classes at toy sizes: `Cosmos3OmniTransformer`, `AutoencoderKLWan` (Wan2.2 style),
`UniPCMultistepScheduler`, a byte-level tokenizer with the Cosmos3 chat template and vision
tokens, and a Qwen3-VL ViT for the reasoner. Tests, examples, benchmarks and `cosmos-train
quickstart` use these; a real run passes a hub id or a folder to the same loading code instead.

    from cosmos_train import tiny
    repo = tiny.save_tiny_cosmos3("/tmp/tiny-cosmos3")            # diffusers export layout
    layouts = tiny.save_tiny_cosmos3_layouts("/tmp/layouts")      # one folder per layout
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Sizes:
    """Text tower sizes; `mrope_section` splits head_dim/2 rotary pairs over t/h/w."""

    hidden: int = 64
    head_dim: int = 16
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    intermediate: int = 128
    mrope_section: tuple[int, int, int] = (4, 2, 2)


TINY = Sizes()
# Big enough (~60M parameters) that loading is dominated by real tensor I/O: for benchmarks.
SMALL = Sizes(
    hidden=512, head_dim=64, heads=8, kv_heads=4, layers=8, intermediate=1536, mrope_section=(12, 10, 10)
)
ROPE_THETA = 5_000_000.0
# Wan2.2 VAE at toy width: 16x spatial (8x conv + 2x2 patchify), 4x temporal compression.
LATENT_CHANNELS = 8
LATENT_PATCH = 2
ACTION_DIM = 16
SOUND_DIM = 64  # audio latent channels, as in Cosmos3

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen-style chat template: plain strings or typed content lists with image/video entries. Assistant
# turns, end-of-turn token included, sit inside {% generation %} so TRL can mask the loss to them.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}{%- generation -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}{%- if 'text' in part -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in part -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def build_tokenizer():
    """A byte-level BPE tokenizer (256 byte tokens, no merges) with the Cosmos3 special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    byte_alphabet = ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(byte_alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = 4096
    return tokenizer


def vocab_size(tokenizer) -> int:
    """Embedding rows: the tokenizer's size rounded up to a multiple of 8."""
    return (len(tokenizer) + 7) // 8 * 8


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
    _randomize(transformer)
    return transformer.eval()


def _randomize(module: torch.nn.Module) -> None:
    """Random weights everywhere, so a missed or misnamed tensor always changes outputs."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if "norm" in name:
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            else:
                parameter.normal_(0.0, 0.05)


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


def vision_config(sizes: Sizes = TINY):
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    return Qwen3VLVisionConfig(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=8,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=sizes.hidden,
        num_position_embeddings=64,
        deepstack_visual_indexes=[0],
    )


def build_vision_encoder(seed: int = 0, sizes: Sizes = TINY):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    torch.manual_seed(seed)
    encoder = Qwen3VLVisionModel(vision_config(sizes))
    _randomize(encoder)
    return encoder.eval()


def reasoner_config(tokenizer, sizes: Sizes = TINY):
    """The transformers `cosmos3_omni` config matching the tiny transformer's reasoner tower."""
    from transformers import AutoConfig

    ids = tokenizer.convert_tokens_to_ids
    return AutoConfig.for_model(
        "cosmos3_omni",
        text_config=_text_config(tokenizer, sizes, mrope=True),
        vision_config=vision_config(sizes).to_dict(),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_processor(tokenizer):
    """A Qwen3-VL processor (image + video) around the tiny tokenizer, sized for the tiny ViT."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    config = vision_config()
    side = config.patch_size * config.spatial_merge_size
    size = {"shortest_edge": side * side, "longest_edge": 64 * side * side}
    image_processor = Qwen2VLImageProcessor(
        patch_size=config.patch_size, merge_size=config.spatial_merge_size, size=size
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=config.patch_size,
        merge_size=config.spatial_merge_size,
        temporal_patch_size=config.temporal_patch_size,
        size=size,
        fps=2,
        min_frames=2,
        max_frames=8,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
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
    from diffusers_cosmos3.export import save_export

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
    from diffusers_cosmos3.convert import convert

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


def _text_config(tokenizer, sizes: Sizes = TINY, mrope: bool = False) -> dict:
    """Text-tower config shared by every tiny family; `mrope` adds Qwen3-VL's interleaved 3-axis rotary."""
    config = {
        "vocab_size": vocab_size(tokenizer),
        "hidden_size": sizes.hidden,
        "intermediate_size": sizes.intermediate,
        "num_hidden_layers": sizes.layers,
        "num_attention_heads": sizes.heads,
        "num_key_value_heads": sizes.kv_heads,
        "head_dim": sizes.head_dim,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if mrope:
        config["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": ROPE_THETA,
            "mrope_section": list(sizes.mrope_section),
            "mrope_interleaved": True,
        }
    return config


def save_tiny_text_lm(path: str | Path, seed: int = 0, sizes: Sizes = TINY) -> Path:
    """A tiny Qwen3 causal LM with the tiny tokenizer, saved with `save_pretrained`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**_text_config(tokenizer, sizes)))
    _randomize(model)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def save_tiny_vlm(path: str | Path, family: str = "qwen3_vl", seed: int = 0) -> Path:
    """A tiny Qwen3-VL or Qwen2.5-VL with its processor, saved with `save_pretrained`."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    tokenizer = build_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    text = _text_config(tokenizer, mrope=family == "qwen3_vl")
    if family == "qwen3_vl":
        vision = vision_config().to_dict()
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
            "out_hidden_size": TINY.hidden,
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
    _randomize(model)
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


def save_tiny_cosmos3_reasoner(path: str | Path, seed: int = 0) -> Path:
    """Just the tiny Cosmos3 reasoner (transformers layout) with its processor: fast for SFT tests."""
    from transformers import Cosmos3OmniForConditionalGeneration

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Cosmos3OmniForConditionalGeneration(reasoner_config(tokenizer))
    _randomize(model)
    model.save_pretrained(path)
    build_processor(tokenizer).save_pretrained(path)
    return Path(path)
