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


def test_a_geneval_mini_run_on_some_tasks_writes_apart_and_names_unknown_tasks(tmp_path):
    benchmark = load_benchmark("geneval_mini")
    assert benchmark.options(["--tasks", "counting"]).out == RESULTS / "partial" / "geneval_mini.json"
    assert (
        benchmark.options(["--tasks", ",".join(reversed(benchmark.TASKS))]).out
        == RESULTS / "geneval_mini.json"
    )
    with pytest.raises(SystemExit, match=r"--tasks: knitting; GenEval's tasks are single_object"):
        benchmark.write_training_data(benchmark.SHIPPED, tmp_path, None, 0, ("counting", "knitting"))


def test_the_partial_results_are_not_tracked():
    ignored = (BENCHMARKS.parent / ".gitignore").read_text().splitlines()
    assert "benchmarks/results/partial/" in ignored
