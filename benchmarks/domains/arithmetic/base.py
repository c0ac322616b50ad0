"""The arithmetic base model: a tiny Qwen3 (transformers' real classes, a byte-level tokenizer built offline)
that our own `cosmos-train sft` teaches the answer format and part of the skill.

    build_base("grpo-math-base", seed=0)     # about 4 minutes on 2 CPU cores
    check_base("grpo-math-base")              # the SHA-256 of every file, as written

Its demonstrations come from a flawed teacher (`domain.flawed_teacher`): every train problem, answered in the
right format, but with every carry forgotten in 60% of the answers. The student learns the format, addition
without carries and, on problems with carries, both answers, mostly the wrong one: greedy, it gets about a third
of the held-out problems right. GRPO trains on the same prompts with only the `exact_match` reward to learn from,
and learns to carry: what a verifiable reward gives that imitating imperfect demonstrations cannot.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..checksums import check_sums, write_sums
from .domain import Problems, flawed_teacher, split_problems, write_conversations

# Wide enough to learn two-digit arithmetic from a few thousand examples, small enough for a CPU GRPO run.
MODEL_SIZES = {"hidden": 128, "head_dim": 32, "heads": 4, "kv_heads": 2, "layers": 4, "intermediate": 384}


def sft_job(seed: int, steps: int, learning_rate: float) -> str:
    """The `cosmos-train sft` job that teaches the base (paths relative to the job file). The base ships it
    (`sft.toml`, in its `SHA256SUMS`), so its text stays as the shipped base was built with, its first line's
    old module path included: a rebuild stays bit-equal."""
    return f"""\
# Teaches the arithmetic base model (written by cosmos_train.arithmetic.base.build_base).
kind = "sft"

[model]
name_or_path = "untrained"

[data]
format = "jsonl"
path = "sft.jsonl"
max_length = 64

[train]
output_dir = "sft"
learning_rate = {learning_rate}
lr_scheduler_type = "cosine"
warmup_steps = {max(1, steps // 25)}
max_steps = {steps}
per_device_train_batch_size = 64
logging_steps = {max(1, steps // 20)}
save_steps = {steps}
save_total_limit = 1
report_to = "none"
seed = {seed}
"""


def build_base(
    output: str | Path,
    problems: Problems | None = None,
    seed: int = 0,
    sft_problems: int | None = None,
    slip: float = 0.6,
    sft_steps: int = 800,
    learning_rate: float = 3e-3,
    work: str | Path | None = None,
    log=print,
) -> Path:
    """Build the base model into `output` (with `data/{train,test}.jsonl`, the right answers, `sft.toml`,
    `problems.json`, `build.json` and `SHA256SUMS`). SFT sees the first `sft_problems` train problems (all by
    default), a share `slip` of them answered without carries. `work` keeps the untrained model and the SFT run (default: `output` + `.work`)."""
    from cosmos_train.tiny_models import save_tiny_text_lm
    from transformers_cosmos3.testing import Sizes

    problems = problems or Problems()
    output, started = Path(output), time.perf_counter()
    work = Path(work) if work else output.with_name(output.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    train, test = split_problems(problems, seed)
    write_conversations(work / "data" / "train.jsonl", train)
    write_conversations(work / "data" / "test.jsonl", test)
    write_conversations(work / "sft.jsonl", flawed_teacher(train[:sft_problems], slip, seed))
    save_tiny_text_lm(work / "untrained", seed=seed, sizes=Sizes(**MODEL_SIZES))
    (work / "sft.toml").write_text(sft_job(seed, sft_steps, learning_rate))
    log(
        f"cosmos-train sft -c {work / 'sft.toml'}  (a teacher who forgets carries in {slip:.0%} of its answers)"
    )
    subprocess.run([sys.executable, "-m", "cosmos_train", "sft", "-c", str(work / "sft.toml")], check=True)
    if output.exists():
        shutil.rmtree(output)
    # The weights, config and tokenizer; not TRL's model card, the run's absolute-path job copy or its pickles.
    skipped = shutil.ignore_patterns("checkpoint-*", "runs", "*.bin", "README.md", "cosmos_train_job.toml")
    shutil.copytree(work / "sft", output, ignore=skipped)
    shutil.copytree(work / "data", output / "data")
    shutil.copy(work / "sft.toml", output / "sft.toml")
    (output / "problems.json").write_text(json.dumps(problems.as_dict(), indent=1) + "\n")
    build = {
        "seed": seed,
        "sft_problems": sft_problems,
        "slip": slip,
        "sft_steps": sft_steps,
        "learning_rate": learning_rate,
    }
    build["seconds"] = round(time.perf_counter() - started, 1)
    (output / "build.json").write_text(json.dumps(build, indent=1) + "\n")
    write_sums(output)
    log(f"base model in {output} ({build['seconds']:.0f} s)")
    return output


def load_problems(folder: str | Path) -> Problems:
    """The problems a base model was built for (its `problems.json`)."""
    data = json.loads((Path(folder) / "problems.json").read_text())
    return Problems(digits=data["digits"], operations=tuple(data["operations"]))


def check_base(folder: str | Path) -> None:
    """Raise ValueError naming the first file that differs from the folder's `SHA256SUMS`."""
    check_sums(folder, rebuild="benchmarks/grpo_math.py --rebuild-base")
