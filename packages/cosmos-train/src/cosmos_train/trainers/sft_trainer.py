"""Supervised fine-tuning on TRL's `SFTTrainer`, for the Cosmos3 reasoner, VLMs and text LMs.

The story of a run (`run_sft`):
1. map the job file onto TRL's `SFTConfig` (`sft_config.py`);
2. load the model (any Cosmos3 checkpoint layout, any supported family) and freeze what is asked;
3. load and validate the conversations;
4. train with TRL, resuming from the latest *complete* checkpoint when asked;
5. save the final model, processor, job file and a model card to `output_dir`.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import logging
from pathlib import Path

from trl import SFTTrainer

from ..checkpoints import latest_complete_checkpoint
from ..config import JobConfig
from ..data import build_collator, load_conversations, to_text_messages
from ..models import load_model, lora_config
from .common import CrashSafeTrainerMixin
from .sft_config import build_sft_config, data_arguments

logger = logging.getLogger(__name__)


class CosmosSFTTrainer(CrashSafeTrainerMixin, SFTTrainer):
    """TRL's `SFTTrainer` with crash-safe checkpoints and a stop on non-finite loss."""


def run_sft(
    job: JobConfig, source: str = "job.toml", job_text: str | None = None, callbacks: list | None = None
) -> CosmosSFTTrainer:
    """Run an SFT job; the final model is in `trainer.args.output_dir`.

    `callbacks` are extra `transformers.TrainerCallback`s, for scripts that drive a job themselves.
    """
    args = build_sft_config(job, source)
    loaded = load_model(job.model, packing=job.data.packing)
    dataset, report = load_conversations(job.data)
    logger.info("training on %d conversations (%d skipped)", report.kept, report.skipped)

    args = dataclasses.replace(args, **data_arguments(loaded.is_vision_language))
    if loaded.is_vision_language:
        data_collator = build_collator(loaded.processing_class, job.data, job.data.max_length)
    else:
        # Text LMs go through TRL's own tokenization, assistant masks and packing.
        dataset = dataset.map(
            lambda row: {"messages": to_text_messages(row["messages"])},
            remove_columns=[c for c in dataset.column_names if c != "messages"],
        )
        data_collator = None

    trainer = CosmosSFTTrainer(
        model=loaded.model,
        args=args,
        train_dataset=dataset,
        processing_class=loaded.processing_class,
        data_collator=data_collator,
        peft_config=lora_config(job.lora, loaded.is_vision_language) if job.lora else None,
        callbacks=callbacks,
    )

    resume = None
    if job.train.get("resume_from_checkpoint"):
        resume = latest_complete_checkpoint(args.output_dir)
        logger.info("resuming from %s", resume) if resume else logger.info(
            "no complete checkpoint; starting fresh"
        )
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    output_dir = Path(args.output_dir)
    trainer.save_model(str(output_dir))
    if trainer.accelerator.is_main_process:
        loaded.processing_class.save_pretrained(output_dir)
        if job_text is not None:
            (output_dir / "cosmos_train_job.toml").write_text(job_text)
    trainer.accelerator.wait_for_everyone()  # every rank returns once the model is fully saved
    if trainer.accelerator.num_processes > 1:
        atexit.unregister(_release_process_group)
        atexit.register(_release_process_group)
    return trainer


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
