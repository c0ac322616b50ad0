"""Cosmos-Predict2.5 (`Cosmos2_5_PredictBasePipeline`): the Cosmos DiT on Qwen2.5-VL hidden states with a Wan VAE
normalised by latents mean/std. Its timestep is sigma itself, one per latent frame; i2v/v2v give leading latent
frames clean, flagged by a `condition_mask` channel and the conditional-frame timestep."""

from __future__ import annotations

import torch

from ..adapter import DiffusionAdapter, call_default, draw_condition_frames


class CosmosPredict2_5Adapter(DiffusionAdapter):
    pipeline_class = "Cosmos2_5_PredictBasePipeline"
    video = True
    # The attention projections (self and cross) and the MLP (`ff.net.0.proj`, `ff.net.2`), as cosmos-rl's configs.
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2")

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        pipe = self.pipeline
        length = self.options.max_sequence_length or call_default(pipe, "max_sequence_length")
        embeds, _ = pipe.encode_prompt(
            prompts, do_classifier_free_guidance=False, max_sequence_length=length, device=self.device
        )
        return {"prompt_embeds": embeds}

    def text_encoder_modules(self) -> list[torch.nn.Module]:
        return [self.pipeline.text_encoder]

    def _stats(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, 1 / std) as the pipeline builds them in `__init__`, typed for `latents`."""
        config = self.pipeline.vae.config
        shape = (1, config.z_dim, 1, 1, 1)
        mean = torch.tensor(config.latents_mean).view(shape).float()
        inv_std = 1.0 / torch.tensor(config.latents_std).view(shape).float()
        return mean.to(latents), inv_std.to(latents)

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        # The mode, as the pipeline encodes its conditioning video (`prepare_latents`, sample_mode="argmax").
        latents = vae.encode(pixels.to(vae.dtype)).latent_dist.mode().float()  # the pipeline's float32
        mean, inv_std = self._stats(latents)
        return (latents - mean) * inv_std

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        mean, inv_std = self._stats(latents)
        return vae.decode((latents / inv_std + mean).to(vae.dtype), return_dict=False)[0]

    def model_timesteps(self, sigmas, timesteps=None):
        return sigmas  # the pipeline feeds `scheduler.sigmas[i]` (its `in_timestep`), not a 0..1000 timestep

    @property
    def negative_prompt(self) -> str:
        from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import DEFAULT_NEGATIVE_PROMPT

        return DEFAULT_NEGATIVE_PROMPT

    def guide(self, conditional, unconditional, scale):
        """The pipeline's form: cond + g (cond - uncond), so a scale g means one more unit than SD3's."""
        return conditional + scale * (conditional - unconditional)

    def condition_frames(self, latents: torch.Tensor, generator: torch.Generator | None = None):
        # v2v gives the pipeline's `num_latent_conditional_frames` clean.
        clean = {"t2v": 0, "i2v": 1, "v2v": call_default(self.pipeline, "num_latent_conditional_frames")}
        return draw_condition_frames(self, latents, clean, generator)

    def predict_velocity(
        self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None, timesteps=None
    ):
        """As the pipeline's denoising loop: frames in `condition_frames` hold their clean latents (the trainer does
        not noise them), are flagged by `condition_mask` and get the conditional-frame timestep; their velocity is
        zero, so a sampler step keeps them clean (the pipeline's ground-truth velocity for clean frames)."""
        dtype = self.transformer.dtype
        batch, _, frames, height, width = noisy_latents.shape
        if condition_frames is None:
            condition_frames = torch.zeros(batch, frames, dtype=torch.bool, device=noisy_latents.device)
        indicator = condition_frames.to(torch.float32).view(batch, 1, frames, 1, 1)
        sigma = self.model_timesteps(sigmas).to(torch.float32).view(batch, 1, 1, 1, 1)
        cond_timestep = call_default(self.pipeline, "conditional_frame_timestep")
        timestep = indicator * cond_timestep + (1 - indicator) * sigma
        mask = indicator.expand(-1, -1, -1, height, width).to(dtype)
        # Pixel-sized like the pipeline's (all zeros: no padding); the transformer resizes it to the latents.
        scale = self.pipeline.vae_scale_factor_spatial
        padding_mask = noisy_latents.new_zeros(1, 1, height * scale, width * scale, dtype=dtype)
        velocity = transformer(
            hidden_states=noisy_latents.to(dtype),
            condition_mask=mask,
            timestep=timestep,
            encoder_hidden_states=conditioning["prompt_embeds"].to(dtype),
            padding_mask=padding_mask,
            return_dict=False,
        )[0]
        return velocity * (1 - mask)
