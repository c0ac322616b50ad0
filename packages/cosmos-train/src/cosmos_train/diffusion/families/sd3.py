"""Stable Diffusion 3 / 3.5 (`StableDiffusion3Pipeline`): MMDiT on two CLIP encoders and T5, VAE with a
shift and a scaling factor, timesteps on the 0..1000 scale (as diffusers' `train_dreambooth_lora_sd3.py`)."""

from __future__ import annotations

import torch

from ..adapter import DiffusionAdapter, call_default, truncation_warned_once


class StableDiffusion3Adapter(DiffusionAdapter):
    pipeline_class = "StableDiffusion3Pipeline"
    # Both streams' attention projections of `attn`, image (to_*) and text (add_*), as DiffusionNFT
    # (`scripts/train_nft_sd3.py`), FlowGRPO (`scripts/train_sd3.py`) and cosmos-rl's SD3.5-Medium NFT config train:
    # without add_* the text stream is never adapted. PEFT matches a name as a suffix after a dot, so "attn.to_q"
    # leaves out the image-only second attention (`attn2`) of SD3.5's dual-attention blocks, as the references do.
    lora_target_modules = (
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
        "attn.to_out.0",
        "attn.add_q_proj",
        "attn.add_k_proj",
        "attn.add_v_proj",
        "attn.to_add_out",
    )
    # DiffusionNFT and FlowGRPO train SD3.5 at 512 x 512 with 128 T5 tokens (the pipeline: 1024 and 256).
    rl_sample_defaults = {"height": 512, "width": 512, "max_sequence_length": 128}
    generation_batch = 16  # the pipeline draws each prompt's noise from its own generator

    @classmethod
    def configured_size(cls, configs):
        """The pipeline's default is `sample_size` latents times the VAE's scale (1024 for SD3.5); the transformer
        crops its positional embedding to the image, so a side above `pos_embed_max_size` patches fails
        (`PatchEmbed.cropped_pos_embed`)."""
        transformer, vae = configs.get("transformer", {}), configs.get("vae", {})
        scale = 2 ** (len(vae.get("block_out_channels") or (0,) * 4) - 1)
        sample = transformer.get("sample_size")
        default = sample * scale if sample else None
        limit = transformer.get("pos_embed_max_size")
        patch = transformer.get("patch_size") or 1
        return (default, default, None), (limit * patch * scale if limit else None)

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        length = self.options.max_sequence_length or call_default(self.pipeline, "max_sequence_length")
        limits = f"CLIP {self.pipeline.tokenizer_max_length} tokens, T5 max_sequence_length {length}"
        with truncation_warned_once(self, limits):
            embeds, _, pooled, _ = self.pipeline.encode_prompt(
                prompts,
                prompts,
                prompts,
                device=self.device,
                do_classifier_free_guidance=False,
                max_sequence_length=length,
            )
        return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}

    def text_encoder_modules(self) -> list[torch.nn.Module]:
        pipe = self.pipeline
        return [m for m in (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3) if m is not None]

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        latents = vae.encode(pixels.to(vae.dtype)).latent_dist.sample()
        return (latents - vae.config.shift_factor) * vae.config.scaling_factor

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        latents = latents / vae.config.scaling_factor + vae.config.shift_factor
        return vae.decode(latents.to(vae.dtype)).sample

    def grid_kwargs(self, num_steps, latent_shape):
        """The resolution-dependent shift `mu` when the scheduler shifts dynamically, as the pipeline computes it."""
        config = self.pipeline.scheduler.config
        if not config.get("use_dynamic_shifting"):
            return {}
        from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

        patch = self.transformer.config.patch_size
        sequence = (latent_shape[-2] // patch) * (latent_shape[-1] // patch)
        names = ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")
        defaults = (256, 4096, 0.5, 1.16)
        return {
            "mu": calculate_shift(sequence, *(config.get(n, d) for n, d in zip(names, defaults, strict=True)))
        }

    def predict_velocity(
        self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None, timesteps=None
    ):
        dtype = self.transformer.dtype
        return transformer(
            hidden_states=noisy_latents.to(dtype),
            timestep=self.model_timesteps(sigmas, timesteps),
            encoder_hidden_states=conditioning["prompt_embeds"].to(dtype),
            pooled_projections=conditioning["pooled_prompt_embeds"].to(dtype),
            return_dict=False,
        )[0]
