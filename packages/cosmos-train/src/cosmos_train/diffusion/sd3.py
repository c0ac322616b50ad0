"""Stable Diffusion 3 / 3.5 (`StableDiffusion3Pipeline`): MMDiT on two CLIP encoders and T5, VAE with a
shift and a scaling factor, timesteps on the 0..1000 scale (as diffusers' `train_dreambooth_lora_sd3.py`)."""

from __future__ import annotations

import torch

from .adapter import DiffusionAdapter, call_default, truncation_warned_once


class StableDiffusion3Adapter(DiffusionAdapter):
    pipeline_class = "StableDiffusion3Pipeline"
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0")

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

    def predict_velocity(self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None):
        dtype = self.transformer.dtype
        return transformer(
            hidden_states=noisy_latents.to(dtype),
            timestep=self.model_timesteps(sigmas),
            encoder_hidden_states=conditioning["prompt_embeds"].to(dtype),
            pooled_projections=conditioning["pooled_prompt_embeds"].to(dtype),
            return_dict=False,
        )[0]
