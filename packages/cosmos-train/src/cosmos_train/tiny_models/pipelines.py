"""Tiny diffusers pipelines with random weights, one per family cosmos-train's diffusion trainers support.

Each is built offline from the family's real classes (transformer, VAE, text encoders, tokenizers,
scheduler) at toy sizes and saved with `save_pretrained`, so training loads it through the same
`DiffusionPipeline.from_pretrained` path as a hub id. For tests, examples and `cosmos-train make-tiny`.

    from cosmos_train.tiny_models.pipelines import save_tiny_pipeline
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


def clip_text_encoder(tokenizer, width: int, max_positions: int, seed: int, vocab_size: int | None = None):
    """A random 2-layer `CLIPTextModelWithProjection` of `width` (projection `width`) for `tokenizer`."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    config = CLIPTextConfig(
        vocab_size=vocab_size or _vocab(tokenizer),
        hidden_size=width,
        intermediate_size=2 * width,
        projection_dim=width,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return CLIPTextModelWithProjection(config).eval()


def build_sd3(seed: int = 0):
    """`StableDiffusion3Pipeline`: a 2-block MMDiT, two CLIP text encoders with projections, T5, a 2x VAE."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    clip_tokenizer = byte_tokenizer(77)
    t5_tokenizer = byte_tokenizer(64)

    def clip(offset: int):
        return clip_text_encoder(clip_tokenizer, width=32, max_positions=77, seed=seed + offset)

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
        norm_num_groups=1,
        sample_size=32,
        shift_factor=0.0609,
        scaling_factor=1.5035,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    vae = _seeded(seed + 4, vae)
    with torch.no_grad():
        # A trained VAE's posterior is narrow: random log-variances would drown the latents.
        vae.encoder.conv_out.bias[vae.config.latent_channels :] = -12.0
        # And its decoder turns latents into visibly different images (one group per norm and a louder
        # output layer keep a latent's colour in the pixels), so image rewards can tell samples apart.
        vae.decoder.conv_out.weight.mul_(4.0)
    return StableDiffusion3Pipeline(
        transformer=_seeded(seed, transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae,
        text_encoder=clip(1),
        tokenizer=clip_tokenizer,
        text_encoder_2=clip(2),
        tokenizer_2=byte_tokenizer(77),
        text_encoder_3=t5,
        tokenizer_3=t5_tokenizer,
    )


def build_cosmos3(seed: int = 0):
    """`Cosmos3OmniPipeline`: diffusers-cosmos3's tiny one (2-layer MoT, Wan2.2-style VAE, no safety checker)."""
    from diffusers_cosmos3.testing import build_pipeline

    return build_pipeline(seed=seed)


def build_cosmos3_action(seed: int = 0):
    """The tiny `Cosmos3OmniPipeline` with action heads (`action_gen`, 16 action channels, 32 domains)."""
    from diffusers_cosmos3.testing import build_pipeline

    return build_pipeline(action=True, seed=seed)


# {family: builder}, one per adapter family: adapters' tests iterate over it. `cosmos_train.tiny_models.KINDS` describes
# each for `make-tiny`, which also builds the variants in `BUILDERS`.
PIPELINES: dict[str, Callable] = {"sd3": build_sd3, "cosmos3": build_cosmos3}


def build_tiny_pipeline(family: str, seed: int = 0):
    builders = {**PIPELINES, "cosmos3_action": build_cosmos3_action}
    if family not in builders:
        raise ValueError(f"unknown tiny pipeline {family!r}; expected one of: {', '.join(builders)}")
    return builders[family](seed=seed)


