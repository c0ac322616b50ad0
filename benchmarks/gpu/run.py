"""Our real trainers on a GPU, a few optimizer steps each at real model shapes with random weights: step time, peak
GPU memory and model FLOP utilisation (MFU), written as JSON.

    python benchmarks/gpu/run.py                       # every case, on CUDA; writes $OUT/gpu.json or
                                                       # benchmarks/results/gpu.json
    python benchmarks/gpu/run.py --cases sft_qwen3_1_7b,grpo_qwen3_1_7b_lora
    python benchmarks/gpu/run.py --tiny --device cpu   # the same code at toy sizes, on a CPU (gpu_tiny.json)

Without CUDA (and without `--device cpu`) it prints "no CUDA device: not run on a GPU" and exits 0. Nothing is
downloaded: every model is built here from a config written below, with random weights, saved with
`save_pretrained` to a temporary folder and loaded by a job file through `[model] name_or_path`, as a user's
checkpoint is; the job runs in-process with `cosmos_train.jobs.read_job(path).run(callbacks)`.

Each case runs in a child process of its own (this script with `--worker`), so an out-of-memory error or a
broken CUDA context in one case leaves the others alone and each case's peak memory is its own. The child
catches every error into its result (one line, and the traceback's tail); a child that dies or runs past the
time left is recorded from its log (`<output stem>_logs/<case>.log`). The JSON is rewritten after every case,
so a run cut short keeps the cases it finished. `--time-limit` (default 560 s, for a 10-minute device slot)
skips the cases that no longer have 45 s left; `--case-timeout` (300 s) stops a case that hangs.

Measured per case, on the Trainer's own steps (a `TrainerCallback`, the device synchronised at every step end):
- `step_s`: the median wall time of an optimizer step, the first (warm-up) step excluded; rollouts included;
- `peak_gib`: `torch.cuda.max_memory_allocated()` from the job's start (model load) to the last step;
- `params`: trained / total parameters of the trained model (for LoRA, the total includes the adapters);
- work: tokens (language models) or images and pixels (diffusion) per step, and the forward passes run;
- `tflops` and `mfu`: model FLOPs of the timed steps / their wall time, and that / the peak (`--peak-tflops`,
  790: an H200's bf16 dense peak as measured here; the spec sheet says 989). Model FLOPs count what the
  algorithm needs, not what the hardware ran: gradient-checkpointing recomputation is left out. How:
  * language models: 2 N per token of every no-grad forward (generation, old-policy log-probs) and 6 N per
    trained token (forward + backward), 4 N with LoRA (the frozen weights get no weight gradients); N = the
    model's parameters minus the input embedding. Tokens are counted at the input embedding (padding
    included, as it is computed); attention's own FLOPs are left out (~8% more at 2k tokens).
  * diffusion: F = the FLOPs of one transformer forward for one sample at the run's own shapes (measured by
    `torch.utils.flop_counter` after training, attention included), times the sample-forwards actually run
    (counted by a hook: rollout sampling, the old-policy and reference forwards, the trained forward), plus
    2 F per trained sample-forward for the backward (1 F with LoRA). The VAE and text encoders are left out.
- `phases`: seconds per step in the rollout (sampling / generation) and the reward, when the trainer has them;
- `precision`: how the first linear layer of the trained model ran (weights' dtype, autocast) with and
  without gradients, to show where bf16 autocast applies.

The final save after training (model, EMA, export) is skipped to spare device time and disk; `--save` keeps it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

# No network on the GPU machine: never wait on the hub.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_name, _value)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
NO_CUDA = "no CUDA device: not run on a GPU"
PEAK_TFLOPS = 790.0  # H200 bf16 dense, as measured here (spec: 989)
PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"  # 12 short prompts (under 48 bytes)
QUESTIONS = REPO / "examples" / "data" / "shapes" / "text.jsonl"  # 24 one-turn chats
MIN_CASE_S = 45  # a case is skipped when less time than this is left


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the job kind: nft, grpo, sft
    lora: bool
    summary: str


CASES = {
    case.name: case
    for case in (
        Case(
            "nft_sd3_5_medium", "nft", False, "DiffusionNFT, full fine-tuning, SD3.5-Medium MMDiT, 512 x 512"
        ),
        Case("nft_sd3_5_medium_lora", "nft", True, "DiffusionNFT, LoRA r32, SD3.5-Medium MMDiT, 512 x 512"),
        Case(
            "grpo_qwen3_1_7b_lora", "grpo", True, "GRPO, LoRA r16, Qwen3-1.7B shapes, transformers generation"
        ),
        Case("grpo_qwen3_1_7b", "grpo", False, "GRPO, full fine-tuning, Qwen3-1.7B shapes"),
        Case("sft_qwen3_1_7b", "sft", False, "SFT, full fine-tuning, Qwen3-1.7B shapes, 2k-token chats"),
        Case("sft_qwen3_1_7b_lora", "sft", True, "SFT, LoRA r16, Qwen3-1.7B shapes, 2k-token chats"),
    )
}


@dataclass(frozen=True)
class Workload:
    """What one optimizer step does; `REAL` on the GPU, `TINY` for `--tiny`."""

    # DiffusionNFT
    image_size: int
    prompts_per_step: int
    samples_per_prompt: int  # K
    sampling_steps: int
    train_batch_size: int  # samples per training forward
    t5_tokens: int  # [rollout] max_sequence_length
    nft_steps: int
    # GRPO
    grpo_batch: int  # completions per step
    generations: int  # per prompt
    completion: int  # tokens, forced (min_new_tokens)
    grpo_steps: int
    # SFT
    sft_batch: int
    sft_tokens: int  # per conversation, about
    sft_steps: int


REAL = Workload(512, 4, 4, 10, 8, 128, 3, 16, 8, 256, 3, 8, 2048, 5)
TINY = Workload(32, 2, 4, 10, 8, 48, 3, 8, 4, 16, 3, 4, 128, 5)

# Stable Diffusion 3.5 Medium: its transformer and VAE configs; text encoders of the real widths, 2 layers each.
SD3_5_MEDIUM = {
    "transformer": {
        "sample_size": 128,
        "patch_size": 2,
        "in_channels": 16,
        "out_channels": 16,
        "num_layers": 24,
        "attention_head_dim": 64,
        "num_attention_heads": 24,
        "joint_attention_dim": 4096,
        "caption_projection_dim": 1536,
        "pooled_projection_dim": 2048,
        "pos_embed_max_size": 384,
        "dual_attention_layers": tuple(range(13)),
        "qk_norm": "rms_norm",
    },
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 16,
        "block_out_channels": (128, 256, 512, 512),
        "layers_per_block": 2,
        "down_block_types": ("DownEncoderBlock2D",) * 4,
        "up_block_types": ("UpDecoderBlock2D",) * 4,
        "norm_num_groups": 32,
        "sample_size": 1024,
        "scaling_factor": 1.5305,
        "shift_factor": 0.0609,
        "use_quant_conv": False,
        "use_post_quant_conv": False,
    },
    "clip_widths": (768, 1280),  # CLIP-L, CLIP-G: pooled 768 + 1280 = 2048
    "t5": {"d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 2},
    "t5_max_length": 256,
}
SD3_TINY = {
    "transformer": {
        "sample_size": 16,
        "patch_size": 2,
        "in_channels": 16,
        "out_channels": 16,
        "num_layers": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 2,
        "joint_attention_dim": 64,
        "caption_projection_dim": 16,
        "pooled_projection_dim": 64,
        "pos_embed_max_size": 32,
        "dual_attention_layers": (0,),
        "qk_norm": "rms_norm",
    },
    "vae": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 16,
        "block_out_channels": (8, 16),
        "layers_per_block": 1,
        "down_block_types": ("DownEncoderBlock2D",) * 2,
        "up_block_types": ("UpDecoderBlock2D",) * 2,
        "norm_num_groups": 8,
        "sample_size": 32,
        "scaling_factor": 1.5305,
        "shift_factor": 0.0609,
        "use_quant_conv": False,
        "use_post_quant_conv": False,
    },
    "clip_widths": (32, 32),
    "t5": {"d_model": 64, "d_ff": 64, "d_kv": 16, "num_heads": 4, "num_layers": 2},
    "t5_max_length": 64,
}
# Qwen3-1.7B's text tower (its 151k vocabulary replaced by the tiny byte-level tokenizer's 264 rows).
QWEN3_1_7B = {"hidden": 2048, "head_dim": 128, "heads": 16, "kv_heads": 8, "layers": 28, "intermediate": 6144}
QWEN3_TINY = {"hidden": 64, "head_dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "intermediate": 128}


# ---------------------------------------------------------------------------------------------------------
# Models, data and job files


def parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _vocab(tokenizer) -> int:
    return (len(tokenizer) + 7) // 8 * 8


def build_sd3(folder: Path, spec: dict, device: str, seed: int = 0) -> dict[str, int]:
    """A random `StableDiffusion3Pipeline` of `spec`'s shapes (tokenizers: `tiny_pipelines`' offline byte-level
    ones), built on `device`, saved in bfloat16. Returns its components' parameter counts."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import T5Config, T5EncoderModel

    from cosmos_train.tiny_models.pipelines import byte_tokenizer, clip_text_encoder

    clip_tokenizers = (byte_tokenizer(77), byte_tokenizer(77))
    t5_tokenizer = byte_tokenizer(spec["t5_max_length"])
    torch.manual_seed(seed)
    with torch.device(device):
        clips = [
            clip_text_encoder(tokenizer, width=width, max_positions=77, seed=seed + index)
            for index, (tokenizer, width) in enumerate(
                zip(clip_tokenizers, spec["clip_widths"], strict=True), 1
            )
        ]
        torch.manual_seed(seed + 3)
        t5 = T5EncoderModel(
            T5Config(vocab_size=_vocab(t5_tokenizer), feed_forward_proj="gated-gelu", **spec["t5"])
        ).eval()
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(**spec["transformer"])  # its own init: random, well scaled
        vae = AutoencoderKL(**spec["vae"]).eval()
    pipeline = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),  # SD3.5's
        vae=vae,
        text_encoder=clips[0],
        tokenizer=clip_tokenizers[0],
        text_encoder_2=clips[1],
        tokenizer_2=clip_tokenizers[1],
        text_encoder_3=t5,
        tokenizer_3=t5_tokenizer,
    )
    pipeline.to(torch.bfloat16)
    pipeline.save_pretrained(folder)
    return {
        name: parameter_count(component)
        for name, component in pipeline.components.items()
        if isinstance(component, torch.nn.Module)
    }


