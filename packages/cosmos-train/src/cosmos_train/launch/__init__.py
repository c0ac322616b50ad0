"""Shipped distributed-backend configs, selected by `[launch] backend`.

The trainer hands them to TrainingArguments (`deepspeed=` for ZeRO, `fsdp=`/`fsdp_config=` for
FSDP), so the same job runs under `cosmos-train sft`, `accelerate launch` or `torchrun`, on one
machine or many. `accelerate.yaml` is a starting point for `accelerate launch --config_file`.
"""

from pathlib import Path
from typing import Any

LAUNCH_DIR = Path(__file__).parent
ACCELERATE_CONFIG = LAUNCH_DIR / "accelerate.yaml"


def training_arguments(backend: str) -> dict[str, Any]:
    """TrainingArguments fields that select the backend ({} for plain DDP)."""
    if backend in ("zero2", "zero3"):
        return {"deepspeed": str(LAUNCH_DIR / f"{backend}.json")}
    if backend == "fsdp":
        return {"fsdp": "full_shard auto_wrap", "fsdp_config": str(LAUNCH_DIR / "fsdp.json")}
    return {}