def save_tiny_pipeline(family: str, path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random pipeline of `family` (a key of `PIPELINES`) with `save_pretrained`. A component whose
    class is not diffusers' or transformers' (the tiny Cosmos-Predict2.5's safety checker) ships its code in its
    folder, diffusers' custom components: plain diffusers loads the pipeline with `trust_remote_code=True`."""
    path = Path(path)
    pipeline = build_tiny_pipeline(family, seed=seed)
    pipeline.save_pretrained(path)
    for name, component in pipeline.components.items():
        if type(component).__module__ == __name__:
            _ship_component_code(path, name, type(component))
    return path


def _ship_component_code(path: Path, name: str, component_class: type) -> None:
    import inspect
    import json

    module = f"{name}_code"
    source = "import torch\nfrom diffusers import ConfigMixin, ModelMixin\n\n\n" + inspect.getsource(
        component_class
    )
    (path / name / f"{module}.py").write_text(source)
    index = json.loads((path / "model_index.json").read_text())
    index[name] = [module, component_class.__name__]
    (path / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _gemma2(tokenizer, seed: int):
    from transformers import Gemma2Config, Gemma2Model

    config = Gemma2Config(
        vocab_size=_vocab(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return _seeded(seed, Gemma2Model(config))


def _wan_vae(seed: int):
    """A Wan 2.1 VAE (z_dim 16, 4x time, 8x space) with its default latents mean/std."""
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan(
        base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    return _seeded(seed, vae)


def build_sana(seed: int = 0):
    """`SanaPipeline`: a 2-block linear-attention DiT, Gemma2, a 4x DC-AE; flow DPM-Solver, shift 3."""
    from diffusers import AutoencoderDC, DPMSolverMultistepScheduler, SanaPipeline, SanaTransformer2DModel

    tokenizer = byte_tokenizer(2048)  # room for SANA's long instruction prefix
    torch.manual_seed(seed)
    transformer = SanaTransformer2DModel(
        patch_size=1,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        num_attention_heads=2,
        attention_head_dim=8,
        num_cross_attention_heads=2,
        cross_attention_head_dim=8,
        cross_attention_dim=16,
        caption_channels=16,
        sample_size=32,
    )
    vae = AutoencoderDC(
        in_channels=3,
        latent_channels=4,
        attention_head_dim=4,
        encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 8, 8),
        decoder_block_out_channels=(8, 8, 8),
        encoder_qkv_multiscales=((), (), (5,)),
        decoder_qkv_multiscales=((), (), (5,)),
        encoder_layers_per_block=(1, 1, 1),
        decoder_layers_per_block=(1, 1, 1),
        downsample_block_type="conv",
        upsample_block_type="interpolate",
        scaling_factor=0.41407,
    )
    # Sana's released scheduler: flow-matching DPM-Solver++ with a time shift.
    scheduler = DPMSolverMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, solver_order=2
    )
    return SanaPipeline(
        tokenizer=tokenizer,
        text_encoder=_gemma2(tokenizer, seed + 1),
        vae=_seeded(seed + 2, vae),
        transformer=_seeded(seed, transformer),
        scheduler=scheduler,
    )


def build_sana_video(seed: int = 0):
    """`SanaVideoPipeline`: a 2-block video DiT, Gemma2, a Wan VAE; flow DPM-Solver, shift 8."""
    from diffusers import DPMSolverMultistepScheduler, SanaVideoPipeline, SanaVideoTransformer3DModel

    tokenizer = byte_tokenizer(2048)  # room for SANA's long instruction prefix
    torch.manual_seed(seed)
    transformer = SanaVideoTransformer3DModel(
        in_channels=16,
        out_channels=16,
        num_layers=2,
        num_attention_heads=2,
        attention_head_dim=8,
        num_cross_attention_heads=2,
        cross_attention_head_dim=8,
        cross_attention_dim=16,
        caption_channels=16,
        sample_size=8,
        patch_size=(1, 2, 2),
        rope_max_seq_len=32,
    )
    scheduler = DPMSolverMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0, solver_order=2
    )
    return SanaVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=_gemma2(tokenizer, seed + 1),
        vae=_wan_vae(seed + 2),
        transformer=_seeded(seed, transformer),
        scheduler=scheduler,
    )


# Qwen2.5-VL's chat format, reduced to text parts (what `Cosmos2_5_PredictBasePipeline.encode_prompt` sends).
_QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


from diffusers import ConfigMixin, ModelMixin  # noqa: E402  (the safety checker below must be module-level)


class ToySafetyChecker(ModelMixin, ConfigMixin):
    """Stands in for Cosmos Guardrail in the tiny random Cosmos pipeline only.

    `Cosmos2_5_PredictBasePipeline` builds `CosmosSafetyChecker()` when given None (an ImportError without
    `cosmos_guardrail`, which also downloads its own models) and refuses to run with None, so the tiny pipeline
    holds this component instead, as diffusers' own Cosmos tests do. `save_tiny_pipeline` ships its code in the
    saved `safety_checker/` folder (a diffusers custom component: load with `trust_remote_code=True`). Real
    Cosmos checkpoints keep their own checker (install `cosmos_guardrail`).
    """

    def __init__(self):
        super().__init__()
        # One saved tensor, so save_pretrained writes a weights file that from_pretrained finds.
        self.register_buffer("_device_tracker", torch.zeros(1))

    def check_text_safety(self, prompt: str) -> bool:
        return True

    def check_video_safety(self, frames):
        return frames


def build_cosmos_predict2_5(seed: int = 0):
    """`Cosmos2_5_PredictBasePipeline`: a 2-block Cosmos DiT, Qwen2.5-VL, a Wan VAE; flow UniPC."""
    from diffusers import (
        Cosmos2_5_PredictBasePipeline,
        CosmosTransformer3DModel,
        UniPCMultistepScheduler,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer = byte_tokenizer(512)
    tokenizer.chat_template = _QWEN_CHAT_TEMPLATE
    layers, hidden = 2, 16
    text_config = {
        "vocab_size": _vocab(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    vision_config = {
        "depth": 1,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_heads": 2,
        "out_hidden_size": hidden,
        "fullatt_block_indexes": [0],
    }
    config = Qwen2_5_VLConfig(text_config=text_config, vision_config=vision_config)
    torch.manual_seed(seed + 1)
    text_encoder = _seeded(seed + 1, Qwen2_5_VLForConditionalGeneration(config))
    torch.manual_seed(seed)
    # The released model projects all Qwen layers' normalised states (layers x hidden) down to text_embed_dim.
    transformer = CosmosTransformer3DModel(
        in_channels=16 + 1,
        out_channels=16,
        num_attention_heads=2,
        attention_head_dim=16,
        num_layers=2,
        mlp_ratio=2,
        text_embed_dim=16,
        adaln_lora_dim=4,
        max_size=(4, 32, 32),
        patch_size=(1, 2, 2),
        rope_scale=(1.0, 3.0, 3.0),
        concat_padding_mask=True,
        extra_pos_embed_type=None,
        use_crossattn_projection=True,
        crossattn_proj_in_channels=layers * hidden,
        encoder_hidden_states_channels=16,
    )
    scheduler = UniPCMultistepScheduler(
        use_karras_sigmas=True,
        use_flow_sigmas=True,
        prediction_type="flow_prediction",
        sigma_max=200.0,
        sigma_min=0.01,
    )
    return Cosmos2_5_PredictBasePipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=_seeded(seed, transformer),
        vae=_wan_vae(seed + 2),
        scheduler=scheduler,
        safety_checker=ToySafetyChecker(),
    )


PIPELINES.update(
    {"sana": build_sana, "sana_video": build_sana_video, "cosmos_predict2_5": build_cosmos_predict2_5}
)
