"""What every diffusion trainer shares, on transformers' `Trainer`: the model adapter, the EMA of the
trained weights (a callback whose state is saved inside each checkpoint), validation samples, and the
exports users load (`output_dir/safetensors/step_N/`).

Algorithms (flow-matching SFT, and the RL trainers) subclass `DiffusionTrainer` and write `compute_loss`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from ..diffusion.adapter import AdapterOptions, DiffusionAdapter
from ..diffusion.loading import add_lora, load_adapter
from .common import CrashSafeTrainerMixin

logger = logging.getLogger(__name__)

EMA_FILE = "ema.safetensors"
EXPORTS = "safetensors"  # output_dir/safetensors/step_N/: what users load


# ---------------------------------------------------------------------------------------------------------
# EMA


class EMACallback(TrainerCallback):
    """An EMA of the trained parameters (diffusers' `EMAModel`), updated after every optimizer step.

    Saved as safetensors inside each checkpoint (with the checkpoint, before it is marked complete) and
    restored on resume, so a resumed run continues the same average.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        from diffusers.training_utils import EMAModel

        self.names = [name for name, p in model.named_parameters() if p.requires_grad]
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.ema = EMAModel(self.parameters, decay=decay, foreach=False)

    def on_step_end(self, args, state, control, **kwargs):
        self.ema.step(self.parameters)

    @contextlib.contextmanager
    def applied(self):
        """The EMA weights in place of the trained ones for the duration of the block."""
        self.ema.store(self.parameters)
        self.ema.copy_to(self.parameters)
        try:
            yield
        finally:
            self.ema.restore(self.parameters)

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        state = self.ema.state_dict()
        tensors = {
            name: shadow.detach().cpu().contiguous()
            for name, shadow in zip(self.names, state.pop("shadow_params"), strict=True)
        }
        save_file(tensors, folder / EMA_FILE, metadata={"ema": json.dumps(state)})

    def load(self, folder: Path) -> None:
        from safetensors import safe_open

        path = folder / EMA_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{folder} has no {EMA_FILE}: it was saved without [diffusion] ema_decay")
        with safe_open(path, "pt") as handle:
            state = json.loads(handle.metadata()["ema"])
            missing = set(self.names) - set(handle.keys())
            if missing:
                raise ValueError(
                    f"{path} lacks EMA weights for {len(missing)} parameters, e.g. {sorted(missing)[0]}"
                )
            state["shadow_params"] = [
                handle.get_tensor(name).to(p.device)
                for name, p in zip(self.names, self.parameters, strict=True)
            ]
        self.ema.load_state_dict(state)


# ---------------------------------------------------------------------------------------------------------
# Validation samples


class ValidationCallback(TrainerCallback):
    """Every `every` steps, generate the validation prompts with fixed seeds (EMA weights when kept) and write
    a PNG grid (images) or one MP4 per prompt (videos) under `output_dir/samples/step_N/`, and to TensorBoard
    when it is a tracker."""

    def __init__(self, trainer: DiffusionTrainer, prompts: list[str], every: int, generate_kwargs: dict):
        self.trainer, self.prompts, self.every, self.generate_kwargs = (
            trainer,
            prompts,
            every,
            generate_kwargs,
        )

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 and state.is_world_process_zero:
            self.write(Path(args.output_dir) / "samples" / f"step_{state.global_step}", state.global_step)

    def write(self, folder: Path, step: int) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        with self.trainer.weights_for_export():
            media = self.trainer.adapter.generate(self.prompts, **self.generate_kwargs)
        (folder / "prompts.json").write_text(json.dumps(self.prompts, indent=1))
        if media.dim() == 4:  # B x 3 x H x W in [0, 1]
            from torchvision.utils import make_grid, save_image

            save_image(media, folder / "grid.png", nrow=min(len(self.prompts), 4))
            self._to_tensorboard(make_grid(media, nrow=min(len(self.prompts), 4)), step)
        else:  # B x T x 3 x H x W
            from ..diffusion.media_io import write_mp4

            for index, frames in enumerate(media):
                write_mp4(folder / f"{index:02d}.mp4", frames, fps=self.generate_kwargs.get("fps", 8))
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
    """transformers' `Trainer` on a pipeline's transformer, with the EMA kept in checkpoints and a loadable
    pipeline (or LoRA) written beside each checkpoint. Subclasses implement `compute_loss`."""

    def __init__(
        self, adapter: DiffusionAdapter, ema_decay: float | None = None, lora: dict | None = None, **kwargs
    ):
        super().__init__(model=adapter.transformer, **kwargs)
        self.adapter = adapter
        self.lora = lora  # {"r", "alpha"} when a LoRA is trained
        self.model_accepts_loss_kwargs = False  # our loss is a mean: Trainer scales it for accumulation
        _diffusers_safe_tensorboard(self)
        self.ema = EMACallback(adapter.transformer, ema_decay) if ema_decay else None
        if self.ema is not None:
            self.add_callback(self.ema)

    def weights_for_export(self):
        """Validation and exports use the EMA weights when the job keeps an EMA."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def train(self, resume_from_checkpoint=None, **kwargs):
        if resume_from_checkpoint and self.ema is not None:
            self.ema.load(Path(resume_from_checkpoint))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        # Also called inside each checkpoint save, so the EMA lands before the COMPLETE marker.
        super().save_model(output_dir, _internal_call)
        if self.ema is not None and self.args.should_save:
            self.ema.save(Path(output_dir or self.args.output_dir))

    def _save_extra_state(self, checkpoint: Path) -> None:
        self.export(Path(self.args.output_dir) / EXPORTS / f"step_{self.state.global_step}")

    def export(self, folder: Path) -> Path:
        """Write what users load (`export_pipeline`), with the EMA weights when kept."""
        if self.args.should_save:
            with self.weights_for_export():
                export_pipeline(self.adapter, folder, self.lora, overwrite=True)
        return folder


def export_pipeline(
    adapter: DiffusionAdapter,
    folder: Path,
    lora: dict | None,
    merge_lora: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write the adapter's pipeline as users load it, atomically: `folder/lora/` for
    `pipeline.load_lora_weights(folder / "lora")` when a LoRA is trained, or with `merge_lora` (and for full
    fine-tuning) a complete pipeline for `DiffusionPipeline.from_pretrained(folder)`."""
    from transformers_cosmos3.checkpoint import atomic_directory

    with atomic_directory(folder, overwrite=overwrite) as scratch:
        if lora is not None and not merge_lora:
            from peft.utils import get_peft_model_state_dict

            (scratch / "lora").mkdir()
            state = get_peft_model_state_dict(adapter.transformer)
            adapter.save_lora(scratch / "lora", state, alpha=lora["alpha"], rank=lora["r"])
        else:
            if lora is not None:
                adapter.transformer.fuse_lora()
                adapter.transformer.unload_lora()
            adapter.pipeline.save_pretrained(scratch)
    return folder


def prepare_adapter(job) -> tuple[DiffusionAdapter, dict | None]:
    """Load the job's pipeline and adapter, add its LoRA (or train all of the transformer), and turn on
    gradient checkpointing when `[train]` asks."""
    from transformers import set_seed

    config = job.config
    set_seed(job.args.seed)  # the LoRA's random init: reruns of a job start from the same weights
    diffusion = getattr(config, "diffusion", None)  # SFT's [diffusion]; RL jobs sample text-to-image/video
    options = (
        AdapterOptions(
            conditioning_mix=dict(diffusion.conditioning_mix),
            max_sequence_length=diffusion.max_sequence_length,
        )
        if diffusion is not None
        else AdapterOptions(max_sequence_length=getattr(config.rollout, "max_sequence_length", None))
    )
    adapter = load_adapter(config.model.name_or_path, options, dtype=config.model.dtype)
    lora = None
    if config.lora is not None:
        targets = add_lora(
            adapter, config.lora.r, config.lora.alpha, config.lora.dropout, config.lora.target_modules
        )
        lora = {"r": config.lora.r, "alpha": config.lora.alpha, "target_modules": targets}
    else:
        adapter.prepare_full_finetuning()
    if config.train.gradient_checkpointing:
        adapter.transformer.enable_gradient_checkpointing()
    adapter.transformer.train()
    return adapter, lora
