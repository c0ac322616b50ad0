"""DDRL (Ye et al., "Data-regularized Reinforcement Learning for Diffusion Models at Scale", 2025).

FlowGRPO's rollouts and clipped-ratio reward term (`FlowGRPOTrainer`), with the reverse KL to a reference model
(off by default) replaced by a forward KL to data: `data_beta` times the flow-matching SFT loss on a batch of
real data, drawn for each micro-batch (or only for each chunk's first trained step, `data_on_first_only`). With
`use_rl_sigma_and_noise` the data latents are noised at the micro-batch's rollout sigma with the rollout's
initial noise for those rows, as cosmos-rl does; otherwise as diffusion SFT draws them. For video families the
data term mixes t2v / i2v (/ v2v) by the number of clean conditional frames (`adapter.condition_frames`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..data.loading import DataError
from ..diffusion.flow import add_noise, flow_matching_loss, sample_sigmas
from .flow_grpo_trainer import FlowGRPOTrainer

logger = logging.getLogger(__name__)


class RealData:
    """Batches of real data for the data term, encoded (no gradients) unless cached. Each rollout reads a
    permutation seeded by (seed, optimizer step), so a resumed run draws the same data."""

    def __init__(self, dataset, collate, adapter, seed: int):
        self.dataset, self.collate, self.adapter, self.seed = dataset, collate, adapter, seed
        self.order: list[int] = []

    def start(self, step: int) -> None:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        self.order = torch.randperm(len(self.dataset), generator=generator).tolist()
        self.next = 0

    @torch.no_grad()
    def batch(self, rows: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        indices = [self.order[(self.next + i) % len(self.order)] for i in range(rows)]
        self.next += rows
        batch = self.collate([self.dataset[i] for i in indices])
        device = self.adapter.device
        if "latents" in batch:  # cached
            conditioning = {k: v.to(device) for k, v in batch["conditioning"].items()}
            return batch["latents"].to(device).float(), conditioning
        latents = self.adapter.encode_pixels(batch["pixels"].to(device)).float()
        return latents, self.adapter.encode_prompts(batch["prompts"])


class DDRLTrainer(FlowGRPOTrainer):
    def __init__(self, adapter, rewards, job, **kwargs):
        super().__init__(adapter, rewards, job, **kwargs)
        self.real_data = None
        if job.real_data is not None and job.ddrl.data_beta > 0:
            self.real_data = load_real_data(job.real_data, adapter, self.args)

    def micro_batches(self, rollout):
        batches = super().micro_batches(rollout)
        ddrl = self.algorithm
        if ddrl.data_beta == 0 or self.real_data is None:
            return batches
        self.real_data.start(self.state.global_step)
        for batch in batches:
            if ddrl.data_on_first_only and batch["slot"] != 0:
                continue
            latents, conditioning = self.real_data.batch(batch["x"].shape[0])
            if ddrl.use_rl_sigma_and_noise:
                if latents.shape != batch["noise"].shape:
                    raise DataError(
                        f"[real_data] gives latents {tuple(latents.shape[1:])} but the rollout's are "
                        f"{tuple(batch['noise'].shape[1:])}: match its height/width/num_frames to [rollout], "
                        "or set [ddrl] use_rl_sigma_and_noise = false"
                    )
                noise = batch["noise"]
                sigmas = torch.full((latents.shape[0],), batch["sigma"], device=latents.device)
            else:  # as diffusion SFT: logit-normal noise levels, shifted as the model does
                noise = torch.randn_like(latents)
                sigmas = self.adapter.shift_sigmas(
                    sample_sigmas(latents.shape[0], "logit_normal", 0.0, 1.0, 1.29)
                )
            batch["data"] = {
                "latents": latents,
                "conditioning": conditioning,
                "noise": noise,
                "sigmas": sigmas.to(latents.device),
                "condition_frames": self.adapter.condition_frames(latents),
            }
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = self.policy_loss(model, inputs)
        data = inputs.get("data")
        if data is not None:
            frames = data["condition_frames"]
            noisy = add_noise(data["latents"], data["noise"], data["sigmas"], frames)
            prediction = self.adapter.predict_velocity(
                model, noisy, data["sigmas"], data["conditioning"], frames
            )
            data_loss = flow_matching_loss(prediction, data["latents"], data["noise"], data["sigmas"], frames)
            self._metrics["data_loss"].append(data_loss.item())
            loss = loss + self.algorithm.data_beta * data_loss
        return (loss, None) if return_outputs else loss


def load_real_data(section, adapter, args) -> RealData:
    """`[real_data]` as the data term's batches: pairs, cached as the section says."""
    from ..data.pairs import collate_pairs, load_pairs
    from ..diffusion.latent_cache import cache_pairs

    dataset, report = load_pairs(section, video=adapter.video)
    logger.info("data term on %d real pairs (%d skipped)", report.kept, report.skipped)
    collate = collate_pairs
    if section.cache:
        cache_dir = Path(section.cache_dir or Path(args.output_dir) / "cache")
        with args.main_process_first(desc="caching latents and text embeddings"):
            dataset = cache_pairs(dataset, adapter, cache_dir)  # the main process writes, the others read
        collate = dataset.collate
    return RealData(dataset, collate, adapter, args.seed)
