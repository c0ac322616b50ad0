"""Flow-matching SFT of a diffusers pipeline's transformer, on transformers' `Trainer`.

The story of a run (`run_diffusion_sft`), once `read_job` has validated the job (`schema.py`):
1. load the pipeline and its family's adapter; add a LoRA or train the whole transformer;
2. load the image/video + caption pairs, and optionally cache their latents and text embeddings;
3. each step (`compute_loss`): encode what is not cached, drop captions for CFG, draw noise levels from
   the job's density and shift them as the model does, noise the latents (conditioning frames stay
   clean), and regress the velocity noise - x0 on the noisy elements;
4. train and save on the shared skeleton: crash-safe checkpoints with the EMA inside, a loadable
   pipeline or LoRA under `output_dir/safetensors/step_N/`, validation samples every N steps.
"""

from __future__ import annotations

import logging

import torch

from ...diffusion.adapter import AdapterOptions
from ...diffusion.flow import add_noise, flow_matching_loss, sample_sigmas
from ...jobs import Job
from ..common import train_and_save
from ..diffusion.trainer import DiffusionTrainer, ValidationCallback, load_for_training

logger = logging.getLogger(__name__)


class DiffusionSFTTrainer(DiffusionTrainer):
    """Rectified-flow regression of the velocity, with the job's timestep density and loss weighting."""

    def __init__(self, adapter, diffusion, **kwargs):
        super().__init__(adapter, **kwargs)
        self.diffusion = diffusion  # the job's [diffusion] section
        self._unconditional = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        latents, conditioning = self.latents_and_conditioning(inputs)
        loss = flow_matching_step(self.adapter, model, latents, conditioning, self.diffusion)
        return (loss, None) if return_outputs else loss

    def latents_and_conditioning(self, inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Clean latents and text conditioning for a batch: from the cache, or encoded now (frozen, no grad)."""
        dropped = torch.rand(self._batch_size(inputs)) < self.diffusion.text_dropout
        with torch.no_grad():
            if "latents" in inputs:
                return inputs["latents"], self._drop_cached(inputs["conditioning"], dropped)
            prompts = [
                "" if drop else prompt
                for prompt, drop in zip(inputs["prompts"], dropped.tolist(), strict=True)
            ]
            return self.adapter.encode_pixels(inputs["pixels"]).float(), self.adapter.encode_prompts(prompts)

    @staticmethod
    def _batch_size(inputs) -> int:
        return len(inputs["latents"] if "latents" in inputs else inputs["pixels"])

    def _drop_cached(
        self, conditioning: dict[str, torch.Tensor], dropped: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Swap the empty prompt's embedding into the dropped rows of cached conditioning."""
        if not dropped.any():
            return conditioning
        if self._unconditional is None:
            self._unconditional = self.train_dataset.unconditional()
        rows = dropped.to(next(iter(conditioning.values())).device)
        out = {}
        for key, value in conditioning.items():
            empty = self._unconditional[key].to(value)[None]  # the cache keeps it without a batch dim
            if empty.shape[1:] != value.shape[1:]:
                raise ValueError(
                    f"text_dropout with cached conditioning needs fixed-length '{key}'; turn [data] cache off"
                )
            out[key] = torch.where(rows.reshape(-1, *[1] * (value.dim() - 1)), empty, value)
        return out


def flow_matching_step(adapter, model, latents, conditioning, diffusion) -> torch.Tensor:
    """The SFT loss on clean latents: draw noise levels from the job's density, shift them as the model
    does, noise the latents (conditioning frames stay clean), and regress the velocity noise - x0."""
    noise = torch.randn_like(latents)
    sigmas = sample_sigmas(
        latents.shape[0],
        diffusion.timestep_density,
        diffusion.logit_mean,
        diffusion.logit_std,
        diffusion.mode_scale,
    )
    sigmas = adapter.shift_sigmas(sigmas).to(latents.device)
    condition_frames = adapter.condition_frames(latents)
    noisy = add_noise(latents, noise, sigmas, condition_frames)
    prediction = adapter.predict_velocity(model, noisy, sigmas, conditioning, condition_frames)
    return flow_matching_loss(prediction, latents, noise, sigmas, condition_frames, diffusion.loss_weighting)


def run_diffusion_sft(job: Job, callbacks: list | None = None) -> DiffusionSFTTrainer:
    """Run a `diffusion-sft` job; the trained pipeline (or LoRA) is under `output_dir/safetensors/`."""
    from ...diffusion.latent_cache import training_pairs

    config = job.config
    options = AdapterOptions(
        conditioning_mix=dict(config.diffusion.conditioning_mix),
        max_sequence_length=config.diffusion.max_sequence_length,
    )
    adapter, lora = load_for_training(job, options)
    dataset, collate = training_pairs(config.data, adapter, job.args)

    trainer = DiffusionSFTTrainer(
        adapter,
        config.diffusion,
        ema_decay=config.ema_decay(),
        lora=lora,
        weight_copies=config.weight_copies(),
        args=job.args,
        train_dataset=dataset,
        data_collator=collate,
        callbacks=callbacks,
    )
    if config.diffusion.validation_steps:
        trainer.add_callback(
            ValidationCallback(
                trainer,
                config.diffusion.validation_prompts,
                config.diffusion.validation_steps,
                {
                    "height": config.data.height,
                    "width": config.data.width,
                    "num_frames": config.data.num_frames,
                    "num_inference_steps": config.diffusion.validation_inference_steps,
                    "guidance_scale": config.diffusion.validation_guidance_scale,
                    "seed": config.diffusion.validation_seed,
                },
            )
        )
    train_and_save(trainer, job)
    return trainer
