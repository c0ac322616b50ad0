"""Behaviour every cosmos-train trainer adds to its TRL base class."""

from __future__ import annotations

import os

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..checkpoints import latest_complete_checkpoint, mark_complete


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; training stopped before the bad update was applied."""


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
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            run_dir = self._get_output_dir(trial=trial)
            mark_complete(
                os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"),
                self.state.global_step,
            )
        self.accelerator.wait_for_everyone()
