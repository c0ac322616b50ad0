"""Tiny Cosmos3 reasoners with random weights, built offline in seconds, for tests and examples.

Real upstream classes at toy sizes: a byte-level tokenizer with the Cosmos3 chat template and
vision tokens, a Qwen3-VL ViT, the transformers `cosmos3_omni` reasoner and its Qwen3-VL processor;
for Edge (`family="cosmos3_edge"`), the `cosmos3_edge` reasoner (relu2 text MLP, SigLIP2 ViT) and its
processor.
Needs only transformers and tokenizers (no diffusers), so it also runs in the vLLM environment.
Not imported by `import transformers_cosmos3`.

    from transformers_cosmos3.testing import save_tiny_cosmos3_reasoner
    folder = save_tiny_cosmos3_reasoner("/tmp/tiny-reasoner")   # transformers layout + processor
    edge = save_tiny_cosmos3_reasoner("/tmp/tiny-edge", family="cosmos3_edge")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .layouts import Reasoner


@dataclass(frozen=True)
class Sizes:
    """Text tower sizes; `mrope_section` splits head_dim/2 rotary pairs over t/h/w. At TINY's head_dim the
    width axis gets only slow rotary frequencies (0.02 rad per position at Cosmos3's theta): a model that must tell
    where things are in a small picture needs a wider head or a smaller `rope_theta`."""

    hidden: int = 64
    head_dim: int = 16
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    intermediate: int = 128
    mrope_section: tuple[int, int, int] = (4, 2, 2)
    rope_theta: float = 5_000_000.0  # Cosmos3's


TINY = Sizes()
# Big enough (~60M parameters) that loading is dominated by real tensor I/O: for benchmarks.
SMALL = Sizes(
    hidden=512, head_dim=64, heads=8, kv_heads=4, layers=8, intermediate=1536, mrope_section=(12, 10, 10)
)
ROPE_THETA = TINY.rope_theta

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


def randomize_weights(module: torch.nn.Module) -> None:
    """Random weights everywhere, so a missed or misnamed tensor always changes outputs."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if "norm" in name:
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            else:
                parameter.normal_(0.0, 0.05)


def text_config(tokenizer, sizes: Sizes = TINY, mrope: bool = False) -> dict:
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
            "rope_theta": sizes.rope_theta,
            "mrope_section": list(sizes.mrope_section),
            "mrope_interleaved": True,
        }
    return config


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
    randomize_weights(encoder)
    return encoder.eval()


# Edge's SigLIP2 ViT and projector at toy width (the patch and merge sizes of the tiny Qwen3-VL ViT).
EDGE_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "patch_size": 8,
    "num_patches": 16,
    "spatial_merge_size": 2,
}
EDGE_PROJECTOR_HIDDEN = 48


def reasoner_config(tokenizer, sizes: Sizes = TINY, family: Reasoner | str = Reasoner.OMNI):
    """The transformers config of the tiny reasoner (the diffusers transformer's AR tower): `cosmos3_omni`,
    or `cosmos3_edge` (relu2 text MLP without a gate, no q/k norms, SigLIP2 ViT with a projector)."""
    from transformers import AutoConfig

    ids = tokenizer.convert_tokens_to_ids
    if Reasoner(family) is Reasoner.EDGE:
        text = text_config(tokenizer, sizes, mrope=True)
        text["hidden_act"] = "relu2"
        text["rope_parameters"].pop("mrope_interleaved")
        # transformers sizes the projector from `projector_hidden_size`, vLLM from `projector_config`: a
        # config.json both read carries both (transformers keeps the other key as is).
        projector = {
            "input_hidden_size": EDGE_VISION["hidden_size"],
            "merger_intermediate_size": EDGE_PROJECTOR_HIDDEN,
            "out_hidden_size": sizes.hidden,
            "spatial_merge_size": EDGE_VISION["spatial_merge_size"],
        }
        family_config = {
            "vision_config": EDGE_VISION,
            "projector_hidden_size": EDGE_PROJECTOR_HIDDEN,
            "projector_config": projector,
        }
    else:
        text = text_config(tokenizer, sizes, mrope=True)
        family_config = {"vision_config": vision_config(sizes).to_dict()}
    return AutoConfig.for_model(
        Reasoner(family).value,
        text_config=text,
        **family_config,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_reasoner(
    tokenizer=None, seed: int = 0, sizes: Sizes = TINY, family: Reasoner | str = Reasoner.OMNI
):
    """The native `Cosmos3OmniForConditionalGeneration` (or, for Edge, `Cosmos3EdgeForConditionalGeneration`)
    with random weights, in eval mode."""
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    config = reasoner_config(tokenizer or build_tokenizer(), sizes, family)
    model = AutoModelForImageTextToText.from_config(config)
    randomize_weights(model)
    return model.eval()


def build_processor(tokenizer, family: Reasoner | str = Reasoner.OMNI):
    """The family's processor (image + video) around the tiny tokenizer, sized for the tiny ViT:
    Qwen3-VL's for `cosmos3_omni`, Cosmos3 Edge's for `cosmos3_edge`."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    config = vision_config()
    side = config.patch_size * config.spatial_merge_size
    size = {"shortest_edge": side * side, "longest_edge": 64 * side * side}
    if Reasoner(family) is Reasoner.EDGE:
        from transformers import Cosmos3EdgeImageProcessor, Cosmos3EdgeProcessor, Cosmos3EdgeVideoProcessor

        sizing = {"patch_size": config.patch_size, "merge_size": config.spatial_merge_size, "size": size}
        return Cosmos3EdgeProcessor(
            image_processor=Cosmos3EdgeImageProcessor(**sizing),
            tokenizer=tokenizer,
            video_processor=Cosmos3EdgeVideoProcessor(**sizing, fps=2, min_frames=2, max_frames=8),
            chat_template=CHAT_TEMPLATE,
        )
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


def save_tiny_cosmos3_reasoner(
    path: str | Path, seed: int = 0, sizes: Sizes = TINY, family: Reasoner | str = Reasoner.OMNI
) -> Path:
    """Just the tiny Cosmos3 reasoner (transformers layout) with its processor: fast for SFT tests."""
    tokenizer = build_tokenizer()
    build_reasoner(tokenizer, seed=seed, sizes=sizes, family=family).save_pretrained(path)
    build_processor(tokenizer, family).save_pretrained(path)
    return Path(path)
