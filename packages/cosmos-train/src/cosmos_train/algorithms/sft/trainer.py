"""Supervised fine-tuning on TRL's `SFTTrainer`, for the Cosmos3 reasoner, VLMs and text LMs.

The story of a run (`run_sft`), once `read_job` has validated the job and built its `SFTConfig`
(`schema.py`):
1. load the model (any Cosmos3 checkpoint layout, any supported family) and freeze what is asked;
2. load and validate the conversations;
3. hand them to TRL: VLM batches through our collator (media decoding, assistant masks), text
   conversations tokenized by us (assistant masks), then truncated and packed by TRL;
4. train and save on the shared skeleton (`common.train_and_save`).
"""

from __future__ import annotations

import logging

from trl import SFTTrainer

from ...data import build_collator, load_conversations, tokenize_conversations
from ...jobs import Job
from ...models import load_model, lora_config
from ..common import CrashSafeTrainerMixin, train_and_save

logger = logging.getLogger(__name__)


class CosmosSFTTrainer(CrashSafeTrainerMixin, SFTTrainer):
    """TRL's `SFTTrainer` with crash-safe checkpoints and a stop on non-finite loss."""


def run_sft(job: Job, callbacks: list | None = None) -> CosmosSFTTrainer:
    """Run an SFT job (from `cosmos_train.jobs.read_job`); the final model is in `job.args.output_dir`.

    `callbacks` are extra `transformers.TrainerCallback`s, for scripts that drive a job themselves.
    """
    config = job.config
    loaded = load_model(config.model, packing=config.data.packing)
    dataset, report = load_conversations(config.data)
    logger.info("training on %d conversations (%d skipped)", report.kept, report.skipped)

    if loaded.is_vision_language:
        data_collator = build_collator(loaded.processing_class, config.data, config.data.max_length)
    else:
        # Text LMs: tokenized with assistant masks here; TRL builds the labels, truncates and packs.
        dataset = tokenize_conversations(dataset, loaded.processing_class, config.data)
        data_collator = None

    trainer = CosmosSFTTrainer(
        model=loaded.model,
        args=job.args,
        train_dataset=dataset,
        processing_class=loaded.processing_class,
        data_collator=data_collator,
        peft_config=lora_config(config.lora, loaded.is_vision_language) if config.lora else None,
        callbacks=callbacks,
    )
    train_and_save(trainer, job, loaded.processing_class)
    return trainer
