"""What the online diffusion RL trainers (DiffusionNFT, FlowGRPO, DDRL) share, on `DiffusionTrainer`.

One rollout feeds one or more optimizer steps, told the way TRL's GRPOTrainer tells it:
1. `_prepare_inputs` takes a batch of prompts; at the start of each rollout it samples K images or videos per
   prompt (`rollout`, written by each algorithm) on the pipeline's own noise grid (`grid`), decodes and scores them
   with the job's rewards (`score`), turns the scores into advantages (`advantages`, each algorithm's form of
   `group_advantages`), and cuts the result into micro-batches (`micro_batches`): chunks of samples, each at its
   trained timesteps, chunk after chunk, so that several updates per rollout split it by samples. Every call
   returns the next micro-batch, so the Trainer's gradient accumulation covers a whole number of chunks;
2. `compute_loss` (each algorithm's) trains on one micro-batch.
Rewards, advantages, evaluation (`RLEvaluation`), the EMA, checkpoints, exports and logging are shared here and in
`algorithms/diffusion/trainer.py`; `run_diffusion_rl` runs any of them (the job's kind names the trainer class).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from ...diffusion.media_io import to_uint8
from ...diffusion.sampling import Guidance, NoiseGrid, noise_grid
from ...diffusion.weights import ParameterCopy
from ...jobs import Job
from ..common import train_and_save
from ..diffusion.trainer import DiffusionTrainer, load_for_training
from .advantages import group_advantages_across, weighted_reward
from .evaluation import RLEvaluation

logger = logging.getLogger(__name__)


class DiffusionRLTrainer(DiffusionTrainer):
    """Rollout -> rewards -> advantages -> micro-batches, on transformers' `Trainer`. Subclasses take the job's
    config (`config`, a `DiffusionRLJob`) and write `rollout(prompts, metadata, batch)`, `micro_batches(rollout)`
    (`sample_chunks` cuts the rollout) and `compute_loss`, and may change `advantages(scores)`. The job's config says
    which weight copies are kept (`weight_copies`: its EMA, the KL reference) and how a rollout is cut
    (`rollout_chunks`, `micro_batches_per_update`), for the trainer and `estimate-memory` alike."""

    def __init__(
        self, adapter, rewards: list, config, train_dataset, args, eval_rewards: list | None = None, **kwargs
    ):
        updates = config.rollout.updates_per_rollout
        copies = config.weight_copies()
        super().__init__(
            adapter,
            train_dataset=RolloutPrompts(train_dataset, args, updates),
            args=args,
            ema_decay=config.ema_decay(),
            ema_warmup=config.ema_warmup(),
            weight_copies=copies,
            **kwargs,
        )
        # The frozen base for a KL term: a LoRA reaches it by disabling its adapters, full fine-tuning keeps a copy.
        self.reference_copy = None
        if "reference" in copies:
            self.reference_copy = self.keep(ParameterCopy(adapter.transformer), "reference")
        self.chunks = config.rollout_chunks()
        self.micro_batches_per_rollout = config.micro_batches_per_update() * updates
        self.rewards = rewards
        self.rollout_config = config.rollout
        self.group_size = config.rollout.samples_per_prompt
        self.size = config.sample_size(type(adapter), adapter.default_size(), adapter.max_sample_side())
        self._grids: dict[int, NoiseGrid] = {}
        self._buffer: list[dict[str, Any]] = []
        self._metrics: dict[str, list[float]] = defaultdict(list)
        with torch.no_grad():
            self.unconditional = adapter.encode_prompts([adapter.negative_prompt])
        self.evaluation = None
        if config.eval is not None:
            self.evaluation = RLEvaluation(self, config.eval, eval_rewards or rewards)
            self.add_callback(self.evaluation)

    # --- the rollout step ------------------------------------------------------------------------------

    @classmethod
    def training_data(cls, config, adapter, args) -> tuple[Any, Any]:
        """The dataset and collator a rollout draws its prompts from (`config`: the job's config): the prompt list."""
        from ...data import collate_prompts, load_prompt_list

        prompts, report = load_prompt_list(config.data)
        logger.info("training on %d prompts (%d skipped)", report.kept, report.skipped)
        return prompts, collate_prompts

    def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if not self._buffer:
            prompts = [p for p in inputs["prompts"] for _ in range(self.group_size)]
            metadata = [m for m in inputs["metadata"] for _ in range(self.group_size)]
            rollout = self.rollout(prompts, metadata, inputs)
            rollout["advantages"] = self.advantages(
                self.score(rollout.pop("latents_for_reward"), prompts, metadata)
            )
            self._buffer = self.micro_batches(rollout)
            expected = self.micro_batches_per_rollout
            if len(self._buffer) != expected:  # an algorithm whose `micro_batches` disagrees with its schema
                raise RuntimeError(
                    f"{type(self).__name__}.micro_batches gave {len(self._buffer)} micro-batches, but its job's "
                    f"micro_batches_per_update() x updates_per_rollout is {expected}"
                )
        return self._buffer.pop(0)

    def rollout(self, prompts: list[str], metadata: list[dict], batch: dict[str, Any]) -> dict[str, Any]:
        """Sample one image/video per prompt row (rows repeat each of `batch`'s prompts K times). Returns at least
        `latents_for_reward` (clean latents to decode and score) and what `micro_batches` needs."""
        raise NotImplementedError

    def advantages(self, scores: dict[str, torch.Tensor]) -> torch.Tensor:
        """One advantage per row from each reward's scores (`score`): by default the references' form, the raw
        weighted sum normalised within each prompt group by the global std."""
        return self.group_advantages(weighted_reward(scores, self.reward_weights()), global_std=True)

    def micro_batches(self, rollout: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def reference(self):
        """The frozen base model (for a KL term, no-grad forwards only), as a context giving the module to call."""
        return frozen_base(self.adapter.transformer, self.reference_copy)

    def grid(self, steps: int) -> NoiseGrid:
        """The pipeline's own noise grid for `steps` sampler steps at the rollout size (`sampling.noise_grid`)."""
        if steps not in self._grids:
            self._grids[steps] = noise_grid(self.adapter, steps, self.latent_shape())
        return self._grids[steps]

    def latent_shape(self) -> tuple[int, ...]:
        return self.adapter.latent_shape(*self.size)

    def noise(self, rows: int, same_per_group: bool = False) -> torch.Tensor:
        """Initial noise for `rows` samples (the global RNG, so a resumed run draws the same); `same_per_group`
        gives each prompt's K samples one noise (FlowGRPO's `same_latent`, DDRL's `use_same_seed`)."""
        shape, device = self.latent_shape(), self.adapter.device
        if same_per_group:
            return torch.randn(rows // self.group_size, *shape, device=device).repeat_interleave(
                self.group_size, 0
            )
        return torch.randn(rows, *shape, device=device)

    def guidance(self, rows: int) -> Guidance:
        scale = self.rollout_config.guidance_scale
        if scale == 1.0:
            return Guidance()
        unconditional = {k: v.expand(rows, *v.shape[1:]) for k, v in self.unconditional.items()}
        return Guidance(scale, unconditional, batched=self.rollout_config.batched_guidance)

    def conditioning(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.adapter.encode_prompts(prompts)

    def sample_chunks(self, rows: int, keep: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The rollout's samples (those in `keep`, default all), shuffled, as the config's number of chunks
        (`rollout_chunks`): index tensors, sizes differing by at most one (the references' shuffled split)."""
        kept = torch.arange(rows) if keep is None else keep
        order = kept[torch.randperm(len(kept))]
        return list(torch.tensor_split(order, self.chunks))

    # --- rewards ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def score(
        self, latents: torch.Tensor, prompts: list[str], metadata: list[dict]
    ) -> dict[str, torch.Tensor]:
        """Decode and score with every reward: {reward name: float64 scores per row}. The rows are decoded in parts
        of `sampling_batch_size` (default: all at once), and each part is submitted to every reward as soon as it
        is decoded: a remote reward's service scores it while the next part decodes."""
        size = self.rollout_config.sampling_batch_size or len(latents)
        has_metadata = any(metadata)
        pending = {reward.name: [] for reward in self.rewards}
        for start in range(0, len(latents), size):
            rows = slice(start, start + size)
            media = to_uint8(self.adapter.decode_latents(latents[rows]), channel_dim=1, low=-1).cpu().numpy()
            for reward in self.rewards:
                part_metadata = metadata[rows] if has_metadata else None
                pending[reward.name].append(reward.submit(media, prompts[rows], part_metadata))
        scores = {
            name: torch.tensor([v for collect in parts for v in collect()[name]], dtype=torch.float64)
            for name, parts in pending.items()
        }
        for name, values in scores.items():
            self._metrics[f"rewards/{name}"].append(values.mean().item())
        total = weighted_reward(scores, self.reward_weights())
        self._metrics["reward"].append(total.mean().item())
        self._metrics["reward_std"].append(total.std(correction=0).item())
        return scores

    def reward_weights(self) -> dict[str, float]:
        return {reward.name: reward.weight for reward in self.rewards}

    def group_advantages(self, rewards: torch.Tensor, global_std: bool) -> torch.Tensor:
        """`group_advantages` over this process's rows, the global std over every process's rewards."""
        advantages = group_advantages_across(self.accelerator, rewards, self.group_size, global_std)
        return advantages.float().to(self.adapter.device)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if not any(key.startswith("eval/") for key in logs):  # an evaluation logs its own values alone
            for key, values in self._metrics.items():
                logs[key] = sum(values) / len(values)
            self._metrics.clear()
        super().log(logs, start_time)


@contextlib.contextmanager
def frozen_base(transformer, reference_copy: ParameterCopy | None):
    """`transformer` as the frozen base while the block runs: a full fine-tuning's kept copy swapped in, or a LoRA's
    adapters disabled."""
    if reference_copy is not None:
        with reference_copy.swapped_in():
            yield transformer
        return
    transformer.disable_adapters()
    try:
        yield transformer
    finally:
        transformer.enable_adapters()


class RolloutPrompts(torch.utils.data.Dataset):
    """The prompts (or DDRL's data items), repeated so that every epoch holds whole rollouts on every process.

    The Trainer draws one batch per micro-step, but a rollout samples only at its first micro-step (the others train
    on its micro-batches). Repeating each item `updates_per_rollout x gradient_accumulation_steps` times, padded to
    whole batches on every process, keeps every epoch a whole number of rollouts, and the
    shuffled repeats keep items drawn uniformly."""

    def __init__(self, prompts, args, updates_per_rollout: int = 1):
        self.prompts = prompts
        per_step = args.per_device_train_batch_size * max(args.world_size, 1)
        rollouts = math.ceil(
            len(prompts) / per_step
        )  # each uses one batch of items, and U x accumulation micro-steps
        self.length = rollouts * updates_per_rollout * per_step * args.gradient_accumulation_steps

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.prompts[index % len(self.prompts)]


# ---------------------------------------------------------------------------------------------------------
# Running a job


def run_diffusion_rl(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """Run a diffusion RL job with its kind's trainer class; the trained pipeline (or LoRA) is under
    `output_dir/safetensors/`."""
    trainer = build_diffusion_rl_trainer(job, callbacks)
    train_and_save(trainer, job)
    return trainer


def build_diffusion_rl_trainer(job: Job, callbacks: list | None = None) -> DiffusionRLTrainer:
    """The job's rewards, pipeline, prompts and trainer, ready to train (rewards first: a reward that cannot load
    fails before the model does)."""
    from ...diffusion.adapter import AdapterOptions
    from ...diffusion.loading import pipeline_adapter_class
    from ...rewards import build_media_rewards, reward_specs

    config = job.config
    trainer_class = job.kind.trainer_class()
    rewards = build_media_rewards(reward_specs(config.rewards), search_path=Path(job.source).parent)
    eval_rewards = None
    if config.eval is not None and config.eval.rewards is not None:
        eval_rewards = build_media_rewards(
            reward_specs(config.eval.rewards), search_path=Path(job.source).parent
        )
    family = pipeline_adapter_class(config.model)
    adapter, lora = load_for_training(job, AdapterOptions(max_sequence_length=config.text_tokens(family)))
    dataset, collate = trainer_class.training_data(config, adapter, job.args)
    return trainer_class(
        adapter,
        rewards,
        config,
        lora=lora,
        args=job.args,
        train_dataset=dataset,
        data_collator=collate,
        callbacks=callbacks,
        eval_rewards=eval_rewards,
    )