def build_qwen3(folder: Path, sizes: dict, device: str, seed: int = 0) -> dict[str, int]:
    """A random Qwen3 causal LM of `sizes` with the tiny byte-level tokenizer (`transformers_cosmos3.testing`),
    built on `device` with transformers' own init, saved in bfloat16."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from transformers_cosmos3.testing import Sizes, build_tokenizer, text_config

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(Qwen3Config(**text_config(tokenizer, Sizes(**sizes))))
    model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"model": parameter_count(model)}


def write_chats(path: Path, rows: int, tokens: int, seed: int = 0) -> Path:
    """SFT conversations of about `tokens` byte-level tokens each (a question and a long answer)."""
    import random

    rng = random.Random(seed)
    words = [
        "red",
        "green",
        "blue",
        "cube",
        "sphere",
        "moves",
        "left",
        "right",
        "robot",
        "arm",
        "table",
        "the",
    ]

    def text(chars: int) -> str:
        out = []
        while sum(len(w) + 1 for w in out) < chars:
            out.append(rng.choice(words))
        return " ".join(out)

    with open(path, "w") as handle:
        for _ in range(rows):
            messages = [
                {"role": "user", "content": text(tokens * 2 // 5)},
                {"role": "assistant", "content": text(tokens // 2)},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return path


def to_toml(data: dict, prefix: str = "") -> str:
    """`data` as TOML: scalars first, then sub-tables (strings, numbers, booleans and tables only; no `tomli_w`,
    which the GPU machine may lack)."""

    def value(item) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, int | float):
            return repr(item)
        if isinstance(item, str):
            return json.dumps(item)  # JSON's escapes are TOML's
        raise TypeError(f"no TOML for {item!r}")

    lines = [f"{key} = {value(item)}" for key, item in data.items() if not isinstance(item, dict)]
    text = "\n".join(lines) + "\n" if lines else ""
    for key, table in data.items():
        if isinstance(table, dict):
            name = f"{prefix}{key}"
            text += f"\n[{name}]\n" + to_toml(table, f"{name}.")
    return text


def job_spec(case: Case, work: Workload, model: Path, folder: Path, device: str) -> dict:
    """The job file's contents for `case` (written as TOML)."""
    train = {
        "output_dir": str(folder / "run"),
        "logging_steps": 1,
        "save_strategy": "no",  # no checkpoint (the Trainer would save one at the last step)
        "report_to": "none",
        "seed": 0,
        "disable_tqdm": True,
    }
    # bf16 mixed precision on the GPU; on a CPU, plain float32 compute.
    train |= {"bf16": True} if device == "cuda" else {"bf16": False, "use_cpu": True}
    if case.kind == "nft":
        job = {
            "kind": "nft",
            "model": {"name_or_path": str(model), "dtype": "bfloat16"},  # the frozen parts
            "data": {"path": str(PROMPTS)},
            "rewards": {"brightness": 1.0},
            "rollout": {
                "samples_per_prompt": work.samples_per_prompt,
                "sampling_steps": work.sampling_steps,
                "train_batch_size": work.train_batch_size,
                "height": work.image_size,
                "width": work.image_size,
                "max_sequence_length": work.t5_tokens,
            },
            "train": train
            | {
                "max_steps": work.nft_steps,
                "per_device_train_batch_size": work.prompts_per_step,
                # Full fine-tuning keeps the weights, grads, Adam, EMA, old policy and KL reference in float32:
                # checkpointing as the SD3.5 example jobs do; LoRA has memory to spare.
                "gradient_checkpointing": not case.lora,
            },
        }
        if case.lora:
            job["lora"] = {}  # the RL defaults: r 32, alpha 64, both attention streams
        return job
    model_section = {"name_or_path": str(model), "dtype": "bfloat16"}
    lora = {"r": 16, "alpha": 32}
    if case.kind == "grpo":
        job = {
            "kind": "grpo",
            "model": model_section,
            "data": {"format": "jsonl", "path": str(QUESTIONS)},
            # Random text has a word or a few per 256 tokens: max_words 2 gives the rewards a spread.
            "rewards": {"length": {"weight": 1.0, "max_words": 2}},
            "train": train
            | {
                "max_steps": work.grpo_steps,
                "learning_rate": 1e-6,
                "per_device_train_batch_size": work.grpo_batch,
                "num_generations": work.generations,
                "max_completion_length": work.completion,
                "generation_kwargs": {"min_new_tokens": work.completion},  # every completion full length
                "beta": 0.0,
                "activation_checkpointing": False,  # TRL defaults to on; 141 GB is plenty
            },
        }
    else:
        chats = write_chats(folder / "chats.jsonl", work.sft_batch * work.sft_steps, work.sft_tokens)
        job = {
            "kind": "sft",
            "model": model_section,
            "data": {"format": "jsonl", "path": str(chats), "max_length": work.sft_tokens},
            "train": train
            | {
                "max_steps": work.sft_steps,
                "learning_rate": 1e-5,
                "per_device_train_batch_size": work.sft_batch,
                "activation_checkpointing": False,  # TRL defaults to on; 141 GB is plenty
            },
        }
    if case.lora:
        job["lora"] = lora
    return job


