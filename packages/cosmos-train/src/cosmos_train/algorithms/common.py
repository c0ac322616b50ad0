"""What every cosmos-train trainer shares: crash-safe checkpoints, a stop on non-finite loss, and the
run skeleton (resume, train, final save, job record, process-group release).

A trainer file builds its model, data and TRL trainer, then hands over to `train_and_save`; the
CPU/FSDP guards live with the launch backends (`cosmos_train.launch`) and apply while the job's TRL
config is built.
"""

from __future__ import annotations

import atexit
import gc
import logging
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..checkpoints import latest_complete_checkpoint, mark_complete, resumable_checkpoint
from ..errors import NonFiniteLossError
from ..jobs import JOB_RECORD, Job

logger = logging.getLogger(__name__)


class CrashSafeTrainerMixin:
    """Marks checkpoints complete only once fully written, and stops on a non-finite loss.

    Mixed in before the TRL trainer class (`class X(CrashSafeTrainerMixin, SFTTrainer)`).
    """

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Every rank must agree, or one rank would stop while the others wait in the next all-reduce.
        finite = torch.isfinite(loss.detach()).to(loss.device, torch.float32).reshape(1)
        if self.accelerator.num_processes > 1:
            finite = self.accelerator.reduce(finite, reduction="min")
        if finite.item() == 0:
            last = latest_complete_checkpoint(self.args.output_dir)
            kept = f"last good checkpoint: {last}" if last else "no checkpoint was saved yet"
            raise NonFiniteLossError(
                f"loss became {loss.item()} at step {self.state.global_step + 1}; stopped before updating ({kept})"
            )
        return loss

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        checkpoint = (
            Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        self._save_extra_state(checkpoint)
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            mark_complete(checkpoint, self.state.global_step)
        self.accelerator.wait_for_everyone()

    def _save_extra_state(self, checkpoint: Path) -> None:
        """State a trainer keeps beside the Trainer's own (an EMA, ...): written before the marker."""


def log_weight_copies(args, held: dict[str, int], partitioned: bool) -> None:
    """One line per process: the bytes it holds for each copy of the weights kept beside the trained ones (an EMA,
    an old policy, a reference model)."""
    if held:
        logger.info(
            "process %d of %d holds weight copies (%s): %s",
            args.process_index,
            args.world_size,
            "partitioned by ZeRO-3" if partitioned else "whole",
            ", ".join(f"{name} {size / 2**20:.4g} MiB" for name, size in held.items()),
        )


def train_and_save(trainer, job: Job, processing_class=None) -> None:
    """Train `trainer` for `job` and leave the final model in `output_dir`, on every trainer alike:

    1. record the effective job in `output_dir` (before training, so a crashed run keeps it too);
    2. resume from the latest *complete* checkpoint when `[train] resume_from_checkpoint = true` (logging the
       later ones it passes over, and why);
    3. train, then save the model and its tokenizer/processor;
    4. once every rank has finished, release the process group at exit.
    """
    output_dir = Path(job.args.output_dir)
    if trainer.accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / JOB_RECORD).write_text(job.record())

    resume = None
    if job.config.train.resume_from_checkpoint:
        resume, skipped = resumable_checkpoint(output_dir)
        for checkpoint, reason in skipped:
            logger.warning("not resuming from %s: %s", checkpoint, reason)
        logger.info("resuming from %s", resume or "nothing: no complete checkpoint yet")
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    trainer.save_model(str(output_dir))
    if trainer.accelerator.is_main_process and processing_class is not None:
        processing_class.save_pretrained(output_dir)
    trainer.accelerator.wait_for_everyone()  # every rank returns once the model is fully saved
    if trainer.accelerator.num_processes > 1:
        atexit.unregister(_release_process_group)
        atexit.register(_release_process_group)


def _release_process_group() -> None:
    """Destroy the process group while the interpreter is still whole.

    Left to interpreter shutdown, a gloo worker thread may free a finished collective's tensors after
    Python has started finalizing; it then cannot take the GIL and the rank aborts ("terminate called
    without an active exception"), failing a run that had finished and saved. Registered only once a
    run has finished on every rank, so a rank that failed mid-run never waits here for the others.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()  # finished trainers and their DDP wrappers still hold the group
        dist.destroy_process_group()
        gc.collect()
