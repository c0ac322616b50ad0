"""`cosmos-train estimate-memory` against what training really takes, on a CPU.

What is measured: each job trains 2 optimizer steps in a child process of its own (plain SFT, full fine-tuning,
float32, no gradient checkpointing). The child imports every library the run needs (torch, transformers, TRL,
datasets, the trainer), reads the job, and takes its resident set size (RSS) as the baseline; it then runs the
job and reports its peak RSS (`ru_maxrss`) minus that baseline: the model's weights, its gradients, AdamW's state
and the activations, plus the little the run allocates besides (the tokenised data, Python objects). That is
what the estimate's peak claims for one device; it must agree within 20%.

Two sizes, each dominated by a different part: a small model on many tokens (activations), and a larger model
on few tokens (weights, gradients and optimizer state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, os, resource, sys
import torch, transformers, trl, datasets  # noqa: F401  (imported before the baseline)
from cosmos_train.jobs import read_job
import cosmos_train.algorithms.sft.trainer  # noqa: F401

def rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

job = read_job(sys.argv[1])
baseline = rss()
job.run()
print("MEASURED", json.dumps({"baseline": baseline, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

SIZES = {
    # name: (model sizes, per-device batch, tokens per row)
    "activations": (
        {"hidden": 256, "head_dim": 64, "heads": 4, "kv_heads": 2, "layers": 4, "intermediate": 768},
        8,
        512,
    ),
    "weights": (
        {"hidden": 1024, "head_dim": 64, "heads": 16, "kv_heads": 8, "layers": 8, "intermediate": 3072},
        2,
        64,
    ),
}


def make_job(folder: Path, sizes: dict, batch: int, tokens: int) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from transformers_cosmos3.testing import Sizes, build_tokenizer, text_config

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**text_config(tokenizer, Sizes(**sizes))))
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    # Every conversation longer than max_length, so every row is cut to it (the estimate's assumption).
    with open(folder / "chats.jsonl", "w") as handle:
        for index in range(batch * 2):
            messages = [
                {"role": "user", "content": f"question {index} " + "ab " * tokens},
                {"role": "assistant", "content": "cd " * tokens},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    job = folder / "job.toml"
    job.write_text(
        f"""kind = "sft"
[model]
name_or_path = "{folder / "model"}"
dtype = "float32"
[data]
format = "jsonl"
path = "{folder / "chats.jsonl"}"
max_length = {tokens}
train_on = "all"
[train]
output_dir = "{folder / "run"}"
max_steps = 2
per_device_train_batch_size = {batch}
activation_checkpointing = false
bf16 = false
save_strategy = "no"
report_to = "none"
disable_tqdm = true
dataloader_num_workers = 0
"""
    )
    return job


@pytest.mark.parametrize("size", list(SIZES))
def test_estimate_within_20_percent_of_the_measured_peak(tmp_path, size):
    from cosmos_train import memory

    job_file = make_job(tmp_path, *SIZES[size])
    job, backend = memory.read_job(job_file)
    estimate = memory.estimate(job, 1, backend)
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(job_file)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("MEASURED"))
    values = json.loads(line.split(" ", 1)[1])
    measured = values["peak"] - values["baseline"]
    ratio = estimate.peak / measured
    print(
        f"{size}: estimated {estimate.peak / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB, ratio {ratio:.2f}"
    )
    print(estimate.table())
    assert 0.8 <= ratio <= 1.2, f"{size}: estimate {estimate.peak} vs measured {measured} ({ratio:.2f})"


def test_cli_help_and_a_missing_file(tmp_path):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["estimate-memory", "--help"])
    assert shown.exit_code == 0 and "--processes" in shown.output and "--device-memory" in shown.output
    missing = tmp_path / "nope.toml"
    failed = runner.invoke(app, ["estimate-memory", str(missing)])
    assert failed.exit_code == 2
    assert str(missing) in failed.output and "no such config file" in failed.output
