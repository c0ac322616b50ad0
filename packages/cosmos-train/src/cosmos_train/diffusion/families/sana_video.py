"""SANA-Video (`SanaVideoPipeline`): a video DiT on Gemma2 with a Wan VAE (or LTX-2 / DC-AE-V); latents normalised
with the VAE's latents mean/std, timesteps on the 0..1000 scale."""

from __future__ import annotations

import torch

from ..adapter import DiffusionAdapter
from .sana import encode_gemma_prompts, sana_velocity


def latents_stats(vae, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (mean, std) as `SanaVideoPipeline` decodes: Wan config lists, LTX-2 buffers, else none."""
    mean, std = getattr(vae, "latents_mean", None), getattr(vae, "latents_std", None)
    if not isinstance(mean, torch.Tensor):
        mean, std = vae.config.get("latents_mean"), vae.config.get("latents_std")
    if mean is None:
        return torch.zeros(channels), torch.ones(channels)
    return torch.as_tensor(mean).float(), torch.as_tensor(std).float()


class SanaVideoAdapter(DiffusionAdapter):
    pipeline_class = "SanaVideoPipeline"
    video = True
    frames_argument = "frames"
    # Validation samples come at the trained size, not snapped to the pipeline's resolution bins.
    generate_kwargs = {"use_resolution_binning": False}
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0")  # attn1 and attn2, as SANA
    rollout_solver = "euler"  # as SANA
    # Masked text: zero right-padding gets no attention (while a row keeps one token), so lengths may differ.
    ragged_conditioning = ("prompt_embeds", "prompt_attention_mask")

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        return encode_gemma_prompts(self.pipeline, prompts, self.device, self.options.max_sequence_length)

    def text_encoder_modules(self) -> list[torch.nn.Module]:
        return [self.pipeline.text_encoder]

    def _stats(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, 1 / std), shaped and typed for `latents`: the pipeline's own arithmetic, so results match bitwise."""
        mean, std = latents_stats(self.pipeline.vae, latents.shape[1])
        shape = (1, -1, 1, 1, 1)
        return mean.view(shape).to(latents), 1.0 / std.view(shape).to(latents)

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        encoded = vae.encode(pixels.to(vae.dtype))
        # The mode, as SANA-Video's image-to-video pipeline encodes its conditioning frames.
        latents = encoded.latent if hasattr(encoded, "latent") else encoded.latent_dist.mode()
        mean, inv_std = self._stats(latents)
        return (latents - mean) * inv_std

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.pipeline.vae
        latents = latents.to(vae.dtype)
        mean, inv_std = self._stats(latents)
        return vae.decode(latents / inv_std + mean, return_dict=False)[0]

    def predict_velocity(
        self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None, timesteps=None
    ):
        return sana_velocity(self, transformer, noisy_latents, sigmas, conditioning, timesteps)
