"""Shipped distributed-backend configs, selected by `[launch] backend`.

The trainer hands them to TrainingArguments (`deepspeed=` for ZeRO, `fsdp=`/`fsdp_config=` for
FSDP2), so the same job runs under `cosmos-train <kind>`, `accelerate launch` or `torchrun`, on one
machine or many. `accelerate.yaml` is a starting point for `accelerate launch --config_file`.

On a machine without GPUs, a multi-process job needs `use_cpu = true`: without it accelerate finds
no device and every process trains alone (DDP) or sizes its batch for one process (ZeRO), so it is
the default there. FSDP needs GPUs: accelerate only turns it on for device-backed runs, so on CPUs
it would silently be plain DDP; it is refused instead.
"""

import contextlib
import os
from collections.abc import Iterator
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


def device_defaults(backend: str) -> dict[str, Any]:
    """Defaults for this machine that `[train]` may still change."""
    import torch

    if torch.cuda.is_available():
        return {}
    # TRL defaults to bf16 mixed precision, which needs a GPU; without use_cpu, accelerate finds no
    # device and every launched process trains alone.
    return {"bf16": False, "use_cpu": True}


def check_runnable_here(backend: str, source: str) -> None:
    """Refuse a backend this machine cannot run (FSDP without GPUs) in one line."""
    import torch

    from ..errors import ConfigError

    if backend == "fsdp" and not torch.cuda.is_available():
        raise ConfigError(
            f"{source}: [launch] backend 'fsdp' needs GPUs (accelerate would run plain DDP on CPUs)"
        )


@contextlib.contextmanager
def process_group_for(backend: str) -> Iterator[None]:
    """DeepSpeed (ZeRO-2/3) trains in a process group, reads RANK / LOCAL_RANK / WORLD_SIZE as a launcher sets
    them, and looks for MPI (mpi4py) when they are missing. A job run as one plain process (`cosmos-train sft -c
    job.toml`) gets, for the block, what a one-process launch would give it: those variables and a one-process
    group on a free local port. Launched processes keep their launcher's."""
    import torch
    import torch.distributed as dist

    if backend not in ("zero2", "zero3") or "WORLD_SIZE" in os.environ or dist.is_initialized():
        yield
        return
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launched = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    saved = {name: os.environ.get(name) for name in launched}
    os.environ.update(launched)
    try:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=0, world_size=1)
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
