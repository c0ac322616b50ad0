"""How much memory a job needs on each device, from its model built on the meta device (no weights are read):
`cosmos-train estimate-memory JOB.toml --processes N`.

What is counted, per device, in bytes:
- trained weights: the parameters that train (full fine-tuning: the trained module, or the part of it the family
  trains, e.g. Cosmos3's generator; LoRA: the adapters, which PEFT keeps in float32);
- gradients: one per trained parameter, in its dtype;
- optimizer: AdamW's two moments in the parameter's dtype (torch's AdamW); under DeepSpeed with bf16/fp16 the
  module is cast to 16 bits and the optimizer keeps a float32 master copy and float32 moments (12 bytes);
  under FSDP with bf16, accelerate upcasts the parameters to float32 (so 4 + 4 + 8 bytes);
- copies of the trained weights the trainers keep, as the job's schema declares them (`weight_copies`): the
  diffusion EMA (`[diffusion]`/`[nft]`/... `ema_decay`), DiffusionNFT's old policy, the frozen reference of a KL
  term under full fine-tuning (diffusion RL: of the
  trained parameters, in float32; GRPO with beta > 0: TRL's whole reference model); full copies on every
  process, except under ZeRO-3, which partitions them all (`diffusion.weights`), and FSDP, which shards TRL's
  reference model;
- frozen parts: the trained module's frozen parameters (LoRA's base weights, Cosmos3's reasoner, `[model]
  freeze`), and for diffusion the pipeline's other modules (VAE, text encoders) in `[model] dtype`;
- activations: what the backward pass keeps, estimated from the model's Linear layers (below), plus the
  language models' logits.

Sharding over `--processes` N: ZeRO-2 divides gradients and optimizer state by N; ZeRO-3 and FSDP also divide
the trained module's parameters (trained and frozen); DDP divides nothing. The VAE and text encoders are never
sharded, the diffusion copies only by ZeRO-3.

Activations (documented estimate, no forward is run): every Linear of the model's repeated blocks saves its
input and the next operation its output, so a token costs sum(in_features + out_features) over those Linears,
times ACTIVATION_FACTOR for what else is saved (norms, residual adds, attention statistics), in the compute
dtype (bf16 under `[train] bf16`, else the trained weights'). With gradient checkpointing only each block's input
(hidden size) is kept, plus one block's activations while it is recomputed. Tokens: what the job's schema
says one training forward holds (`activation_batch`): language models `per_device_train_batch_size` x `[data]
max_length` (SFT; the longest case) or x (512 assumed prompt tokens + `max_completion_length`) (GRPO); diffusion
models a training forward's samples x (latent tokens + text tokens),
latent tokens from the height, width and frames divided by the VAE's compression and the patch size. Language
models add the logits: tokens x vocabulary x (compute bytes + 8) (the float32 upcast and its gradient).

The peak is everything but gradients and activations, plus the larger of the two: backward frees the activations
as it writes gradients, and the optimizer runs after backward (with gradient accumulation the gradients live
through the next forward, so both count).

Sizes are said in the unit family of `--device-memory` (GB = 10^9 bytes, as GPUs are sold and the README's
table says; GiB = 2^30 with an `i`), decimal when none is given, each row in the largest unit it fills (`format_size`).

Only the model's configuration is read (a folder with `config.json`, or a pipeline's `model_index.json` and each
component's `config.json`): `--model-config FOLDER` estimates with a folder of configs in place of the job's `[model]
name_or_path` (examples/model_configs/ has those of the README's table), and the job's data are not checked.

Not counted: the vision tower's image tokens (text tokens only), the rollout's sampling (no-grad forwards, a
block at a time) and VAE decoding, ZeRO-3's gathered layer, communication buckets, the CUDA context (~0.5 GiB)
and the allocator's fragmentation.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .config import WEIGHT_COPIES

# Units by family: (name, bytes), largest first. The prefix alone is decimal (80G, 80GB: 80 x 10^9 bytes), with an
# `i` binary (80Gi, 80GiB: 80 x 2^30).
DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3), ("B", 1))
BINARY = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))
# What a block saves beyond its Linears' inputs and outputs (norms, activations, rotary, attention statistics), as a
# multiple of them: measured about 1.45 on an H200 (bf16, Qwen3-1.7B shapes, SFT without checkpointing,
# benchmarks/results/gpu.json) and 1.9 on a CPU (float32, tests/cosmos_train/test_estimate_memory.py); 1.7 keeps
# both within 20%, neither at the edge.
ACTIVATION_FACTOR = 1.7
TEXT_TOKENS = 256  # diffusion: text tokens assumed when the job does not set max_sequence_length
BYTES = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}


@dataclass(frozen=True)
class Size:
    """A memory size as `--device-memory` gave it: its bytes, and the unit it was written in (sizes are then said in
    that unit's family, the verdict in the unit itself)."""

    bytes: int
    unit: str  # a name of DECIMAL or BINARY

    @property
    def binary(self) -> bool:
        return self.unit in dict(BINARY) and self.unit != "B"

    def __str__(self) -> str:
        """'80 GB', '83.42 GB', '77.69 GiB': two decimals at most."""
        value = self.bytes / dict(BINARY if self.binary else DECIMAL)[self.unit]
        return f"{value:.2f}".rstrip("0").rstrip(".") + f" {self.unit}"


def format_size(size: int, binary: bool = False) -> str:
    """`size` bytes in the largest unit of its family that it fills: '83.4 GB', '512.0 MiB', '96 B'."""
    for unit, scale in BINARY if binary else DECIMAL:
        if abs(size) >= scale and scale > 1:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


@dataclass
class Estimate:
    """Bytes per device for one job on `processes` processes; `parts` in the order printed."""

    job: str
    kind: str
    backend: str
    processes: int
    lora: bool
    parameters: dict[str, int]  # trained, frozen (counts, whole model)
    parts: dict[str, int] = field(default_factory=dict)
    overlap: bool = True  # gradients and activations are not alive together (no gradient accumulation)
    notes: list[str] = field(default_factory=list)
    model: str = ""  # the [model] name_or_path estimated (--model-config's folder where given)

    @property
    def peak(self) -> int:
        rest = sum(v for k, v in self.parts.items() if k not in ("gradients", "activations"))
        grads, acts = self.parts.get("gradients", 0), self.parts.get("activations", 0)
        return rest + (max(grads, acts) if self.overlap else grads + acts)

    def as_dict(self, device_memory: Size | None = None) -> dict[str, Any]:
        out = {
            "job": self.job,
            "model": self.model,
            "kind": self.kind,
            "backend": self.backend,
            "processes": self.processes,
            "lora": self.lora,
            "parameters": self.parameters,
            "bytes_per_device": self.parts,
            "peak_bytes_per_device": self.peak,
            "notes": self.notes,
        }
        if device_memory is not None:
            out |= {
                "device_memory": device_memory.bytes,
                "device_memory_given": str(device_memory),
                "fits": self.peak <= device_memory.bytes,
            }
        return out

    def table(self, device_memory: Size | None = None) -> str:
        """The parts and the peak per device, each in the largest unit it fills of `device_memory`'s family (GB, MB,
        ... when none is given), and whether the peak fits in `device_memory`, said in its own unit."""
        binary = device_memory is not None and device_memory.binary
        tuning = "LoRA" if self.lora else "full fine-tuning"
        lines = [
            f"{self.job}: {self.kind}, {tuning}, {self.backend} on {self.processes} process(es)"
            + (f"; model {self.model}" if self.model else ""),
            f"parameters: {self.parameters['trained']:,} trained, {self.parameters['frozen']:,} frozen",
            "per device",
        ]
        lines += [f"  {name:<46}{format_size(size, binary):>10}" for name, size in self.parts.items()]
        how = "max(gradients, activations)" if self.overlap else "gradients + activations"
        lines.append(f"  {'peak: the rest + ' + how:<46}{format_size(self.peak, binary):>10}")
        if device_memory is not None:
            fits = self.peak <= device_memory.bytes
            peak = Size(self.peak, device_memory.unit)
            lines.append(f"{'fits' if fits else 'does NOT fit'} in {device_memory} per device (peak {peak})")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Counting a model built on the meta device


def count(module: torch.nn.Module, trained: bool) -> tuple[int, int]:
    """(parameters, bytes) of `module`'s parameters that do (`trained`) or do not require grad."""
    params = [p for p in module.parameters() if p.requires_grad == trained]
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the ModuleLists holding Linears, largest first by parameters."""
    lists = [
        m
        for m in module.modules()
        if isinstance(m, torch.nn.ModuleList) and any(isinstance(x, torch.nn.Linear) for x in m.modules())
    ]
    # Drop lists nested inside another (an attention's `to_out`, a block's sublists).
    nested = {id(inner) for outer in lists for inner in outer.modules() if inner is not outer}
    return [m for block_list in lists if id(block_list) not in nested for m in block_list]


def linear_width(module: torch.nn.Module) -> int:
    """sum(in_features + out_features) over the Linears in `module` (PEFT's LoRA layers count as their base)."""
    return sum(
        m.in_features + m.out_features
        for m in module.modules()
        if isinstance(m, torch.nn.Linear) and not _is_lora_factor(m)
    )


def _is_lora_factor(module: torch.nn.Module) -> bool:
    return getattr(module, "_is_lora_factor", False)


def activation_bytes(module: torch.nn.Module, tokens: int, compute_bytes: int, checkpointing: bool) -> int:
    """The estimate of the module docstring, for `tokens` tokens through every block of `module`."""
    found = blocks(module)
    if not found:
        return int(tokens * linear_width(module) * compute_bytes * ACTIVATION_FACTOR)
    widths = [linear_width(block) for block in found]
    if checkpointing:
        hidden = next(m.in_features for m in found[0].modules() if isinstance(m, torch.nn.Linear))
        per_token = len(found) * hidden + max(widths) * ACTIVATION_FACTOR
    else:
        per_token = sum(widths) * ACTIVATION_FACTOR
    return int(tokens * per_token * compute_bytes)


def _mark_lora_factors(module: torch.nn.Module) -> None:
    """Mark PEFT's lora_A / lora_B Linears: their activations (rank-wide) are left out."""
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.Linear) and re.search(r"\.lora_(A|B)\.", name + "."):
            m._is_lora_factor = True


# ---------------------------------------------------------------------------------------------------------
# Bytes of the training state


@dataclass
class TrainedModule:
    module: torch.nn.Module  # on the meta device, trained parameters requiring grad
    weight_dtype: torch.dtype  # of the trained module's frozen weights (and of trained ones under full FT)


def state_bytes(
    module: torch.nn.Module, backend: str, processes: int, mixed: bool
) -> tuple[dict[str, int], int, int]:
    """{trained weights, gradients, optimizer, frozen in module} per device, and the trained and frozen counts."""
    trained, trained_bytes = count(module, True)
    frozen, frozen_bytes = count(module, False)
    deepspeed = backend in ("zero2", "zero3")
    if deepspeed and mixed:  # the engine casts the module to 16 bits; fp32 master + moments
        trained_bytes, frozen_bytes = 2 * trained, 2 * frozen
        grads, optimizer = 2 * trained, 12 * trained
    elif backend == "fsdp" and mixed:  # accelerate upcasts to float32 for FSDP's mixed precision
        trained_bytes = 4 * trained
        grads, optimizer = 4 * trained, 8 * trained
    else:
        grads, optimizer = trained_bytes, 2 * trained_bytes
    shard_params = processes if backend in ("zero3", "fsdp") else 1
    shard_state = processes if backend != "ddp" else 1
    parts = {
        "trained weights": trained_bytes // shard_params,
        "gradients": grads // shard_state,
        "optimizer (AdamW)": optimizer // shard_state,
        "frozen: trained module": frozen_bytes // shard_params,
    }
    return parts, trained, frozen


# ---------------------------------------------------------------------------------------------------------
# Language models (sft, grpo)


def meta_language_model(job) -> tuple[torch.nn.Module, Any, bool]:
    """The job's model as `models.load_model` builds it, on the meta device, frozen and with its LoRA."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    from transformers_cosmos3 import Reasoner, reasoner_class

    from .models import freeze, lora_config

    section = job.config.model
    config = AutoConfig.from_pretrained(section.name_or_path, trust_remote_code=section.trust_remote_code)
    if section.dtype == "auto":
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    else:
        dtype = getattr(torch, section.dtype)
    remote = {"trust_remote_code": section.trust_remote_code}  # the Auto classes' argument, not a model's
    if config.model_type in set(Reasoner):
        build, is_vlm, remote = reasoner_class(config)._from_config, True, {}
    elif config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        build, is_vlm = AutoModelForImageTextToText.from_config, True
    else:
        build, is_vlm = AutoModelForCausalLM.from_config, False
    with torch.device("meta"):
        model = build(config, dtype=dtype, **remote)
    freeze(model, section.freeze)
    lora = getattr(job.config, "lora", None)
    if lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(lora, is_vlm))
    return model, config, is_vlm


def estimate_language(job, processes: int, backend: str) -> Estimate:
    args = job.settings
    model, config, _ = meta_language_model(job)
    _mark_lora_factors(model)
    mixed = mixed_precision(job)
    parts, trained, frozen = state_bytes(model, backend, processes, mixed)
    estimate = Estimate(
        job.source,
        job.kind.name,
        backend,
        processes,
        getattr(job.config, "lora", None) is not None,
        {"trained": trained, "frozen": frozen},
        parts=parts,
        overlap=args.gradient_accumulation_steps == 1,
        model=job.config.model.name_or_path,
    )
    total_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for copy in job.config.weight_copies():  # TRL's reference model: the whole model, sharded as it is
        estimate.parts[f"copies: {copy} model"] = total_bytes // (
            processes if backend in ("zero3", "fsdp") else 1
        )
    compute_bytes = 2 if mixed else BYTES.get(next(model.parameters()).dtype, 4)
    forward = job.config.activation_batch(args)
    batch, length = forward.rows, forward.tokens
    if forward.prompt_tokens:
        estimate.notes.append(f"{forward.prompt_tokens} prompt tokens assumed per completion")
    tokens = batch * length
    checkpointing = bool(args.gradient_checkpointing or getattr(args, "activation_checkpointing", False))
    text = getattr(config, "text_config", None) or config
    activations = activation_bytes(model, tokens, compute_bytes, checkpointing)
    activations += tokens * text.vocab_size * (compute_bytes + 8)
    if forward.generates:  # generation's KV cache, no-grad: whichever is larger
        kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_cache = batch * length * text.num_hidden_layers * 2 * kv_heads * head_dim * compute_bytes
        activations = max(activations, kv_cache)
    estimate.parts["activations"] = activations
    estimate.notes.append(
        f"activations: {batch} x {length} tokens, {compute_bytes}-byte compute, "
        f"gradient checkpointing {'on' if checkpointing else 'off'}"
    )
    return estimate


# ---------------------------------------------------------------------------------------------------------
# Diffusion pipelines (diffusion-sft, nft, flow-grpo, ddrl)


def meta_pipeline(section) -> dict[str, torch.nn.Module]:
    """The pipeline's torch modules by component name, built on the meta device from their configs (the frozen
    ones in `[model] dtype`, the transformer in float32, as `diffusion.loading.load_adapter` loads them)."""
    from transformers import AutoConfig, PreTrainedModel

    from .model_sources import model_file, pipeline_index

    where = "[model] name_or_path"
    _, index = pipeline_index(section.name_or_path, where)
    dtype = getattr(torch, section.dtype)
    modules = {}
    for name, spec in index.items():
        if name.startswith("_") or not isinstance(spec, list) or len(spec) != 2 or None in spec:
            continue
        library, class_name = spec
        try:
            cls = getattr(importlib.import_module(library), class_name)
        except (ImportError, AttributeError):
            continue
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            continue
        folder = model_file(section.name_or_path, f"{name}/config.json", where, "a diffusers pipeline").parent
        with torch.device("meta"):
            if issubclass(cls, PreTrainedModel):
                config = AutoConfig.from_pretrained(folder, trust_remote_code=section.trust_remote_code)
                module = cls._from_config(config)
            else:
                module = cls.from_config(cls.load_config(folder))
        # torch's own `to`: diffusers' warns about modules it keeps in float32 (a loading concern, not a count).
        modules[name] = torch.nn.Module.to(module, torch.float32 if name == "transformer" else dtype)
    return modules


def _config(module) -> dict:
    config = getattr(module, "config", {})
    return dict(config) if not hasattr(config, "to_dict") else config.to_dict()


def latent_tokens(modules: dict, height: int, width: int, frames: int | None) -> int:
    """Tokens of one sample in the transformer: the latent grid over the VAE's compression and the patch size."""
    vae = _config(modules.get("vae"))
    spatial = vae.get("spatial_compression_ratio") or vae.get("scale_factor_spatial")
    if not spatial:
        down = vae.get("block_out_channels") or vae.get("dim_mult") or ()
        spatial = 2 ** (len(down) - 1) if down else 8
    temporal = vae.get("temporal_compression_ratio") or vae.get("scale_factor_temporal") or 4
    patch = _config(modules["transformer"]).get("patch_size") or 1
    patch_t, patch_h, patch_w = (1, patch, patch) if isinstance(patch, int) else tuple(patch)[-3:]
    latent_frames = 1 if not frames else (frames - 1) // temporal + 1
    return max(1, latent_frames // patch_t) * (height // spatial // patch_h) * (width // spatial // patch_w)


def estimate_diffusion(job, processes: int, backend: str) -> Estimate:
    from .diffusion.loading import pipeline_adapter_class

    config, args = job.config, job.settings
    adapter_class = pipeline_adapter_class(config.model)
    modules = meta_pipeline(config.model)
    transformer = modules["transformer"]
    lora = getattr(config, "lora", None)
    if lora is not None:
        from peft import LoraConfig, inject_adapter_in_model

        transformer.requires_grad_(False)
        targets = (
            list(adapter_class.lora_target_modules) if lora.target_modules is None else lora.target_modules
        )
        inject_adapter_in_model(
            LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=targets), transformer
        )
        _mark_lora_factors(transformer)
    else:  # the family's own rule (Cosmos3: the generator only)
        adapter_class.prepare_full_finetuning(SimpleNamespace(transformer=transformer))
    if (pattern := config.fully_trained_parameters()) is not None:  # e.g. action heads beside a LoRA
        for name, parameter in transformer.named_parameters():
            if re.search(pattern, name):
                parameter.requires_grad_(True)
    mixed = mixed_precision(job)
    parts, trained, frozen = state_bytes(transformer, backend, processes, mixed)
    # The copies hold the trained parameters in float32: whole on every process, or ZeRO-3's partitions.
    copy_bytes = 4 * trained // (processes if backend == "zero3" else 1)
    others = {name: module for name, module in modules.items() if name != "transformer"}
    estimate = Estimate(
        job.source,
        job.kind.name,
        backend,
        processes,
        lora is not None,
        {
            "trained": trained,
            "frozen": frozen + sum(count(m, False)[0] + count(m, True)[0] for m in others.values()),
        },
        parts=parts,
        overlap=args.gradient_accumulation_steps == 1,
        model=config.model.name_or_path,
    )
    for copy in config.weight_copies():
        estimate.parts[f"copies: {WEIGHT_COPIES.get(copy, copy)}"] = copy_bytes
    for name, module in others.items():
        estimate.parts[f"frozen: {name}"] = sum(p.numel() * p.element_size() for p in module.parameters())
    # One training forward's samples and size.
    configs = {name: _config(module) for name, module in modules.items()}
    forward = config.activation_batch(args, adapter_class, adapter_class.configured_size(configs))
    samples, (height, width, frames) = forward.rows, forward.size
    text = forward.text_tokens or TEXT_TOKENS
    tokens = samples * (latent_tokens(modules, height, width, frames) + text)
    compute_bytes = 2 if mixed else 4
    checkpointing = bool(
        config.train.gradient_checkpointing
    )  # the trainer's own switch (not TrainingArguments')
    estimate.parts["activations"] = activation_bytes(transformer, tokens, compute_bytes, checkpointing)
    estimate.notes.append(
        f"activations: {samples} sample(s) of {height} x {width}{f' x {frames} frames' if frames else ''} "
        f"+ {text} text tokens = {tokens} tokens, {compute_bytes}-byte compute, "
        f"gradient checkpointing {'on' if checkpointing else 'off'}"
    )
    return estimate


