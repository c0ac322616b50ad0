"""FlowGRPO (Liu et al. 2025): GRPO over the steps of an SDE sampler, on transformers' `Trainer`.

It follows the official code (yifan123/flow_grpo `scripts/train_sd3.py`, `main`; the SDE step of
`diffusers_patch/sd3_sde_with_logprob.py`, `sde_step_with_logprob`); the story of a rollout
(`docs/diffusion-algorithms.md` has the math):
1. rollout: the *current* policy (no gradients) samples K images or videos per prompt with FlowGRPO's SDE on the
   pipeline's own noise grid, classifier-free guidance as configured; every SDE step is Gaussian, so its log-prob
   is stored beside the states x_j and x_{j+1} (FlowGRPO-Fast: the SDE only on a window of early steps, the ODE
   elsewhere);
2. the weighted sum of rewards becomes group-relative advantages (the global std); samples whose advantage is 0
   are left out;
3. micro-batches go chunk by chunk over the trained steps (the first ones, in order); each recomputes the
   log-prob of x_{j+1} given x_j under the current weights (same level, same timestep, same guidance on the
   same rows) and trains the clipped ratio objective -min(A r, A clip(r, 1 - e, 1 + e)) plus kl_beta
   times the KL to the frozen base (`step_kl`). The rollout's chunks are split between two optimizer updates by
   default, so the second update's ratio moves off 1 and the clipping acts;
4. the EMA (for evaluation and export) updates every 8 optimizer steps and is saved in every checkpoint.
"""

from __future__ import annotations

import logging
import math

import torch

from ...diffusion.flow import euler_step
from ...diffusion.sampling import gaussian_log_prob, sde_mean, sde_std_t, sde_step, velocity
from ..diffusion_rl.advantages import weighted_reward
from ..diffusion_rl.trainer import DiffusionRLTrainer
from .loss import clipped_policy_loss, rows_to_train, step_kl

logger = logging.getLogger(__name__)


def draw_sde_steps(section, sampling_steps: int) -> list[int]:
    """The steps a rollout samples with the SDE: all of them, or FlowGRPO-Fast's window (`section.sde_window`), whose
    start is drawn from the global RNG (a resumed run draws the same) in [0, N // 2 - window], the reference's fast
    configs' early half."""
    window = section.sde_window
    if window is None:
        return list(range(sampling_steps))
    last_start = max(0, sampling_steps // 2 - window)
    start = int(torch.randint(0, last_start + 1, ()).item())
    return list(range(start, start + window))


class FlowGRPOTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, config, lora=None, **kwargs):
        self.algorithm = config.flow_grpo
        super().__init__(
            adapter,
            rewards,
            config,
            ema_every=self.algorithm.ema_every,
            lora=lora,
            **kwargs,
        )
        self.sampling_steps = config.rollout.sampling_steps

    # --- 1. rollout with the current policy, storing states and log-probs --------------------------------

    @torch.no_grad()
    def rollout(self, prompts, metadata, batch):
        conditioning = self.conditioning(prompts)
        rows = len(prompts)
        grid = self.grid(self.sampling_steps)
        sigmas = grid.sigmas.tolist()
        guidance = self.guidance(rows)
        sde_steps = draw_sde_steps(self.algorithm, self.sampling_steps)
        x = self.noise(rows, self.algorithm.same_latent)
        states, log_probs = [x], {}
        for step in range(self.sampling_steps):
            sigma, sigma_next = sigmas[step], sigmas[step + 1]
            v = velocity(
                self.adapter,
                self.model,
                x,
                sigma,
                conditioning,
                guidance,
                grid.timesteps[step],
                max_rows=self.rollout_config.sampling_batch_size,
            )
            if step in sde_steps:
                x, log_probs[step] = sde_step(x, v, sigma, sigma_next, self.algorithm.noise_level, sigmas[1])
            else:
                x = euler_step(x, v, sigma, sigma_next)
            states.append(x)
        self._metrics["samples/latent_mean"].append(x.mean().item())
        self._metrics["samples/latent_std"].append(x.std().item())
        return {
            "latents_for_reward": x,
            "states": states,
            "log_probs": log_probs,
            "sde_steps": sde_steps,
            "grid": grid,
            "conditioning": conditioning,
        }

    # --- 2. advantages ---------------------------------------------------------------------------------------

    def advantages(self, scores):
        total = weighted_reward(scores, self.reward_weights(), self.algorithm.reward_clip)
        return self.group_advantages(total, self.algorithm.global_std)

    # --- 3. micro-batches: chunk by chunk, each over the trained steps in order ---------------------------

    def micro_batches(self, rollout):
        states, grid, advantages = rollout["states"], rollout["grid"], rollout["advantages"]
        rows = states[0].shape[0]
        keep = None
        if self.algorithm.drop_zero_advantage:
            keep = rows_to_train(advantages, len(self.sample_chunks(rows)))
            self._metrics["trained_fraction"].append(len(keep) / rows)
        steps = self.algorithm.trained_steps(self.sampling_steps) or rollout["sde_steps"]
        sigmas = grid.sigmas.tolist()
        batches = []
        for chunk in self.sample_chunks(rows, keep):
            for step in steps:
                batches.append(
                    {
                        "step": step,
                        "x": states[step][chunk],
                        "x_next": states[step + 1][chunk],
                        "old_log_prob": rollout["log_probs"][step][chunk],
                        "sigma": sigmas[step],
                        "sigma_next": sigmas[step + 1],
                        "sigma_max": sigmas[1],
                        "timestep": grid.timesteps[step],
                        "advantages": advantages[chunk],
                        "conditioning": {k: v[chunk] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x, x_next, conditioning = inputs["x"], inputs["x_next"], inputs["conditioning"]
        sigma, sigma_next, timestep = inputs["sigma"], inputs["sigma_next"], inputs["timestep"]
        guidance = self.guidance(x.shape[0])  # the rollout's guidance, on the same rows
        std_t = sde_std_t(sigma, self.algorithm.noise_level, inputs["sigma_max"])
        # The frozen prediction first: switching adapters after the trained forward would touch its graph.
        mean_reference = None
        if self.algorithm.kl_beta > 0:
            with torch.no_grad(), self.reference() as reference:
                v_reference = velocity(self.adapter, reference, x, sigma, conditioning, guidance, timestep)
                mean_reference = sde_mean(x, v_reference, sigma, sigma_next, std_t)
        v_theta = velocity(self.adapter, model, x, sigma, conditioning, guidance, timestep)
        mean = sde_mean(x, v_theta, sigma, sigma_next, std_t)
        log_prob = gaussian_log_prob(x_next, mean, std_t * math.sqrt(sigma - sigma_next))
        a_max = self.algorithm.adv_clip_max
        advantages = inputs["advantages"].double().clamp(-a_max, a_max)
        loss, stats = clipped_policy_loss(
            log_prob, inputs["old_log_prob"].double(), advantages, self.algorithm.clip_range
        )
        for key, value in stats.items():
            self._metrics[key].append(value)
        self._metrics["policy_loss"].append(loss.item())
        if mean_reference is not None:
            kl = step_kl(mean, mean_reference, std_t, sigma_next - sigma, self.algorithm.kl_form)
            loss = loss + self.algorithm.kl_beta * kl
            self._metrics["kl"].append(kl.item())
        loss = loss.float()
        return (loss, None) if return_outputs else loss
