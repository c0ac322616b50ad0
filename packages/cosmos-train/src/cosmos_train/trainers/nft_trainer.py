"""DiffusionNFT (Zheng et al., ICLR 2026): online RL through the forward process, on transformers' `Trainer`.

It follows the official code (NVlabs/DiffusionNFT `scripts/train_nft_sd3.py`, `main`); the story of a rollout
(`docs/diffusion-algorithms.md` has the math):
1. rollout: the *old policy* (a lagged copy of the trained weights, `diffusion.weights.OldPolicy`) samples K
   images or videos per prompt with a deterministic ODE solver (the family's: DPM-Solver++(2M) or Euler) on the
   pipeline's own noise grid, classifier-free guidance off; only the final clean latents are kept;
2. the weighted sum of rewards becomes group-relative advantages (the global std, `group_advantages`), then the
   optimality probability r in [0, 1] (`optimality_probability`, with `adv_mode`);
3. each sample trains on a random `timestep_fraction` of the grid's levels, shuffled, with fresh noise: noised
   again by the forward process, it pulls the implicit positive policy towards its clean latent in proportion to
   r and the implicit negative one in proportion to 1 - r, with adaptive x0 weights, plus a small KL to the base
   (`nft_loss`);
4. after ALL of the rollout's optimizer steps the old policy decays towards the trained weights; the EMA (for
   evaluation and export, a different thing) updates after every step. Both are saved in every checkpoint.
"""

from __future__ import annotations

import logging

import torch

from ..diffusion.flow import add_noise, per_row
from ..diffusion.sampling import ode_sample
from ..diffusion.weights import OldPolicy
from .diffusion_rl import DiffusionRLTrainer, weighted_reward

logger = logging.getLogger(__name__)


def optimality_probability(
    advantages: torch.Tensor, adv_clip_max: float, adv_mode: str = "all"
) -> torch.Tensor:
    """r = clamp(A' / a_max / 2 + 1/2, 0, 1) with A' the advantages clipped to +-a_max, then by `adv_mode`: all A;
    positive_only max(A, 0); negative_only min(A, 0); one_only 1 where A > 0 else 0; binary sign(A)
    (`train_nft_sd3.py`; so one_only gives r = 0.6 / 0.5 at a_max 5)."""
    a = advantages.clamp(-adv_clip_max, adv_clip_max)
    if adv_mode == "positive_only":
        a = a.clamp(min=0)
    elif adv_mode == "negative_only":
        a = a.clamp(max=0)
    elif adv_mode == "one_only":
        a = (a > 0).to(a.dtype)
    elif adv_mode == "binary":
        a = torch.sign(a)
    elif adv_mode != "all":
        raise ValueError(f"unknown adv_mode {adv_mode!r}")
    return (a / adv_clip_max / 2 + 0.5).clamp(0, 1)


