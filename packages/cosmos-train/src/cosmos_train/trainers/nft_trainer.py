"""DiffusionNFT (Zheng et al., ICLR 2026): online RL through the forward process, on transformers' `Trainer`.

The story of a step (`diffusion-rl.md` has the math):
1. rollout: the *old policy* (a lagged copy of the trained weights) samples K images or videos per prompt
   with a deterministic ODE solver, classifier-free guidance off; only the final clean latents are kept;
2. rewards, clipped and weighted, become group-normalised advantages, mapped to r in [0, 1];
3. each sample trains on a random `timestep_fraction` of the sampler's noise levels: noised again by the
   forward process, it pulls the implicit positive policy towards its clean latent in proportion to r and
   the implicit negative one in proportion to 1 - r, with adaptive x0 weights, plus a small KL to the base;
4. after the optimizer step the old policy decays towards the trained weights; the EMA (for evaluation and
   export, a different thing) updates too. Both are saved in every checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..diffusion.flow import add_noise, per_row
from ..diffusion.sampling import ode_sample, sigma_grid
from ..jobs import Job
from .common import train_and_save
from .diffusion_common import prepare_adapter
from .diffusion_rl import DiffusionRLTrainer, reward_specs

logger = logging.getLogger(__name__)

OLD_POLICY_FILE = "old_policy.safetensors"  # full fine-tuning; a LoRA's old policy is its "old" adapter
OLD_ADAPTER = "old"


def old_policy_decay(decay_type: int, step: int) -> float:
    """How much of the old policy survives an update at optimizer step `step` (DiffusionNFT's types)."""
    if decay_type == 0:
        return 0.0
    if decay_type == 1:
        return min(0.001 * step, 0.5)
    return 0.0 if step < 75 else min(0.0075 * (step - 75), 0.999)


class OldPolicy(TrainerCallback):
    """The lagged policy that samples rollouts: a second PEFT adapter named "old" when a LoRA trains (its
    tensors sit beside the trained ones in every checkpoint, `...lora_A.old.weight`), or a frozen copy of
    the transformer for full fine-tuning (`old_policy.safetensors`). After each optimizer step,
    theta_old <- d * theta_old + (1 - d) * theta."""

    def __init__(self, transformer: torch.nn.Module, lora: bool, decay_type: int):
        self.transformer, self.lora, self.decay_type = transformer, lora, decay_type
        self.names = [name for name, p in transformer.named_parameters() if p.requires_grad]
        parameters = dict(transformer.named_parameters())
        if lora:
            transformer.add_adapter(
                copy.deepcopy(transformer.peft_config["default"]), adapter_name=OLD_ADAPTER
            )
            transformer.set_adapters(
                "default"
            )  # add_adapter activates the new one; the trained one stays trainable
            parameters = dict(transformer.named_parameters())
            self.copy = None
            olds = [parameters[n.replace(".default.", f".{OLD_ADAPTER}.")] for n in self.names]
        else:
            self.copy = copy.deepcopy(transformer).requires_grad_(False).eval()
            copied = dict(self.copy.named_parameters())
            olds = [copied[n] for n in self.names]
        self.pairs = list(zip([parameters[n] for n in self.names], olds, strict=True))
        with torch.no_grad():
            for current, old in self.pairs:
                old.copy_(current)

    @contextlib.contextmanager
    def active(self):
        """The module that computes the old policy (no gradients): the transformer with its "old" adapter
        switched on, or the copy."""
        if self.copy is not None:
            yield self.copy
            return
        self.transformer.set_adapters(OLD_ADAPTER)
        try:
            yield self.transformer
        finally:
            self.transformer.set_adapters("default")

    def on_step_end(self, args, state, control, **kwargs):
        decay = old_policy_decay(self.decay_type, state.global_step)
        with torch.no_grad():
            for current, old in self.pairs:
                old.mul_(decay).add_(current.detach(), alpha=1 - decay)

    def save(self, folder: Path) -> None:
        if self.copy is not None:  # a LoRA's old adapter is saved with the model's own weights
            from safetensors.torch import save_file

            tensors = {
                n: old.detach().cpu().contiguous() for n, (_, old) in zip(self.names, self.pairs, strict=True)
            }
            save_file(tensors, folder / OLD_POLICY_FILE)

    def load(self, folder: Path) -> None:
        if self.copy is not None:
            from safetensors.torch import load_file

            tensors = load_file(folder / OLD_POLICY_FILE)
            with torch.no_grad():
                for name, (_, old) in zip(self.names, self.pairs, strict=True):
                    old.copy_(tensors[name])


class NFTTrainer(DiffusionRLTrainer):
    def __init__(self, adapter, rewards, rollout, nft, train_timesteps: int, lora=None, **kwargs):
        # The old policy first, so its adapter exists (and is frozen) before the optimizer and EMA collect
        # the trained parameters.
        self.old_policy = OldPolicy(adapter.transformer, lora is not None, nft.decay_type)
        super().__init__(
            adapter, rewards, rollout, ema_decay=nft.ema_decay, lora=lora, kl_beta=nft.kl_beta, **kwargs
        )
        self.nft, self.train_timesteps = nft, train_timesteps
        self.add_callback(self.old_policy)

    # --- 1. rollout with the old policy --------------------------------------------------------------------

    def rollout(self, prompts, metadata):
        conditioning = self.conditioning(prompts)
        grid = sigma_grid(self.adapter, self.rollout_config.sampling_steps, self.adapter.device)
        with self.old_policy.active() as old_policy:
            latents = ode_sample(
                self.adapter,
                old_policy,
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
        # The frozen predictions first: switching adapters after the trained forward would touch its graph.
        with torch.no_grad():
            with self.old_policy.active() as old_policy:
                v_old = self.adapter.predict_velocity(old_policy, noisy, sigmas, conditioning).float()
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

    # --- 4. checkpoints keep the old policy (and, through the base class, the EMA) ------------------------

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self.old_policy.save(Path(output_dir or self.args.output_dir))

    def train(self, resume_from_checkpoint=None, **kwargs):
        if resume_from_checkpoint:
            self.old_policy.load(Path(resume_from_checkpoint))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)


def run_nft(job: Job, callbacks: list | None = None) -> NFTTrainer:
    """Run a DiffusionNFT job; the trained pipeline (or LoRA) is under `output_dir/safetensors/`."""
    from ..data import collate_prompts, load_prompt_list
    from ..rewards import build_media_rewards

    config = job.config
    rewards = build_media_rewards(reward_specs(config.rewards), search_path=Path(job.source).parent)
    adapter, lora = prepare_adapter(job)
    prompts, report = load_prompt_list(config.data)
    logger.info("training on %d prompts (%d skipped)", report.kept, report.skipped)
    trainer = NFTTrainer(
        adapter,
        rewards,
        config.rollout,
        config.nft,
        train_timesteps=config.train_timesteps(),
        lora=lora,
        args=job.args,
        train_dataset=prompts,
        data_collator=collate_prompts,
        callbacks=callbacks,
    )
    train_and_save(trainer, job)
    return trainer
