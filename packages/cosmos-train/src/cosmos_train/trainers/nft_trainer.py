"""DiffusionNFT (Zheng et al., ICLR 2026): online RL through the forward process, on transformers' `Trainer`.

The story of a step (`docs/diffusion-algorithms.md` has the math):
1. rollout: the *old policy* (a lagged copy of the trained weights, `diffusion.weights.OldPolicy`) samples K
   images or videos per prompt with a deterministic ODE solver, classifier-free guidance off; only the final
   clean latents are kept;
2. rewards, clipped and weighted, become group-normalised advantages, mapped to r in [0, 1];
3. each sample trains on a random `timestep_fraction` of the sampler's noise levels: noised again by the
   forward process, it pulls the implicit positive policy towards its clean latent in proportion to r and
   the implicit negative one in proportion to 1 - r, with adaptive x0 weights, plus a small KL to the base;
4. after the optimizer step the old policy decays towards the trained weights; the EMA (for evaluation and
   export, a different thing) updates too. Both are saved in every checkpoint.
"""

from __future__ import annotations

import logging

import torch

from ..diffusion.flow import add_noise, per_row
from ..diffusion.sampling import ode_sample, sigma_grid
from ..diffusion.weights import OldPolicy
from .diffusion_rl import DiffusionRLTrainer

logger = logging.getLogger(__name__)


class NFTTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, job, lora=None, **kwargs):
        self.nft = job.nft
        super().__init__(
            adapter, rewards, job, ema_decay=self.nft.ema_decay, lora=lora, kl_beta=self.nft.kl_beta, **kwargs
        )
        self.train_timesteps = job.train_timesteps()
        self.old_policy = self.keep_updated(OldPolicy(adapter.transformer, self.nft.decay_type))

    # --- 1. rollout with the old policy --------------------------------------------------------------------

    def rollout(self, prompts, metadata):
        conditioning = self.conditioning(prompts)
        grid = sigma_grid(self.adapter, self.rollout_config.sampling_steps, self.adapter.device)
        with self.old_policy.swapped_in():
            latents = ode_sample(
                self.adapter,
                self.adapter.transformer,
                self.noise(len(prompts)),
                conditioning,
                grid,
                self.rollout_config.solver,
            )
        return {"latents_for_reward": latents, "x0": latents, "conditioning": conditioning, "grid": grid}

    # --- 2.-3. micro-batches: each sample at its own random training timesteps ----------------------------

    def micro_batches(self, rollout):
        x0, advantages, grid = rollout["x0"], rollout["advantages"], rollout["grid"]
        a_max = self.nft.adv_clip_max
        r = (advantages.clamp(-a_max, a_max) / a_max / 2 + 0.5).clamp(0, 1)
        rows = x0.shape[0]
        levels = grid[:-1]  # the sampler's noise levels, sigma = 0 excluded
        chosen = torch.rand(rows, len(levels)).argsort(dim=1)[:, : self.train_timesteps]
        size = self.rollout_config.train_batch_size
        batches = []
        for step in range(self.train_timesteps):
            for start in range(0, rows, size):
                index = slice(start, start + size)
                batches.append(
                    {
                        "x0": x0[index],
                        "r": r[index],
                        "sigmas": levels[chosen[index, step]],
                        "noise": torch.randn_like(x0[index]),
                        "conditioning": {k: v[index] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x0, sigmas, conditioning = inputs["x0"], inputs["sigmas"], inputs["conditioning"]
        noisy = add_noise(x0, inputs["noise"], sigmas)
        # The frozen predictions first: swapping weights after the trained forward would touch its graph.
        with torch.no_grad():
            with self.old_policy.swapped_in():
                v_old = self.adapter.predict_velocity(
                    self.adapter.transformer, noisy, sigmas, conditioning
                ).float()
            v_reference = None
            if self.nft.kl_beta > 0:
                with self.reference() as reference:
                    v_reference = self.adapter.predict_velocity(
                        reference, noisy, sigmas, conditioning
                    ).float()
        v_theta = self.adapter.predict_velocity(model, noisy, sigmas, conditioning).float()

        beta, t = self.nft.beta, per_row(sigmas, x0)
        x0_positive = noisy - t * (beta * v_theta + (1 - beta) * v_old)
        x0_negative = noisy - t * ((1 + beta) * v_old - beta * v_theta)
        dims = tuple(range(1, x0.dim()))
        # Adaptive x0 weights: stop-gradient, in float64, floored at 1e-5.
        w_positive = (x0_positive.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
        w_negative = (x0_negative.detach().double() - x0.double()).abs().mean(dims).clamp(min=1e-5)
        positive = ((x0_positive - x0) ** 2).mean(dims) / w_positive
        negative = ((x0_negative - x0) ** 2).mean(dims) / w_negative
        r = inputs["r"].double()
        policy_loss = (self.nft.adv_clip_max * (r * positive + (1 - r) * negative) / beta).mean()
        loss = policy_loss
        if v_reference is not None:
            kl = ((v_theta - v_reference) ** 2).mean()
            loss = loss + self.nft.kl_beta * kl
            self._metrics["kl"].append(kl.item())
        self._metrics["policy_loss"].append(policy_loss.item())
        loss = loss.float()
        return (loss, None) if return_outputs else loss
