"""FlowGRPO (Liu et al. 2025): GRPO over the steps of an SDE sampler, on transformers' `Trainer`.

The story of a step (`docs/diffusion-algorithms.md` has the math):
1. rollout: the *current* policy (no gradients) samples K images or videos per prompt with FlowGRPO's SDE,
   classifier-free guidance as configured; every SDE step is Gaussian, so its log-prob is stored beside the
   states x_j and x_{j+1} (FlowGRPO-Fast: the SDE only on a random window of steps, the ODE elsewhere);
2. rewards, clipped and weighted, become group-normalised advantages;
3. micro-batches go over (trained SDE step j, chunk of samples); each recomputes the log-prob of x_{j+1}
   given x_j under the current weights (same noise level, same guidance, the two CFG calls on the same rows),
   and trains the clipped ratio objective -min(A r, A clip(r, 1 - e, 1 + e)) plus kl_beta times the KL to the
   frozen base, |mu_theta - mu_ref|^2 / (2 std^2) between the two Gaussian steps;
4. the EMA (for evaluation and export) updates after each optimizer step and is saved in every checkpoint.

One optimizer step is one rollout (the shared base), so the ratio is 1 up to numerics on every micro-batch:
the clipping guards, and the objective reduces to on-policy policy gradient, as FlowGRPO with one update per
rollout. `DDRLTrainer` (`ddrl_trainer.py`) subclasses this one.
"""

from __future__ import annotations

import logging

import torch

from ..diffusion.flow import euler_step
from ..diffusion.sampling import gaussian_log_prob, sde_mean, sde_std, sde_step, sigma_grid, velocity
from .diffusion_rl import DiffusionRLTrainer

logger = logging.getLogger(__name__)


def clipped_policy_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's clipped surrogate: mean over rows of max(-A r, -A clip(r, 1 - e, 1 + e)), r = exp(new - old);
    with the ratio statistics and the share of rows whose ratio is outside the clip range."""
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    detached = ratio.detach()
    stats = {
        "ratio_mean": detached.mean().item(),
        "ratio_min": detached.min().item(),
        "ratio_max": detached.max().item(),
        "clip_fraction": ((detached - 1.0).abs() > clip_range).float().mean().item(),
    }
    return loss, stats


class FlowGRPOTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, job, lora=None, **kwargs):
        self.algorithm = job.algorithm  # the job's [flow_grpo] (or [ddrl]) section
        super().__init__(
            adapter,
            rewards,
            job,
            ema_decay=self.algorithm.ema_decay,
            lora=lora,
            kl_beta=self.algorithm.kl_beta,
            **kwargs,
        )
        self.sampling_steps = job.rollout.sampling_steps
        self.train_count = job.train_timesteps()

    # --- which SDE steps run and train -------------------------------------------------------------------

    def sde_steps(self) -> list[int]:
        """The steps sampled with the SDE in this rollout: all of them, or FlowGRPO-Fast's random window."""
        window = self.algorithm.sde_window
        if window is None:
            return list(range(self.sampling_steps))
        start = int(torch.randint(0, self.sampling_steps - window + 1, ()).item())
        return list(range(start, start + window))

    def trained_steps(self, sde_steps: list[int]) -> list[int]:
        """`train_count` step indices for one chunk of samples."""
        choice = self.algorithm.step_choice()
        if choice == "sde_window":
            return sde_steps
        if choice == "train_steps":
            return list(self.algorithm.train_steps)
        if choice == "train_step_stride":
            return list(range(0, self.sampling_steps, self.algorithm.train_step_stride))
        return torch.randperm(self.sampling_steps)[: self.train_count].tolist()

    # --- 1. rollout with the current policy, storing states and log-probs --------------------------------

    @torch.no_grad()
    def rollout(self, prompts, metadata):
        conditioning = self.conditioning(prompts)
        rows = len(prompts)
        grid = sigma_grid(self.adapter, self.sampling_steps, self.adapter.device)
        sigmas = grid.tolist()
        guidance = self.guidance(rows)
        sde_steps = self.sde_steps()
        x = self.noise(rows)
        states, log_probs = [x], {}
        for step in range(self.sampling_steps):
            sigma, sigma_next = sigmas[step], sigmas[step + 1]
            v = velocity(self.adapter, self.model, x, sigma, conditioning, guidance)
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
            "sigmas": sigmas,
            "conditioning": conditioning,
        }

    # --- 2.-3. micro-batches: (trained step, chunk of samples) ------------------------------------------

    def micro_batches(self, rollout):
        states, sigmas, advantages = rollout["states"], rollout["sigmas"], rollout["advantages"]
        rows, size = states[0].shape[0], self.rollout_config.train_batch_size
        chunks = [slice(start, start + size) for start in range(0, rows, size)]
        plans = [self.trained_steps(rollout["sde_steps"]) for _ in chunks]
        batches = []
        for slot in range(self.train_count):
            for chunk, plan in zip(chunks, plans, strict=True):
                step = plan[slot]
                batches.append(
                    {
                        "slot": slot,  # the order of the trained step (0: the first one trained)
                        "step": step,
                        "x": states[step][chunk],
                        "x_next": states[step + 1][chunk],
                        "old_log_prob": rollout["log_probs"][step][chunk],
                        "sigma": sigmas[step],
                        "sigma_next": sigmas[step + 1],
                        "sigma_max": sigmas[1],
                        "noise": states[0][chunk],  # the rollout's initial noise (DDRL's data loss reuses it)
                        "advantages": advantages[chunk],
                        "conditioning": {k: v[chunk] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = self.policy_loss(model, inputs)
        return (loss, None) if return_outputs else loss

    def policy_loss(self, model, inputs) -> torch.Tensor:
        """The clipped ratio term (plus the KL to the base when kl_beta > 0) on one micro-batch."""
        x, x_next, conditioning = inputs["x"], inputs["x_next"], inputs["conditioning"]
        sigma, sigma_next = inputs["sigma"], inputs["sigma_next"]
        guidance = self.guidance(x.shape[0])  # the rollout's guidance, the same two calls on the same rows
        std = sde_std(sigma, sigma_next, self.algorithm.noise_level, inputs["sigma_max"])
        # The frozen prediction first: switching adapters after the trained forward would touch its graph.
        mean_reference = None
        if self.algorithm.kl_beta > 0:
            with torch.no_grad(), self.reference() as reference:
                v_reference = velocity(self.adapter, reference, x, sigma, conditioning, guidance)
                mean_reference = sde_mean(x, v_reference, sigma, sigma_next, std)
        v_theta = velocity(self.adapter, model, x, sigma, conditioning, guidance)
        mean = sde_mean(x, v_theta, sigma, sigma_next, std)
        log_prob = gaussian_log_prob(x_next, mean, std)
        a_max = self.algorithm.adv_clip_max
        advantages = inputs["advantages"].double().clamp(-a_max, a_max)
        loss, stats = clipped_policy_loss(
            log_prob, inputs["old_log_prob"].double(), advantages, self.algorithm.clip_range
        )
        for key, value in stats.items():
            self._metrics[key].append(value)
        self._metrics["policy_loss"].append(loss.item())
        if mean_reference is not None:
            dims = tuple(range(1, x.dim()))
            kl = (((mean - mean_reference) ** 2).mean(dims) / (2 * std**2)).mean()
            loss = loss + self.algorithm.kl_beta * kl
            self._metrics["kl"].append(kl.item())
        return loss.float()