# ---------------------------------------------------------------------------------------------------------


def read_job(path, overrides: list[str] | None = None, model_config: str | Path | None = None):
    """The job and its `[launch] backend`. Reading sets nothing process-wide, and the estimate reads the trainer
    config without its backend's settings (`Job.settings`), so a ZeRO or FSDP job is estimated on any machine. Its
    data are not checked (memory does not depend on them). `model_config`: a folder of the model's configuration
    (no weights) that replaces `[model] name_or_path`, relative to the working directory."""
    from .config import ConfigError
    from .jobs import read_job as read

    overrides = list(overrides or [])
    if model_config is not None:
        folder = Path(model_config).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"--model-config {model_config}: no such folder")
        # A TOML string (JSON's escapes are TOML's), absolute: the job file's folder is not where it is.
        overrides.append(f"model.name_or_path={json.dumps(str(folder.resolve()))}")
    job = read(path, overrides, runnable_here=False, check_data_files=False)
    return job, job.config.launch.backend


def mixed_precision(job) -> bool:
    """bf16/fp16 as on a GPU: the job's `[train]` value when it sets one, else the kind's default there (TRL's
    configs: bf16; transformers' `TrainingArguments`, the diffusion kinds: off). On a machine without GPUs the
    job reads with bf16 off, which is not what a GPU run gets."""
    given = job.config.train.model_dump(exclude_unset=True)
    if "bf16" in given or "fp16" in given:
        return bool(given.get("bf16") or given.get("fp16"))
    return job.kind.family == "language"


