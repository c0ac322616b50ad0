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

from ...diffusion.flow import add_noise
from ...diffusion.sampling import ode_sample
from ...diffusion.weights import OldPolicy
from ..diffusion_rl.advantages import weighted_reward
from ..diffusion_rl.trainer import DiffusionRLTrainer
from .loss import nft_loss, optimality_probability

logger = logging.getLogger(__name__)


class NFTTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, config, lora=None, **kwargs):
        self.nft = config.nft
        super().__init__(adapter, rewards, config, lora=lora, **kwargs)
        self.train_timesteps = config.train_timesteps()
        self.solver = config.rollout.solver or adapter.rollout_solver
        # Once per rollout, after its last optimizer step (steps done is a multiple of the updates per rollout).
        updates = config.rollout.updates_per_rollout
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
