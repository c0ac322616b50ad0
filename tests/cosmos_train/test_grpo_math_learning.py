"""GRPO improves a model our own SFT taught, on problems with one right answer (`benchmarks/grpo_math.py`): from the
shipped SFT base (a flawed teacher's student, see `benchmarks/domains/arithmetic/base.py`), the benchmark's GRPO recipe
raises greedy exact-match on the held-out problems by more than three times its run-to-run spread.

The figures are the benchmark's (docs/grpo-math.md): the base answers BASE_ACCURACY of the 200 held-out problems,
and the held-out accuracy of every variant, at every evaluation, varied by at most SPREAD (standard
deviation) over three seeds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from benchmark_helpers import load_benchmark
from domains.arithmetic.base import check_base

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "benchmarks" / "grpo_math" / "base"
BASE_ACCURACY = 0.36  # greedy, 200 held-out problems: deterministic
QUICK_STEPS = 20
SPREAD = 0.053  # the largest std over seeds 0, 1, 2 at any evaluation of any variant (results/grpo_math.json)


def test_the_shipped_base_is_the_one_the_figures_were_measured_on(tmp_path):
    check_base(SHIPPED)
    copy = shutil.copytree(SHIPPED, tmp_path / "base")
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors: SHA-256 differs"):
        check_base(copy)


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_beyond_three_times_the_spread(tmp_path):
    benchmark = load_benchmark("grpo_math")
    run = benchmark.run(
        "grpo", SHIPPED, tmp_path, seed=0, steps=QUICK_STEPS, every=QUICK_STEPS, lr=benchmark.LEARNING_RATE
    )
    before, after = run["curve"][0], run["curve"][-1]
    assert (before["step"], after["step"]) == (0, QUICK_STEPS)
    assert before["accuracy"] == pytest.approx(BASE_ACCURACY, abs=1e-6)  # logged in float32
    assert after["accuracy"] - before["accuracy"] > 3 * SPREAD, run["curve"]
    assert after["generated_tokens"] > 0
