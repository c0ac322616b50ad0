"""A quick or partial benchmark run never overwrites the published figures (`benchmarks/results/*.json`, tracked):
without `--out` it writes under `benchmarks/results/partial/` (not tracked); a relative `--out` is absolute."""

from __future__ import annotations

import pytest
from benchmark_helpers import BENCHMARKS, load_benchmark

RESULTS = BENCHMARKS / "results"


@pytest.mark.parametrize("name", ["grpo_math", "geneval_mini", "cosmos3_policy"])
def test_quick_and_one_seed_runs_write_apart_from_the_published_results(name, tmp_path, monkeypatch):
    options = load_benchmark(name).options
    assert options([]).out == RESULTS / f"{name}.json"  # the published design: three seeds
    assert options(["--quick"]).out == RESULTS / "partial" / f"{name}.json"
    assert options(["--seeds", "1"]).out == RESULTS / "partial" / f"{name}.json"
    assert options(["--quick", "--out", str(tmp_path / "x.json")]).out == tmp_path / "x.json"
    # A relative --out is made absolute: the jobs it writes name paths under it, read from their own folder.
    monkeypatch.chdir(tmp_path)
    assert options(["--quick", "--out", "x.json"]).out == tmp_path / "x.json"


def test_the_partial_results_are_not_tracked():
    ignored = (BENCHMARKS.parent / ".gitignore").read_text().splitlines()
    assert "benchmarks/results/partial/" in ignored