def estimate(job, processes: int = 1, backend: str | None = None) -> Estimate:
    """The estimate for a read job (`read_job`) on `processes` processes (devices) under `backend` (default: the
    job's)."""
    if processes < 1:
        raise ValueError(f"--processes must be at least 1, got {processes}")
    backend = backend or job.config.launch.backend
    if job.kind.family == "diffusion":
        return estimate_diffusion(job, processes, backend)
    return estimate_language(job, processes, backend)


def parse_size(text: str) -> Size:
    """'80GB' / '80G' (80 x 10^9 bytes, as GPUs are sold), '80GiB' / '80Gi' (80 x 2^30), '85899345920' (bytes)."""
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?:([KMGT])(I?)B?|B?)\s*", text, re.IGNORECASE)
    if not found:
        raise ValueError(f"cannot read a memory size from {text!r} (e.g. 80GB, or 80GiB)")
    number, prefix, binary = found.group(1), (found.group(2) or "").upper(), bool(found.group(3))
    if not prefix:
        return Size(int(float(number)), "B")
    unit = f"{prefix}iB" if binary else f"{'k' if prefix == 'K' else prefix}B"
    return Size(int(float(number) * dict(BINARY if binary else DECIMAL)[unit]), unit)


def to_json(estimates: list[Estimate], device_memory: Size | None) -> str:
    return json.dumps([e.as_dict(device_memory) for e in estimates], indent=1)
