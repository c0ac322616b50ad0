"""Load a diffusers pipeline for training: its adapter, frozen parts, and LoRA or full fine-tuning."""

from __future__ import annotations

import importlib
import logging

import torch

from .adapter import AdapterOptions, DiffusionAdapter, adapter_class_for

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_adapter(name_or_path: str, options: AdapterOptions, dtype: str = "float32") -> DiffusionAdapter:
    """The pipeline at `name_or_path` (hub id or folder) wrapped in its family's adapter.

    The adapter is chosen before any weights load, so an unsupported pipeline fails at once. The frozen
    parts take `dtype`; the transformer stays float32 (mixed precision comes from `[train] bf16`).
    """
    from diffusers import DiffusionPipeline

    config = DiffusionPipeline.load_config(name_or_path)
    adapter_class = adapter_class_for(config["_class_name"])
    # diffusers finds a component class of a non-library module only once that module is imported
    # (the tiny pipelines' stand-in safety checker lives in cosmos_train).
    for entry in config.values():
        if isinstance(entry, list) and entry and str(entry[0]).startswith("cosmos_train."):
            importlib.import_module(entry[0])
    pipeline = DiffusionPipeline.from_pretrained(
        name_or_path, dtype=DTYPES[dtype], **adapter_class.pipeline_load_kwargs
    )
    if pipeline.transformer.dtype != torch.float32:
        pipeline.transformer.to(torch.float32)
    pipeline.set_progress_bar_config(disable=True)
    adapter = adapter_class(pipeline, options)
    for module in adapter.frozen_modules():
        module.requires_grad_(False).eval()
    return adapter


def add_lora(adapter: DiffusionAdapter, rank: int, alpha: int, dropout: float, target_modules) -> list[str]:
    """Put a PEFT LoRA on the transformer (diffusers' `add_adapter`), so only the adapters train."""
    from peft import LoraConfig

    targets = list(adapter.lora_target_modules) if target_modules is None else target_modules
    adapter.transformer.requires_grad_(False)
    adapter.transformer.add_adapter(
        LoraConfig(
            r=rank,
            lora_alpha=alpha,
            lora_dropout=dropout,
            target_modules=targets,
            init_lora_weights="gaussian",
        )
    )
    return targets
