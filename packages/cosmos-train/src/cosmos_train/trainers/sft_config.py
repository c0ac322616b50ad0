"""The SFT job's TRL config: `[train]` verbatim, plus what the other sections imply."""

from __future__ import annotations

from typing import Any

import torch
from trl import SFTConfig

from ..config import ConfigError, JobConfig, build_trl_config
from ..launch import training_arguments


def implied_sft_arguments(job: JobConfig) -> dict[str, Any]:
    """SFTConfig fields owned by other sections of the job; `[train]` may not contradict them."""
    implied: dict[str, Any] = {
        "max_length": job.data.max_length,
        "packing": job.data.packing,
        "padding_free": job.data.packing,
        "assistant_only_loss": True,  # loss on assistant tokens only
        "model_init_kwargs": None,
        **training_arguments(job.launch.backend),
    }
    if job.data.packing:
        implied["packing_strategy"] = "bfd"
    return implied


def data_arguments(is_vision_language: bool) -> dict[str, Any]:
    """VLM batches are built from raw conversations by our collator, so TRL keeps every column and
    skips its own preparation; text LMs use TRL's tokenization, assistant masks and packing."""
    if is_vision_language:
        return {"remove_unused_columns": False, "dataset_kwargs": {"skip_prepare_dataset": True}}
    return {}


def build_sft_config(job: JobConfig, source: str) -> SFTConfig:
    train = dict(job.train)
    if job.train.get("resume_from_checkpoint") not in (None, True, False):
        raise ConfigError(
            f"{source}: [train] resume_from_checkpoint must be true or false "
            "(true resumes from the latest complete checkpoint in output_dir)"
        )
    train.pop("resume_from_checkpoint", None)  # handled by the trainer: latest *complete* checkpoint
    if not torch.cuda.is_available():
        if job.launch.backend == "fsdp":
            raise ConfigError(
                f"{source}: [launch] backend 'fsdp' needs GPUs (accelerate would run plain DDP on CPUs)"
            )
        train.setdefault("bf16", False)  # TRL defaults to bf16 mixed precision, which needs a GPU
        # Without it, accelerate finds no device and every launched process trains alone.
        train.setdefault("use_cpu", True)
    return build_trl_config(SFTConfig, train, source, **implied_sft_arguments(job))
