"""What every diffusion trainer shares, on transformers' `Trainer`: the model adapter, copies of the trained
weights kept beside them (the EMA; an algorithm's own, such as DiffusionNFT's old policy), saved inside each
checkpoint, validation samples, and the exports users load (`output_dir/safetensors/step_N/`).

Algorithms (flow-matching SFT, and the RL trainers) subclass `DiffusionTrainer` and write `compute_loss`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from transformers import Trainer, TrainerCallback

from ...diffusion.adapter import AdapterOptions, DiffusionAdapter
from ...diffusion.export import export_pipeline
from ...diffusion.loading import load_adapter, prepare_training
from ...diffusion.media_io import to_uint8, write_samples
from ...diffusion.weights import ExponentialAverage, ParameterCopy
from ...launch import zero3
from ..common import CrashSafeTrainerMixin, log_weight_copies

logger = logging.getLogger(__name__)

EXPORTS = "safetensors"  # output_dir/safetensors/step_N/: what users load


class UpdateCopies(TrainerCallback):
    """Updates the trainer's weight copies (the EMA, an old policy) after the optimizer steps each one's `when(step)`
    picks (`step`: the steps done)."""

    def __init__(self):
        self.schedule: list[tuple[ParameterCopy, Callable[[int], bool]]] = []

    def on_step_end(self, args, state, control, **kwargs):
        for copy, when in self.schedule:
            if when(state.global_step):
                copy.update(state.global_step)


def every_step(step: int) -> bool:
    return True


# ---------------------------------------------------------------------------------------------------------
# Validation samples


class ValidationCallback(TrainerCallback):
    """Every `every` steps, generate the validation prompts with fixed seeds (EMA weights when kept) and write
    them under `output_dir/samples/step_N/` (`write_samples`: a PNG grid of images or one MP4 per prompt, and
    `samples.json`), the grid also to TensorBoard when it is a tracker."""

    def __init__(self, trainer: DiffusionTrainer, prompts: list[str], every: int, generate_kwargs: dict):
        self.trainer, self.prompts, self.every, self.generate_kwargs = (
            trainer,
            prompts,
            every,
            generate_kwargs,
        )

    def on_step_end(self, args, state, control, **kwargs):
        # A partitioned model gathers its layers from every process: then every process generates.
        if state.global_step % self.every == 0 and (state.is_world_process_zero or self.trainer.partitioned):
            self.write(Path(args.output_dir) / "samples" / f"step_{state.global_step}", state.global_step)

    def write(self, folder: Path, step: int) -> Path:
        media = self.trainer.generate_samples(self.prompts, **self.generate_kwargs)
        if not self.trainer.is_world_process_zero():
            return folder
        records = [{"prompt": prompt} for prompt in self.prompts]
        fps = self.trainer.adapter.generate_kwargs.get("fps", 8)
        grid = write_samples(folder, media, records, fps=fps)
        if grid is not None:
            self._to_tensorboard(grid, step)
        logger.info("validation samples written to %s", folder)
        return folder

    def _to_tensorboard(self, grid: torch.Tensor, step: int) -> None:
        """Into the run's own TensorBoard log (transformers' callback owns the writer), when it is a tracker."""
        from transformers.integrations import TensorBoardCallback

        for callback in self.trainer.callback_handler.callbacks:
            if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
                callback.tb_writer.add_image("validation", grid, step)
                callback.tb_writer.flush()


def _diffusers_safe_tensorboard(trainer: Trainer) -> None:
    """transformers' TensorBoard callback writes `model.config.to_json_string()` at the start, which a
    diffusers model's config (a FrozenDict) lacks: give it a subclass that skips the model config."""
    from transformers.integrations import TensorBoardCallback

    class DiffusersTensorBoardCallback(TensorBoardCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            kwargs.pop("model", None)
            super().on_train_begin(args, state, control, **kwargs)

    for callback in list(trainer.callback_handler.callbacks):
        if type(callback) is TensorBoardCallback:
            trainer.callback_handler.remove_callback(callback)
            trainer.callback_handler.add_callback(DiffusersTensorBoardCallback(callback.tb_writer))


# ---------------------------------------------------------------------------------------------------------
# The trainer base


class DiffusionTrainer(CrashSafeTrainerMixin, Trainer):
    """transformers' `Trainer` on a pipeline's transformer, with weight copies kept in checkpoints and a loadable
    pipeline (or LoRA) written beside each checkpoint. Subclasses implement `compute_loss`.

    Under DeepSpeed ZeRO-3 the transformer is partitioned as soon as the trainer is made (not later, inside
    `deepspeed.initialize`), so that every copy of its weights is made of the same partitions
    (`diffusion.weights`); exports and validation gather it."""

    def __init__(
        self,
        adapter: DiffusionAdapter,
        ema_decay: float | None = None,
        ema_warmup: bool = True,
        lora: dict | None = None,
        ema_every: int = 1,
        weight_copies: tuple[str, ...] | None = None,
        **kwargs,
    ):
        super().__init__(model=adapter.transformer, **kwargs)
        self.adapter = adapter
        self.lora = lora  # {"r", "alpha", "target_modules"} when a LoRA is trained
        self.model_accepts_loss_kwargs = False  # our loss is a mean: Trainer scales it for accumulation
        _diffusers_safe_tensorboard(self)
        # DeepSpeed sizes its "auto" buckets from `config.hidden_size`, which diffusers configs lack.
        if self.is_deepspeed_enabled:
            zero3.fill_width_keys(self.args.hf_deepspeed_config, transformer_width(adapter.transformer))
        self.partitioned = zero3.zero3_enabled()
        if self.partitioned:
            zero3.partition(adapter.transformer, self.args.hf_deepspeed_config.config)
        self.copies: dict[str, ParameterCopy] = {}  # every copy, by name: logged with the bytes it holds
        self.saved_copies: list[ParameterCopy] = []  # saved in each checkpoint, restored on resume
        self.copy_updates = UpdateCopies()
        self.add_callback(self.copy_updates)
        self.declared_copies = (
            weight_copies  # the job's `weight_copies()`: checked against those kept at the start
        )
        self.ema = None
        if ema_decay:
            # Every `ema_every` steps, at steps s with (s + 1) % ema_every == 0 (FlowGRPO's update_step_interval 8).
            self.ema = self.keep_updated(
                ExponentialAverage(adapter.transformer, ema_decay, ema_warmup),
                lambda step: (step + 1) % ema_every == 0,
            )

    def keep_updated(self, copy: ParameterCopy, when: Callable[[int], bool] = every_step) -> ParameterCopy:
        """Update `copy` after the optimizer steps `when(step)` picks (all by default); keep it in checkpoints."""
        self.copy_updates.schedule.append((copy, when))
        self.saved_copies.append(copy)
        return self.keep(copy)

    def keep(self, copy: ParameterCopy, name: str | None = None) -> ParameterCopy:
        self.copies[name or Path(copy.filename).stem] = copy
        return copy

    @torch.no_grad()
    def generate_samples(self, prompts: list[str], **kwargs) -> np.ndarray:
        """`prompts` through the pipeline's own sampler (`adapter.generate`'s arguments: sample i from seed + i),
        with the weights exports use (the EMA when kept), as uint8 `B x H x W x 3` images or `B x T x H x W x 3`
        videos. Every process must call it when the model is partitioned (its layers are gathered)."""
        with self.weights_for_export():
            media = self.adapter.generate(prompts, **kwargs)
        return to_uint8(media, channel_dim=-3).cpu().numpy()

    def weights_for_export(self):
        """Validation and exports use the EMA weights when the job keeps an EMA."""
        return self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext()

    def train(self, resume_from_checkpoint=None, **kwargs):
        kept = sorted(self.copies)
        if self.declared_copies is not None and kept != sorted(self.declared_copies):
            raise RuntimeError(  # `estimate-memory` counts what the job declares: they must agree
                f"{type(self).__name__} keeps the weight copies {kept}, but its job's weight_copies() says "
                f"{sorted(self.declared_copies)}"
            )
        if resume_from_checkpoint:
            for copy in self.saved_copies:
                copy.load(Path(resume_from_checkpoint))
        held = {name: copy.nbytes for name, copy in self.copies.items()}
        log_weight_copies(self.args, held, self.partitioned)
        output = super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        # Every run ends with an export of its final weights, whatever its save strategy.
        final = Path(self.args.output_dir) / EXPORTS / f"step_{self.state.global_step}"
        missing = not final.is_dir()  # the last step was not a save step
        self.accelerator.wait_for_everyone()  # every process decides before any writes (a ZeRO-3 export gathers)
        if missing:
            self.export(final)
        return output

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        # Also called inside each checkpoint save, so the copies land before the COMPLETE marker.
        super().save_model(output_dir, _internal_call)
        folder = Path(output_dir or self.args.output_dir)
        for copy in self.saved_copies:
            if copy.partitioned or self.args.should_save:  # partitioned: each process writes its slices
                folder.mkdir(parents=True, exist_ok=True)
                copy.save(folder)

    def _save_extra_state(self, checkpoint: Path) -> None:
        self.export(Path(self.args.output_dir) / EXPORTS / f"step_{self.state.global_step}")

    def export(self, folder: Path) -> Path:
        """Write what users load (`export_pipeline`), with the EMA weights when kept (every process takes part:
        a partitioned model is gathered first)."""
        with self.weights_for_export(), zero3.whole_on_main_process(self.adapter.transformer):
            if self.args.should_save:
                export_pipeline(self.adapter, folder, self.lora, overwrite=True, extras=self.export_extras)
        return folder

    def export_extras(self, folder: Path, adapter: DiffusionAdapter) -> None:
        """A kind's own files in each export, written inside its atomic write (none by default)."""


def transformer_width(transformer: torch.nn.Module) -> int:
    """The model width DeepSpeed sizes its buckets from: heads x head size, else the widest linear input."""
    config = transformer.config
    heads, head_dim = config.get("num_attention_heads"), config.get("attention_head_dim")
    if heads and head_dim:
        return int(heads * head_dim)
    return max(m.in_features for m in transformer.modules() if isinstance(m, torch.nn.Linear))


def load_for_training(job, options: AdapterOptions | None = None) -> tuple[DiffusionAdapter, dict | None]:
    """The job's pipeline and adapter (with the job's `options`), made trainable as `[lora]` says
    (`prepare_training`), with gradient checkpointing when `[train]` asks. Seeded first: reruns of a job start from
    the same LoRA weights."""
    from transformers import set_seed

    set_seed(job.args.seed)
    adapter = load_adapter(job.config.model, options)
    # The Trainer moves only its model (the transformer); the VAE and text encoders encode prompts and pixels
    # before and beside it, so the whole pipeline goes to the process's device (on a GPU they stayed on the CPU).
    adapter.pipeline.to(job.args.device)
    lora = prepare_training(adapter, job.config.lora, bool(job.config.train.gradient_checkpointing))
    return adapter, lora
