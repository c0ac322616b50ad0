"""DDRL (Ye et al., "Data-regularized Reinforcement Learning for Diffusion Models at Scale", 2025), as cosmos-rl
computes it (`cosmos_rl/policy/trainer/wfm_trainer.py`: `get_rollout_samples`, `rl_training_step`; the sampler of
`cosmos_rl/policy/model/wfm/sampler`; the data term of `wfm/models/t2v_model.py`).

The story of a rollout, on a batch of DATA items (`docs/diffusion-algorithms.md` has the math):
1. rollout: the current policy samples K videos or images per item from its caption, the first 0 or 1 latent
   frames given clean from the item itself (drawn per batch), with the "2ab" sampler in EDM units
   (x = x0 + s * noise, s = sigma / (1 - sigma)) on the pipeline's own grid: at each step EDM churn raises the
   level to s^ = s (1 + eta) with fresh noise, then a 2nd-order Adams-Bashforth step (`ab2_step`) goes to the next
   level; a final call denoises at the last level. Per trained step the churned state x^_i, its level, the step's
   mean mu_old and the next churned state x' are kept;
2. each reward is normalised within the item's group on its own (torch's std), the advantages averaged
   (optionally -exp(-A), `exp_reward`);
3. micro-batches go chunk by chunk over the trained steps (every other one): the current model's mean mu_theta of
   the same step gives the log-ratio mean(|x' - mu_old|^2 - |x' - mu_theta|^2) (no 1 / (2 sigma^2)) for the
   clipped objective, plus `data_beta` times the EDM-weighted data term on the SAME items at the step's level with
   the rollout's initial noise, caption dropout 0.2; the whole loss times `loss_scale` (10);
4. one optimizer step per rollout (on-policy: the ratio is 1 in value, only its gradient acts).
"""

from __future__ import annotations

import logging
import math

import torch

from ...diffusion.flow import add_noise, keep_clean_frames, per_row, sample_sigmas
from ...diffusion.sampling import ab2_step, churn_eta, predict_in_parts, to_flow
from ..diffusion_rl.trainer import DiffusionRLTrainer
from ..flow_grpo.loss import clipped_policy_loss
from .loss import ddrl_advantages, edm_data_loss, edm_levels, log_ratio

logger = logging.getLogger(__name__)


class DDRLTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, config, lora=None, **kwargs):
        self.ddrl = config.ddrl
        super().__init__(adapter, rewards, config, lora=lora, **kwargs)
        self.sampling_steps = config.rollout.sampling_steps
        self.trained = config.ddrl.trained_steps(self.sampling_steps)
        self.eta = churn_eta(self.sampling_steps, self.ddrl.s_churn)

    @classmethod
    def training_data(cls, config, adapter, args):
        """The data items (cached when `[data] cache`) and their collator: their captions are the prompts."""
        from ...diffusion.latent_cache import training_pairs

        return training_pairs(config.data, adapter, args)

    def edm_levels(self) -> list[float]:
        return edm_levels(self.grid(self.sampling_steps + 1))

    # --- 1. rollout on the data items ------------------------------------------------------------------------

    def data(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The items' latents and caption conditioning (cached or encoded now)."""
        device = self.adapter.device
        with torch.no_grad():
            if "latents" in batch:
                return batch["latents"].to(device).float(), {
                    k: v.to(device) for k, v in batch["conditioning"].items()
                }
            return self.adapter.encode_pixels(
                batch["pixels"].to(device)
            ).float(), self.adapter.encode_prompts(batch["prompts"])

    def condition_frames(self, latents: torch.Tensor) -> torch.Tensor | None:
        """`B x T` clean leading latent frames, their count drawn once per batch in [min, max] (video families),
        as cosmos-rl's trainer draws `num_conditional_frames` for a whole batch."""
        if not self.adapter.video:
            return None
        frames = latents.shape[2]
        low = min(self.ddrl.min_num_conditional_frames, frames - 1)
        high = min(self.ddrl.max_num_conditional_frames, frames - 1)
        count = int(torch.randint(low, high + 1, ()))
        return (torch.arange(frames) < count).expand(latents.shape[0], frames).to(latents.device)

    def x0_prediction(
        self,
        transformer,
        x: torch.Tensor,
        s: float,
        conditioning,
        clean: torch.Tensor,
        frames,
        max_rows: int | None = None,
    ) -> torch.Tensor:
        """The data prediction at EDM state `x` and level `s`: the flow model at sigma = s / (1 + s) on
        x / (1 + s), clean frames given their data latents (so their x0 is the data's)."""
        sigma = to_flow(s)
        sigmas = torch.full((x.shape[0],), sigma, device=x.device)
        flow_x = x / (1 + s)
        flow_x = keep_clean_frames(flow_x, clean, frames)
        v = predict_in_parts(
            self.adapter, transformer, flow_x, sigmas, conditioning, frames, max_rows=max_rows
        )
        return flow_x - sigma * v.float()

    @torch.no_grad()
    def rollout(self, prompts, metadata, batch):
        latents, conditioning = self.data(batch)
        if tuple(latents.shape[1:]) != self.latent_shape():
            raise RuntimeError(
                f"data latents {tuple(latents.shape[1:])} differ from the rollout's {self.latent_shape()}"
            )
        k = self.group_size
        frames = self.condition_frames(latents)
        clean = latents.repeat_interleave(k, 0)
        frames = None if frames is None else frames.repeat_interleave(k, 0)
        conditioning = {key: value.repeat_interleave(k, 0) for key, value in conditioning.items()}
        noise = self.noise(len(prompts), self.ddrl.use_same_seed)  # unit noise; x_T = 200 * noise
        levels = self.edm_levels()
        transformer, rows = self.model, self.rollout_config.sampling_batch_size
        x, previous, steps = noise * levels[0], None, {}
        wanted = set(self.trained) | {i + 1 for i in self.trained}  # trained steps and their next states
        for i in range(self.sampling_steps):
            s_hat = levels[i] * (1 + self.eta)
            x = x + math.sqrt(s_hat**2 - levels[i] ** 2) * torch.randn_like(x)  # churn
            x0 = self.x0_prediction(transformer, x, s_hat, conditioning, clean, frames, rows)
            mu = ab2_step(x.double(), s_hat, levels[i + 1], x0.double(), previous).float()
            if i in wanted:
                steps[i] = {
                    "x": x,
                    "s_hat": s_hat,
                    "s_next": levels[i + 1],
                    "mu_old": mu,
                    "previous": previous,
                }
            previous, x = (x0.double(), s_hat), mu
        final = self.x0_prediction(transformer, x, levels[-1], conditioning, clean, frames, rows)
        for i in self.trained:  # x' of step i: step i + 1's churned state (the last step's: the clean sample)
            steps[i]["sample"] = steps[i + 1]["x"] if i + 1 < self.sampling_steps else final
        return {
            "latents_for_reward": final,
            "steps": {i: steps[i] for i in self.trained},
            "noise": noise,
            "clean": clean,
            "frames": frames,
            "conditioning": conditioning,
        }

    # --- 2. advantages ---------------------------------------------------------------------------------------

    def advantages(self, scores):
        advantages = ddrl_advantages(scores, self.reward_weights(), self.group_size, self.ddrl.exp_reward)
        return advantages.float().to(self.adapter.device)

    # --- 3. micro-batches: chunk by chunk over the trained steps -----------------------------------------------

    def micro_batches(self, rollout):
        rows = rollout["noise"].shape[0]
        batches = []
        for chunk in self.sample_chunks(rows):
            for i in self.trained:
                step = rollout["steps"][i]
                previous = step["previous"]
                batches.append(
                    {
                        "step": i,
                        "x": step["x"][chunk],
                        "s_hat": step["s_hat"],
                        "s_next": step["s_next"],
                        "mu_old": step["mu_old"][chunk],
                        "sample": step["sample"][chunk],
                        "previous": None if previous is None else (previous[0][chunk], previous[1]),
                        "advantages": rollout["advantages"][chunk],
                        "noise": rollout["noise"][chunk],
                        "clean": rollout["clean"][chunk],
                        "frames": None if rollout["frames"] is None else rollout["frames"][chunk],
                        "conditioning": {k: v[chunk] for k, v in rollout["conditioning"].items()},
                    }
                )
        return batches

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x, s_hat, s_next, previous = inputs["x"], inputs["s_hat"], inputs["s_next"], inputs["previous"]
        conditioning, clean, frames = inputs["conditioning"], inputs["clean"], inputs["frames"]

        def mean_of(transformer) -> torch.Tensor:
            x0 = self.x0_prediction(transformer, x, s_hat, conditioning, clean, frames)
            old = None if previous is None else (previous[0].float(), previous[1])
            return ab2_step(x, s_hat, s_next, x0, old)

        # The frozen prediction first: switching adapters after the trained forward would touch its graph.
        mu_reference = None
        if self.ddrl.kl_beta > 0:
            with torch.no_grad(), self.reference() as reference:
                mu_reference = mean_of(reference)
        mu_theta = mean_of(model)
        ratio_log = log_ratio(inputs["sample"], inputs["mu_old"], mu_theta).double()
        a_max = self.ddrl.adv_clip_max
        advantages = inputs["advantages"].double().clamp(-a_max, a_max)
        loss, stats = clipped_policy_loss(
            ratio_log, torch.zeros_like(ratio_log), advantages, self.ddrl.clip_range
        )
        for key, value in stats.items():
            self._metrics[key].append(value)
        self._metrics["policy_loss"].append(loss.item())
        if mu_reference is not None:
            kl = ((mu_reference - mu_theta) ** 2).mean()
            loss = loss + self.ddrl.kl_beta * kl
            self._metrics["kl"].append(kl.item())
        if self.ddrl.data_beta > 0 and (not self.ddrl.data_on_first_only or inputs["step"] == 0):
            data_loss = self.data_loss(model, inputs)
            loss = loss + self.ddrl.data_beta * data_loss
            self._metrics["data_loss"].append(data_loss.item())
        loss = (loss * self.ddrl.loss_scale).float()
        return (loss, None) if return_outputs else loss

    def data_loss(self, model, inputs) -> torch.Tensor:
        """The EDM-weighted data term on the rollout's own data rows: at the trained step's churned level with the
        rollout's initial noise (`use_rl_sigma_and_noise`), else at a level drawn as diffusion SFT draws it;
        each row's caption embedding zeroed with probability `caption_dropout` (its text conditioner's dropout)."""
        clean, frames = inputs["clean"], inputs["frames"]
        rows = clean.shape[0]
        if self.ddrl.use_rl_sigma_and_noise:
            noise = inputs["noise"]
            sigmas = torch.full((rows,), to_flow(inputs["s_hat"]), device=clean.device)
        else:
            noise = torch.randn_like(clean)
            sigmas = self.adapter.shift_sigmas(sample_sigmas(rows, "logit_normal", 0.0, 1.0, 1.29)).to(
                clean.device
            )
        kept = (torch.rand(rows, device=clean.device) >= self.ddrl.caption_dropout).float()
        conditioning = {
            key: value * per_row(kept, value).to(value.dtype) if value.is_floating_point() else value
            for key, value in inputs["conditioning"].items()
        }
        noisy = add_noise(clean, noise, sigmas, frames)
        prediction = self.adapter.predict_velocity(model, noisy, sigmas, conditioning, frames)
        # Clean frames carry no loss (the reference replaces their prediction by the data's).
        prediction = keep_clean_frames(prediction.float(), noise - clean, frames)
        return edm_data_loss(prediction, clean, noise, sigmas)