# ---------------------------------------------------------------------------------------------------------
# Measuring inside the job


def make_meter(case: Case, sync):
    """A `TrainerCallback` that times each optimizer step and counts, through hooks on the trained model, the
    work in it: sample-forwards (diffusion) or tokens (language models), with and without gradients."""
    import torch
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        def __init__(self):
            self.counts: dict[str, float] = {}
            self.steps: list[dict[str, float]] = []
            self.precision: dict[str, int] = {}
            self.sample: dict | None = None  # one row of the first transformer call's inputs (diffusion)
            self.hooks: list = []
            self.model = None
            self.ended = None

        def add(self, key: str, value: float) -> None:
            self.counts[key] = self.counts.get(key, 0.0) + value

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.model = model
            self.trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
            self.total = parameter_count(model)
            if case.kind == "nft":
                self.hooks.append(model.register_forward_pre_hook(self._transformer_call, with_kwargs=True))
            else:
                embedding = model.get_input_embeddings()
                self.embedding = embedding.weight.numel()
                self.hooks.append(embedding.register_forward_hook(self._tokens))
            linear = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
            if linear is not None:
                self.hooks.append(linear.register_forward_pre_hook(self._probe))
            sync()
            self.began = self.last = time.perf_counter()
            self.mark = dict(self.counts)

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            now = time.perf_counter()
            step = {"seconds": now - self.last}
            step |= {key: value - self.mark.get(key, 0.0) for key, value in self.counts.items()}
            self.steps.append(step)
            self.last, self.mark = now, dict(self.counts)

        def on_train_end(self, args, state, control, **kwargs):
            sync()
            self.ended = time.perf_counter()
            for hook in self.hooks:
                hook.remove()
            self.hooks.clear()

        def _transformer_call(self, module, args, kwargs):
            latents = kwargs.get("hidden_states", args[0] if args else None)
            rows = latents.shape[0]
            self.add("forward_rows", rows)
            if torch.is_grad_enabled():
                self.add("backward_rows", rows)
            if self.sample is None:
                self.sample = {
                    key: value[:1].detach().clone()
                    if torch.is_tensor(value) and value.dim() and value.shape[0] == rows
                    else value
                    for key, value in kwargs.items()
                }

        def _tokens(self, module, args, output):
            tokens = args[0].numel()
            self.add("train_tokens" if torch.is_grad_enabled() else "forward_tokens", tokens)

        def _probe(self, module, args):
            device = args[0].device.type
            autocast = (
                str(torch.get_autocast_dtype(device)).removeprefix("torch.")
                if torch.is_autocast_enabled(device)
                else "off"
            )
            mode = "grad" if torch.is_grad_enabled() else "no_grad"
            weights = str(module.weight.dtype).removeprefix("torch.")
            key = f"{mode}: weights {weights}, autocast {autocast}"
            self.precision[key] = self.precision.get(key, 0) + 1

    return Meter()