def nft_loss(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    noisy: torch.Tensor,
    x0: torch.Tensor,
    sigmas: torch.Tensor,
    r: torch.Tensor,
    beta: float,
    adv_clip_max: float,
) -> torch.Tensor:
    """DiffusionNFT's policy loss on one micro-batch: a_max * mean_b[(r l+ + (1 - r) l-) / beta] with
    l+- = mean((x0+- - x0)^2) / w+-, x0+- = x_t - t v+-, v+ = beta v_theta + (1 - beta) v_old,
    v- = (1 + beta) v_old - beta v_theta, and the adaptive weights w+- = mean|x0+- - x0| in float64, floored at
    1e-5 and WITHOUT gradient."""
    t = per_row(sigmas, x0)
    x0_positive = noisy - t * (beta * v_theta + (1 - beta) * v_old)
    x0_negative = noisy - t * ((1 + beta) * v_old - beta * v_theta)
    dims = tuple(range(1, x0.dim()))
    w_positive = (x0_positive.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
    w_negative = (x0_negative.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
    positive = ((x0_positive - x0) ** 2).mean(dims) / w_positive
    negative = ((x0_negative - x0) ** 2).mean(dims) / w_negative
    r = r.double()
    return (adv_clip_max * (r * positive + (1 - r) * negative) / beta).mean()


class NFTTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, job, lora=None, **kwargs):
        self.nft = job.nft
        super().__init__(
            adapter, rewards, job, ema_decay=self.nft.ema_decay, lora=lora, kl_beta=self.nft.kl_beta, **kwargs
        )
        self.train_timesteps = job.train_timesteps()
        self.solver = job.rollout.solver or adapter.rollout_solver
        # Once per rollout, after its last optimizer step (steps done is a multiple of the updates per rollout).
        updates = job.rollout.updates_per_rollout
        self.old_policy = self.keep_updated(
            OldPolicy(adapter.transformer, self.nft.decay_type), lambda step: step % updates == 0
        )

    # --- 1. rollout with the old policy --------------------------------------------------------------------

    def rollout(self, prompts, metadata, batch):
        conditioning = self.conditioning(prompts)
        grid = self.grid(self.rollout_config.sampling_steps)
        with self.old_policy.swapped_in():
            latents = ode_sample(
                self.adapter,
                self.adapter.transformer,
                self.noise(len(prompts)),
                conditioning,
                grid,
                self.solver,
                max_rows=self.rollout_config.sampling_batch_size,
            )
        return {"latents_for_reward": latents, "x0": latents, "conditioning": conditioning, "grid": grid}

    # --- 2. advantages ---------------------------------------------------------------------------------------

    def advantages(self, scores):
        total = weighted_reward(scores, self.reward_weights(), self.nft.reward_clip)
        return self.group_advantages(total, self.nft.global_std)

    # --- 3. micro-batches: chunks of samples, each at its own random training levels -----------------------

    def micro_batches(self, rollout):
        x0, grid = rollout["x0"], rollout["grid"]
        r = optimality_probability(rollout["advantages"], self.nft.adv_clip_max, self.nft.adv_mode)
        rows, levels = x0.shape[0], grid.steps  # the grid's levels, its final 0 excluded
        # Per sample, a random `train_timesteps` of the levels, shuffled (`torch.randperm` per row in the reference).
        chosen = torch.rand(rows, levels).argsort(dim=1)[:, : self.train_timesteps]
        batches = []
        for chunk in self.sample_chunks(rows):
            for slot in range(self.train_timesteps):
                level = chosen[chunk, slot]
                batches.append(
                    {
                        "x0": x0[chunk],
                        "r": r[chunk],
                        "sigmas": grid.sigmas[level].float().to(x0.device),
                        "timesteps": grid.timesteps[level].to(x0.device),
                        "noise": torch.randn_like(x0[chunk]),
                        "conditioning": {k: v[chunk] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x0, sigmas, conditioning = inputs["x0"], inputs["sigmas"], inputs["conditioning"]
        timesteps = inputs["timesteps"]  # the scheduler's own, as the pipeline feeds its transformer
        noisy = add_noise(x0, inputs["noise"], sigmas)
        predict = self.adapter.predict_velocity
        # The frozen predictions first: swapping weights after the trained forward would touch its graph.
        with torch.no_grad():
            with self.old_policy.swapped_in():
                v_old = predict(
                    self.adapter.transformer, noisy, sigmas, conditioning, timesteps=timesteps
                ).float()
            v_reference = None
            if self.nft.kl_beta > 0:
                with self.reference() as reference:
                    v_reference = predict(reference, noisy, sigmas, conditioning, timesteps=timesteps).float()
        v_theta = predict(model, noisy, sigmas, conditioning, timesteps=timesteps).float()
        policy_loss = nft_loss(
            v_theta, v_old, noisy, x0, sigmas, inputs["r"], self.nft.beta, self.nft.adv_clip_max
        )
        loss = policy_loss
        if v_reference is not None:
            kl = ((v_theta - v_reference) ** 2).mean()
            loss = loss + self.nft.kl_beta * kl
            self._metrics["kl"].append(kl.item())
        self._metrics["policy_loss"].append(policy_loss.item())
        loss = loss.float()
        return (loss, None) if return_outputs else loss
