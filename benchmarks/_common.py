"""Small helpers shared by the benchmarks: timing and writing results."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = Path(__file__).parent / "results"


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def median(values: list[float]) -> float:
    return statistics.median(values)


def write_results(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "benchmark": name,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        **data,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def default_out(name: str, published: bool) -> Path:
    """Where a benchmark writes when `--out` is not given: the tracked `results/<name>.json` for a run of the
    published design (every seed), `results/partial/<name>.json` (not tracked) for a quick or partial run, so it
    never overwrites the published figures."""
    return (RESULTS if published else RESULTS / "partial") / f"{name}.json"


def write_payload(out: Path, payload: dict) -> Path:
    """`payload` as JSON at `out`: through `write_results` (with the machine) when `out` is under `RESULTS`."""
    if out.parent == RESULTS:
        return write_results(out.stem, payload)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")
    return out


def first_reaching(curve: list[dict], target: float, key: str, score: str) -> float | None:
    """`key` of the first point of `curve` whose `score` is at least `target`, or None."""
    return next((point[key] for point in curve if point[score] >= target), None)


def plot_curves(
    path: Path,
    curves: dict[str, list[list[dict]]],
    colors: dict[str, str],
    axes_keys: tuple[tuple[str, str], ...],
    score: tuple[str, str],
    base: float,
    target: float,
) -> None:
    """One panel per (key, label) of `axes_keys`: every run's `score` against that key, one colour per name
    (seeds share it), with the base's score and the target as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    score_key, score_label = score
    figure, axes = pyplot.subplots(1, len(axes_keys), figsize=(5.5 * len(axes_keys), 4), dpi=100)
    for name, runs in curves.items():
        for index, curve in enumerate(runs):
            for axis, (key, _) in zip(axes, axes_keys, strict=True):
                axis.plot(
                    [p[key] for p in curve],
                    [p[score_key] for p in curve],
                    "o-",
                    ms=3,
                    alpha=0.8,
                    color=colors[name],
                    label=name if index == 0 else None,
                )
    for axis, (_, label) in zip(axes, axes_keys, strict=True):
        axis.axhline(base, color="grey", ls=":", label="base")
        axis.axhline(target, color="black", ls="--", lw=0.8, label="target")
        axis.set_xlabel(label)
        axis.set_ylabel(score_label)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def run_job(kind: str, job: Path, label: str, threads: int | None = None) -> list[dict]:
    """Train `job` with the real CLI (`cosmos-train <kind>`) in a child process, its output in `train.log` beside
    the job; the log history of the checkpoint it saves once, at its end. A failure exits naming `label`. The child
    has `benchmarks/` on its PYTHONPATH, so a job names the toy domains' rewards by import path
    (`"domains.geneval_mini.evaluator:geneval_mini"`); with `threads`, that many CPU threads (runs side by side)."""
    import os
    import subprocess
    import sys

    log = job.parent / "train.log"
    python_path = os.pathsep.join([str(BENCHMARKS), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": python_path}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    with log.open("w") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "cosmos_train", kind, "-c", str(job)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )
    if done.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{label} failed (exit {done.returncode}); {log}:\n{tail}")
    return json.loads(next(job.parent.glob("checkpoint-*/trainer_state.json")).read_text())["log_history"]