def time_methods(cls, names: dict[str, str], meter, sync) -> None:
    """Wrap `cls`'s methods {method: phase} to add their (synchronised) seconds to `meter`'s `<phase>_s`."""
    for method, phase in names.items():
        original = getattr(cls, method)

        @functools.wraps(original)
        def timed(self, *args, _original=original, _phase=phase, **kwargs):
            sync()
            start = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                sync()
                meter.add(f"{_phase}_s", time.perf_counter() - start)

        setattr(cls, method, timed)


def patch_run(case: Case, save: bool) -> None:
    """In this (worker) process, the job's final save is skipped unless `save`."""
    import importlib

    module = importlib.import_module(
        {
            "nft": "cosmos_train.algorithms.diffusion_rl.trainer",
            "grpo": "cosmos_train.algorithms.grpo.trainer",
            "sft": "cosmos_train.algorithms.sft.trainer",
        }[case.kind]
    )
    if not save:
        module.train_and_save = lambda trainer, job, processing_class=None: trainer.train()


def forward_flops(model, sample: dict, device: str) -> int:
    """FLOPs of one forward of `model` on `sample` (torch.utils.flop_counter: matmuls, convolutions, attention)."""
    import contextlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), autocast, counter:
        model(**sample)
    return counter.get_total_flops()


