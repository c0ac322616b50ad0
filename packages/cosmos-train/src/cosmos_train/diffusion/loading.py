"""Load a diffusers pipeline for training: its family's adapter, the frozen parts, and LoRA or full fine-tuning."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import torch

from ..config import LoraSection, PipelineSection
from ..errors import SourceError
from .adapter import AdapterOptions, DiffusionAdapter, adapter_class_for

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pipeline_adapter_class(section: PipelineSection, key: str = "[model]", base: Path | None = None) -> type:
    """The adapter class for `[model]`'s pipeline, from its `model_index.json` (no weights are read): the one
    `[model] adapter` names, else its family's (`diffusion/families/`). Raises a one-line SourceError or
    ConfigError naming `key`."""
    from ..model_sources import custom_code_files, pipeline_index

    where = f"{key} name_or_path"
    index_file, index = pipeline_index(section.name_or_path, where, base)
    if "_class_name" not in index:
        raise SourceError(f"{where}: {index_file} names no pipeline class (_class_name)")
    custom = custom_code_files(index_file.parent, index)
    if custom and not section.trust_remote_code:
        raise SourceError(
            f"{where} {section.name_or_path} ships code of its own ({', '.join(custom)}): "
            f"set {key} trust_remote_code = true if you trust it"
        )
    return adapter_class_for(index["_class_name"], section.adapter)


def pipeline_component_configs(
    section: PipelineSection, base: Path | None = None, names: tuple[str, ...] = ("transformer", "vae")
) -> dict[str, dict]:
    """The `config.json` of each named component of `[model]`'s pipeline (folder or hub id; no weights), {} for a
    component it does not have."""
    from ..model_sources import model_file, read_json

    configs = {}
    for name in names:
        where = f"[model] name_or_path {name}/"
        try:
            path = model_file(
                section.name_or_path, f"{name}/config.json", where, "a pipeline component", base
            )
        except SourceError:
            configs[name] = {}
            continue
        configs[name] = read_json(path, where)
    return configs


def load_adapter(model: PipelineSection | str, options: AdapterOptions | None = None) -> DiffusionAdapter:
    """The pipeline of `[model]` (or a hub id or folder) wrapped in its family's adapter (`[model] adapter`, or
    the one for the pipeline's class).

    The adapter is chosen before any weights load, so an unsupported pipeline fails at once. The frozen parts
    take `[model] dtype`; the transformer stays float32 (mixed precision comes from `[train] bf16`).
    """
    from diffusers import DiffusionPipeline

    if isinstance(model, str):
        model = PipelineSection(name_or_path=model)
    config = DiffusionPipeline.load_config(model.name_or_path)
    adapter_class = adapter_class_for(config["_class_name"], model.adapter)
    with outside_zero3_init():
        pipeline = DiffusionPipeline.from_pretrained(
            model.name_or_path,
            dtype=DTYPES[model.dtype],
            trust_remote_code=model.trust_remote_code,
            **adapter_class.pipeline_load_kwargs,
        )
    if pipeline.transformer.dtype != torch.float32:
        pipeline.transformer.to(torch.float32)
    pipeline.set_progress_bar_config(disable=True)
    adapter = adapter_class(pipeline, options)
    for module in adapter.frozen_modules():
        module.requires_grad_(False).eval()
    return adapter


@contextlib.contextmanager
def outside_zero3_init() -> Iterator[None]:
    """Load every part of a pipeline whole, even when the Trainer's ZeRO-3 config is live: transformers would build
    its text encoders inside `deepspeed.zero.Init`, partitioned, but only the trained transformer goes into the
    DeepSpeed engine (which partitions it itself), so frozen parts built partitioned would never be gathered."""
    from transformers.integrations import deepspeed

    live = deepspeed._hf_deepspeed_config_weak_ref
    deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        deepspeed._hf_deepspeed_config_weak_ref = live


def prepare_training(
    adapter: DiffusionAdapter, lora: LoraSection | None, gradient_checkpointing: bool = False
) -> dict | None:
    """Make the transformer trainable as the job asks: a PEFT LoRA (diffusers' `add_adapter`; only the LoRA
    trains), or the family's trained parameters for full fine-tuning. Returns the LoRA's `{"r", "alpha",
    "target_modules"}` (None for full fine-tuning), which exports need."""
    from peft import LoraConfig

    transformer = adapter.transformer
    trained = None
    if lora is not None:
        targets = list(adapter.lora_target_modules) if lora.target_modules is None else lora.target_modules
        transformer.requires_grad_(False)
        transformer.add_adapter(
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=targets,
                init_lora_weights="gaussian",
            )
        )
        trained = {"r": lora.r, "alpha": lora.alpha, "target_modules": targets}
    else:
        adapter.prepare_full_finetuning()
    if gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    transformer.train()
    return trained
