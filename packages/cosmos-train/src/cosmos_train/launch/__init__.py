"""Shipped distributed-backend configs, selected by `[launch] backend`.

The trainer hands them to TrainingArguments (`deepspeed=` for ZeRO, `fsdp=`/`fsdp_config=` for
FSDP2), so the same job runs under `cosmos-train <kind>`, `accelerate launch` or `torchrun`, on one
machine or many. `accelerate.yaml` is a starting point for `accelerate launch --config_file`.

On a machine without GPUs, a multi-process job needs `use_cpu = true`: without it accelerate finds
no device and every process trains alone (DDP) or sizes its batch for one process (ZeRO), so it is
the default there. FSDP needs GPUs: accelerate only turns it on for device-backed runs, so on CPUs
it would silently be plain DDP; it is refused instead.
"""

from pathlib import Path
from typing import Any

LAUNCH_DIR = Path(__file__).parent
ACCELERATE_CONFIG = LAUNCH_DIR / "accelerate.yaml"
BACKENDS = ("ddp", "zero2", "zero3", "fsdp")


def backend_arguments(backend: str) -> dict[str, Any]:
    """TrainingArguments fields that select the backend ({} for plain DDP)."""
    if backend in ("zero2", "zero3"):
        return {"deepspeed": str(LAUNCH_DIR / f"{backend}.json")}
    if backend == "fsdp":
        # `fsdp=True` with everything in fsdp.json (the string form of `fsdp` is deprecated).
        return {"fsdp": True, "fsdp_config": str(LAUNCH_DIR / "fsdp.json")}
    if backend != "ddp":
        raise ValueError(f"unknown launch backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    return {}


def device_defaults(backend: str, source: str) -> dict[str, Any]:
    """Defaults for this machine that `[train]` may still change; refuses FSDP without GPUs."""
    import torch

    from ..config import ConfigError

    if torch.cuda.is_available():
        return {}
    if backend == "fsdp":
        raise ConfigError(
            f"{source}: [launch] backend 'fsdp' needs GPUs (accelerate would run plain DDP on CPUs)"
        )
    # TRL defaults to bf16 mixed precision, which needs a GPU; without use_cpu, accelerate finds no
    # device and every launched process trains alone.
    return {"bf16": False, "use_cpu": True}