# ---------------------------------------------------------------------------------------------------------
# One case (in the worker process)


def environment() -> dict:
    import importlib

    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("transformers", "diffusers", "trl", "peft", "accelerate", "pydantic", "datasets"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except Exception as error:  # recorded, not fatal here: the case fails on it with its own error
            versions[name] = f"unavailable ({type(error).__name__})"
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        versions["gpu"] = f"{properties.name}, {properties.total_memory / 2**30:.0f} GiB"
    return versions


def run_case(case: Case, tiny: bool, device: str, save: bool, result: dict) -> None:
    """Build the model, write the job, run it, measure; fills `result` as it goes (kept when a later part fails)."""
    import gc

    import torch

    from cosmos_train.jobs import read_job

    cuda = device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    work = TINY if tiny else REAL
    result["environment"] = environment()
    with tempfile.TemporaryDirectory(prefix=f"gpu-bench-{case.name}-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        if case.kind == "nft":
            result["built_params"] = build_sd3(folder / "model", SD3_TINY if tiny else SD3_5_MEDIUM, device)
        else:
            result["built_params"] = build_qwen3(folder / "model", QWEN3_TINY if tiny else QWEN3_1_7B, device)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        result["build_s"] = round(time.perf_counter() - start, 2)

        spec = job_spec(case, work, folder / "model", folder, device)
        path = folder / "job.toml"
        path.write_text(to_toml(spec))
        result["job"] = path.read_text().replace(str(folder), "$TMP")
        start = time.perf_counter()
        job = read_job(path)
        patch_run(case, save)
        meter = make_meter(case, sync)
        if case.kind == "nft":
            time_methods(job.kind.trainer_class(), {"rollout": "rollout", "score": "reward"}, meter, sync)
        elif case.kind == "grpo":
            from cosmos_train.algorithms.grpo.trainer import CosmosGRPOTrainer

            phases = {"_generate_and_score_completions": "rollout", "_generate_single_turn": "generate"}
            time_methods(CosmosGRPOTrainer, phases, meter, sync)
        trainer = job.run(callbacks=[meter])  # noqa: F841  (kept alive until the FLOP count)
        sync()
        finished = time.perf_counter()
        if cuda:
            result["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)
        result["activation_checkpointing"] = bool(
            job.config.train.gradient_checkpointing
            if case.kind == "nft"
            else job.args.activation_checkpointing
        )
        result["bf16_autocast"] = bool(job.args.bf16)
        result["load_s"] = round(meter.began - start, 2)  # read the job, load the model, build the trainer
        result["train_s"] = round(meter.ended - meter.began, 2)
        result["after_train_s"] = round(finished - meter.ended, 2)  # the final save with --save
        summarize(case, work, meter, device, result)


def summarize(case: Case, work: Workload, meter, device: str, result: dict) -> None:
    """Per-step records, the median step, work, model FLOPs and MFU into `result`."""
    steps = meter.steps
    result["steps"] = len(steps)
    result["params"] = {"trained": meter.trained, "total": meter.total}
    result["precision"] = meter.precision
    if case.kind == "nft":
        size = work.image_size
        samples = work.prompts_per_step * work.samples_per_prompt
        result["work"] = {"images_per_step": samples, "pixels_per_step": samples * size * size}
        sample = meter.sample
        latents, text = sample["hidden_states"], sample["encoder_hidden_states"]
        patch = meter.model.config.patch_size
        tokens = (latents.shape[-2] // patch) * (latents.shape[-1] // patch) + text.shape[1]
        result["work"]["transformer_tokens_per_sample"] = tokens
        try:
            per_sample = forward_flops(meter.model, sample, device)
            how = "torch.utils.flop_counter, one sample-forward"
        except Exception as error:  # a cruder estimate: every token through every parameter
            per_sample = 2 * meter.total * tokens
            how = f"2 x params x tokens (flop counter failed: {type(error).__name__}: {error})"
        result["flops"] = {"per_sample_forward": per_sample, "how": how}
        backward = 1 if case.lora else 2  # input gradients; full fine-tuning adds the weight gradients
        for step in steps:
            step["flops"] = per_sample * (
                step.get("forward_rows", 0) + backward * step.get("backward_rows", 0)
            )
        result["params"]["pipeline_total"] = sum(result.get("built_params", {}).values())
    else:
        n = meter.total - meter.embedding
        train = 4 if case.lora else 6
        result["flops"] = {
            "forward_params": n,
            "how": f"2 N per no-grad token + {train} N per trained token, N = params - input embedding",
        }
        for step in steps:
            step["flops"] = 2 * n * step.get("forward_tokens", 0) + train * n * step.get("train_tokens", 0)
    result["per_step"] = [{key: round(value, 4) for key, value in step.items()} for step in steps]
    timed = steps[1:] or steps  # the first step warms up
    if not timed:
        return
    seconds = sum(step["seconds"] for step in timed)
    result["step_s"] = round(statistics.median(step["seconds"] for step in timed), 3)
    result["first_step_s"] = round(steps[0]["seconds"], 3)
    tflops = sum(step["flops"] for step in timed) / seconds / 1e12
    result["tflops"] = float(f"{tflops:.4g}")
    phases = {key for step in timed for key in step if key.endswith("_s")}
    result["phases"] = {
        key.removesuffix("_s"): round(statistics.median(step.get(key, 0.0) for step in timed), 3)
        for key in sorted(phases)
    }
    if case.kind != "nft":
        result["work"] = {
            key: round(statistics.median(step.get(key, 0.0) for step in timed))
            for key in ("train_tokens", "forward_tokens")
        }
        result["work"]["train_tokens_per_s"] = round(
            sum(step.get("train_tokens", 0.0) for step in timed) / seconds, 1
        )
    else:
        result["work"]["sample_forwards_per_step"] = round(
            statistics.median(step.get("forward_rows", 0.0) for step in timed)
        )
        result["work"]["trained_sample_forwards_per_step"] = round(
            statistics.median(step.get("backward_rows", 0.0) for step in timed)
        )
    result["mfu"] = round(tflops / result["peak_tflops"], 4) if device == "cuda" else None


def worker(args) -> int:
    case = CASES[args.worker]
    result = {"case": case.name, "summary": case.summary, "status": "error", "peak_tflops": args.peak_tflops}
    start = time.perf_counter()
    try:
        run_case(case, args.tiny, args.device, args.save, result)
        result["status"] = "ok"
    except Exception as error:
        message = str(error).strip().splitlines()
        result["error"] = f"{type(error).__name__}: {message[0] if message else ''}"[:500]
        result["traceback"] = traceback.format_exc().splitlines()[-25:]
        traceback.print_exc()
        try:
            import torch

            if args.device == "cuda" and torch.cuda.is_available():
                result["peak_gib_at_error"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        except Exception:
            pass
    result["wall_s"] = round(time.perf_counter() - start, 2)
    Path(args.result).write_text(json.dumps(result, indent=1, default=str))
    return 0


# ---------------------------------------------------------------------------------------------------------
# The driver


def run_worker(name: str, args, log: Path, timeout: float) -> dict:
    """Run one case in a child process (its output to `log`); its result, or what went wrong."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            name,
            "--result",
            str(result_path),
        ]
        command += ["--device", args.device, "--peak-tflops", str(args.peak_tflops)]
        command += ["--tiny"] * args.tiny + ["--save"] * args.save
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        start = time.perf_counter()
        with open(log, "w") as output:
            child = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                code = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the child and anything it started
                child.wait()
                code = None
            except KeyboardInterrupt:  # the child has its own session: Ctrl-C would not reach it
                os.killpg(child.pid, signal.SIGKILL)
                raise
        if result_path.is_file():
            return json.loads(result_path.read_text())
        tail = log.read_text(errors="replace").splitlines()[-25:]
        error = f"timed out after {timeout:.0f} s" if code is None else f"worker died (exit code {code})"
        return {
            "case": name,
            "summary": CASES[name].summary,
            "status": "error",
            "error": error,
            "traceback": tail,
            "wall_s": round(time.perf_counter() - start, 2),
        }


def human(count: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count:.0f}"


def print_table(cases: dict) -> None:
    header = ("case", "status", "steps", "step_s", "peak_GiB", "trained/total", "TFLOP/s", "MFU")
    rows = [header]
    for name, r in cases.items():
        params = r.get("params", {})
        rows.append(
            (
                name,
                r.get("status", "?"),
                str(r.get("steps", "-")),
                f"{r['step_s']:.3f}" if "step_s" in r else "-",
                f"{r['peak_gib']:.1f}" if "peak_gib" in r else "-",
                f"{human(params['trained'])}/{human(params['total'])}" if params else "-",
                f"{r['tflops']:.3g}" if "tflops" in r else "-",
                f"{r['mfu']:.1%}" if r.get("mfu") is not None else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    for name, r in cases.items():
        if r.get("status") != "ok":
            print(f"{name}: {r.get('error', r.get('status'))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help=f"comma-separated, from: {', '.join(CASES)} (default: all)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes, the same code (runs on a CPU)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--output", type=Path, help="default: $OUT/gpu.json, else benchmarks/results/gpu.json"
    )
    parser.add_argument("--time-limit", type=float, default=560.0, help="seconds for all cases (default 560)")
    parser.add_argument("--case-timeout", type=float, default=300.0, help="seconds per case (default 300)")
    parser.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS, help="bf16 dense peak for MFU")
    parser.add_argument("--save", action="store_true", help="keep the jobs' final save (model, EMA, export)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    if args.device == "cpu" and not args.tiny:
        parser.error("real shapes need a GPU: add --tiny to run on the CPU")
    names = (
        list(CASES) if not args.cases else [name.strip() for name in args.cases.split(",") if name.strip()]
    )
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; expected: {', '.join(CASES)}")
    stem = "gpu_tiny" if args.tiny else "gpu"
    output = args.output or (Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS) / f"{stem}.json"
    logs = output.parent / f"{output.stem}_logs"
    logs.mkdir(parents=True, exist_ok=True)

    report = {
        "benchmark": "gpu",
        "mode": "tiny" if args.tiny else "real",
        "device": args.device,
        "peak_tflops": args.peak_tflops,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "environment": None,
        "cases": {},
    }
    deadline = time.perf_counter() + args.time_limit
    sizes = "toy sizes (--tiny)" if args.tiny else "real shapes"
    print(f"{len(names)} case(s) on {args.device}, {sizes}, {args.time_limit:.0f} s at most", flush=True)
    for index, name in enumerate(names, 1):
        left = deadline - time.perf_counter()
        if left < MIN_CASE_S:
            report["cases"][name] = {
                "case": name,
                "status": "skipped",
                "error": "skipped: --time-limit reached",
            }
            print(f"[{index}/{len(names)}] {name}: skipped (time limit)", flush=True)
        else:
            print(f"[{index}/{len(names)}] {name}: {CASES[name].summary} ...", flush=True)
            result = run_worker(name, args, logs / f"{name}.log", min(left, args.case_timeout))
            report["environment"] = report["environment"] or result.pop("environment", None)
            result.pop("environment", None)
            report["cases"][name] = result
            line = f"  {result['status']} in {result.get('wall_s', 0):.0f} s"
            if result["status"] == "ok":
                line += f": step {result.get('step_s', float('nan')):.3f} s"
                if result.get("peak_gib") is not None:
                    line += f", peak {result['peak_gib']:.1f} GiB"
                if result.get("mfu") is not None:
                    line += f", MFU {result['mfu']:.1%}"
            else:
                line += f": {result.get('error')}\n    " + "\n    ".join(result.get("traceback", [])[-8:])
            print(line, flush=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print()
    print_table(report["cases"])
    print(f"wrote {output} (logs: {logs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
