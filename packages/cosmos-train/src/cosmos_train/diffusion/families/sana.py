"""SANA (`SanaPipeline`): a linear-attention DiT on Gemma2 with a DC-AE; latents scaled by `scaling_factor` only,
the transformer's timestep is the scheduler's (0..1000) times `transformer.config.timestep_scale`."""

from __future__ import annotations

import torch

from ..adapter import DiffusionAdapter, call_default


def encode_gemma_prompts(pipeline, prompts: list[str], device, max_sequence_length: int | None):
    """SANA's and SANA-Video's prompt encoding: (embeddings, attention mask) as `__call__` makes them.

    Prompts get the complex human instruction `__call__` sends them with; the empty (unconditional) prompt is
    encoded without it, as the pipeline encodes its negative prompt."""
    kwargs = {
        "do_classifier_free_guidance": False,
        "device": device,
        "clean_caption": call_default(pipeline, "clean_caption"),
        "max_sequence_length": max_sequence_length or call_default(pipeline, "max_sequence_length"),
    }
    embeds, mask, _, _ = pipeline.encode_prompt(
        prompts, complex_human_instruction=call_default(pipeline, "complex_human_instruction"), **kwargs
    )
    empty = [i for i, prompt in enumerate(prompts) if not prompt]
    if empty:
        uncond, uncond_mask, _, _ = pipeline.encode_prompt(
            [""] * len(empty), complex_human_instruction=None, **kwargs
        )
        embeds[empty], mask[empty] = uncond.to(embeds.dtype), uncond_mask.to(mask.dtype)
    return {"prompt_embeds": embeds, "prompt_attention_mask": mask}


class SanaAdapter(DiffusionAdapter):
    pipeline_class = "SanaPipeline"
    # Validation samples come at the trained size, not snapped to the pipeline's resolution bins.
    generate_kwargs = {"use_resolution_binning": False}
    # Self- and cross-attention (attn1, attn2) with their output projections, as cosmos-rl's SANA configs.
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0")
    rollout_solver = "euler"  # cosmos-rl's DiffusionNFT config for SANA
    # Masked text: zero right-padding gets no attention (while a row keeps one token), so lengths may differ.
    ragged_conditioning = ("prompt_embeds", "prompt_attention_mask")

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        return encode_gemma_prompts(self.pipeline, prompts, self.device, self.options.max_sequence_length)

    def text_encoder_modules(self) -> list[torch.nn.Module]:
        return [self.pipeline.text_encoder]

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        return vae.encode(pixels.to(vae.dtype)).latent * vae.config.scaling_factor

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        return vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor, return_dict=False)[0]

    def model_timesteps(self, sigmas, timesteps=None):
        return super().model_timesteps(sigmas, timesteps) * self.transformer.config.timestep_scale

    def predict_velocity(
        self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None, timesteps=None
    ):
        return sana_velocity(self, transformer, noisy_latents, sigmas, conditioning, timesteps)


def sana_velocity(
    adapter: DiffusionAdapter, transformer, noisy_latents, sigmas, conditioning, timesteps=None
) -> torch.Tensor:
    """SANA's and SANA-Video's transformer call on Gemma2 embeddings; a learned-sigma output keeps its velocity
    half."""
    dtype = adapter.transformer.dtype
    velocity = transformer(
        noisy_latents.to(dtype),
        encoder_hidden_states=conditioning["prompt_embeds"].to(dtype),
        encoder_attention_mask=conditioning["prompt_attention_mask"],
        timestep=adapter.model_timesteps(sigmas, timesteps),
        return_dict=False,
    )[0]
    config = adapter.transformer.config
    if config.out_channels // 2 == config.in_channels:
        velocity = velocity.chunk(2, dim=1)[0]
    return velocity
