"""Shipped distributed-backend configs, selected by `[launch] backend`.

The trainer hands them to TrainingArguments (`deepspeed=` for ZeRO, `fsdp=`/`fsdp_config=` for
FSDP2), so the same job runs under `cosmos-train sft`, `accelerate launch` or `torchrun`, on one
machine or many. `accelerate.yaml` is a starting point for `accelerate launch --config_file`.

On a machine without GPUs, a multi-process job needs `[train] use_cpu = true`: without it accelerate
finds no device and every process trains alone (DDP) or sizes its batch for one process (ZeRO). FSDP
needs GPUs: accelerate only turns it on for device-backed runs, so on CPUs it would be plain DDP.
"""

from pathlib import Path
from typing import Any

LAUNCH_DIR = Path(__file__).parent
ACCELERATE_CONFIG = LAUNCH_DIR / "accelerate.yaml"
BACKENDS = ("ddp", "zero2", "zero3", "fsdp")


def training_arguments(backend: str) -> dict[str, Any]:
    """TrainingArguments fields that select the backend ({} for plain DDP)."""
    if backend in ("zero2", "zero3"):
        return {"deepspeed": str(LAUNCH_DIR / f"{backend}.json")}
    if backend == "fsdp":
        # `fsdp=True` with everything in fsdp.json (the string form of `fsdp` is deprecated).
        return {"fsdp": True, "fsdp_config": str(LAUNCH_DIR / "fsdp.json")}
    if backend != "ddp":
        raise ValueError(f"unknown launch backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    return {}
