"""GenEval-mini's shipped base model and the benchmark's recipe: the base is the one the figures were measured on
(its SHA-256 sums), and an NFT run of `benchmarks/geneval_mini.py`'s recipe from it logs GenEval's per-task
held-out scores, starting from the base's measured score.

Not asserted: that NFT raises the held-out score. It rises only after a hundred or more rollouts of 64 samples
(docs/geneval-mini.md, "Results"), minutes beyond what this suite can spend, and a gain after the two rollouts
run here would be noise."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
from benchmark_helpers import load_benchmark

from cosmos_train.geneval_mini import TASKS
from cosmos_train.geneval_mini.base import check_base, load_vocabulary
from cosmos_train.jobs import read_job

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "benchmarks" / "geneval_mini" / "base"
ROLLOUTS = 2
# The base's held-out GenEval-mini overall (mean of the task means; 34 prompts x 8 samples, 20 steps, no CFG,
# seeds 1000 + i), as `benchmarks/geneval_mini.py` measured it at step 0 of every run.
BASE_HELD_OUT = 0.184


def test_the_shipped_base_is_the_one_the_figures_were_measured_on(tmp_path):
    check_base(SHIPPED)
    copy = shutil.copytree(SHIPPED, tmp_path / "base")
    weights = copy / "transformer" / "diffusion_pytorch_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"diffusion_pytorch_model\.safetensors: SHA-256 differs"):
        check_base(copy)


def held_out(history: list[dict]) -> list[float]:
    """GenEval's overall (mean of the task means) at each evaluation."""
    return [
        statistics.fmean(entry[f"eval/reward/{t}"] for t in TASKS if f"eval/reward/{t}" in entry)
        for entry in history
        if "eval/reward" in entry
    ]


def test_the_benchmark_recipe_scores_each_task_from_the_base(tmp_path):
    benchmark = load_benchmark("geneval_mini")
    vocabulary = load_vocabulary(SHIPPED)
    benchmark.write_training_data(SHIPPED, tmp_path, vocabulary, seed=0)
    job = benchmark.job(
        "nft", SHIPPED, tmp_path, vocabulary, seed=0, rollouts=ROLLOUTS, lr=benchmark.LEARNING_RATE
    )
    path = tmp_path / "nft.toml"
    path.write_text(job)
    trainer = read_job(path).run()
    evaluations = [entry for entry in trainer.state.log_history if "eval/reward" in entry]
    updates = benchmark.UPDATES_PER_ROLLOUT
    assert [entry["step"] for entry in evaluations] == [0, ROLLOUTS * updates]
    assert all(f"eval/reward/{task}" in evaluations[0] for task in TASKS)
    assert all(0.0 <= entry["eval/well_formed_shapes"] <= 1.0 for entry in evaluations)
    scores = held_out(trainer.state.log_history)
    assert abs(scores[0] - BASE_HELD_OUT) <= 0.02, scores
