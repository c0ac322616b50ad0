"""Latents to pixels for the reward service: a diffusers VAE loaded once at start (`reward-serve --latent-vae`).

cosmos-rl's video trainers send the latents their transformer produced (normalised, as the diffusion model sees
them): float16 B x C x T x H x W Wan2.1 latents, or float32 from its world-model trainer. The service undoes the
normalisation the way the pipelines do before `vae.decode` (Wan: `z * latents_std + latents_mean`, as
`WanPipeline`; other VAEs: `z / scaling_factor + shift_factor`), decodes one sample at a time as the reference
service does, and maps [-1, 1] to uint8 by truncation, as the reference service's `.to(torch.uint8)` does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class LatentDecoder:
    """`decode(latents)`: float B x C x T x H x W (video VAEs) or B x C x H x W (image VAEs) latents to uint8
    B x T x H x W x 3 or B x H x W x 3 pixels."""

    def __init__(self, vae, device: str = "cpu"):
        import torch

        self.vae = vae.eval().requires_grad_(False)
        self.device = torch.device(device)
        self.dtype = next(vae.parameters()).dtype
        config = vae.config
        self.video = getattr(config, "latents_mean", None) is not None  # Wan-style per-channel statistics
        if self.video:
            self.mean = torch.tensor(config.latents_mean).view(1, -1, 1, 1, 1)
            self.std = torch.tensor(config.latents_std).view(1, -1, 1, 1, 1)
        else:
            self.scale = float(getattr(config, "scaling_factor", None) or 1.0)
            self.shift = float(getattr(config, "shift_factor", None) or 0.0)
        self.channels = int(config.z_dim if self.video else config.latent_channels)

    @classmethod
    def load(cls, name_or_path: str, subfolder: str | None = None, device: str = "auto") -> LatentDecoder:
        """A VAE folder, a pipeline folder (its `vae/`), or a hub id (with `subfolder`, e.g. "vae")."""
        import torch
        from diffusers import AutoModel

        if subfolder is None and (Path(name_or_path) / "vae" / "config.json").is_file():
            subfolder = "vae"
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        vae = AutoModel.from_pretrained(name_or_path, subfolder=subfolder, torch_dtype=dtype)
        if not hasattr(vae, "decode"):
            raise ValueError(f"{name_or_path}: {type(vae).__name__} is not a VAE (it has no decode)")
        return cls(vae.to(device), device)

    def check(self, shape: tuple[int, ...]) -> None:
        """ValueError (one line) unless `shape` is a batch of latents this VAE decodes."""
        ndim, layout = (5, "B x C x T x H x W") if self.video else (4, "B x C x H x W")
        if len(shape) != ndim or shape[1] != self.channels or 0 in shape:
            raise ValueError(
                f"latents for this service's VAE ({type(self.vae).__name__}, {self.channels} channels) must be "
                f"{layout} with C = {self.channels}, got {list(shape)}"
            )

    def decode(self, latents: np.ndarray) -> np.ndarray:
        import torch

        from ..diffusion.media_io import to_uint8

        self.check(latents.shape)
        pixels = []
        with torch.no_grad():
            for sample in torch.from_numpy(np.ascontiguousarray(latents)).float().split(1):
                z = sample * self.std + self.mean if self.video else sample / self.scale + self.shift
                decoded = self.vae.decode(z.to(self.device, self.dtype)).sample.float().cpu()
                pixels.append(to_uint8(decoded, channel_dim=1, low=-1, truncate=True))
        return torch.cat(pixels).contiguous().numpy()  # B x (T x) H x W x 3
