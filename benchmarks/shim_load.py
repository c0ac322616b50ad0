"""Load time and first-output time of the Cosmos3 shims against native upstream, same checkpoint.

    uv run python benchmarks/shim_load.py [--repeats 5] [--size tiny|small|medium] [--rss-rounds 3]

For transformers: `Cosmos3OmniForConditionalGeneration.from_pretrained` (native) against
`transformers_cosmos3.Cosmos3ForConditionalGeneration.from_pretrained` (shim) on the transformers
layout, plus the shim on the raw framework layout. For diffusers: `Cosmos3OmniPipeline.from_pretrained`
against `diffusers_cosmos3.load_pipeline` on the diffusers layout, plus the shim on the framework
layout. Runs alternate native/shim and report medians; the ratio goal is <= 1.05. Outputs are
asserted bit-equal.

Peak memory: each load runs in a fresh Python process that reports its peak resident set size
(`VmHWM`, imports included) after `from_pretrained`; native and shim processes alternate over
the rounds, and the median peak of each side and their ratio are reported (goal <= 1.10).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from _common import median, timed, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _reasoner_inputs(folder: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "user", "content": "Describe the scene in front of the robot."}]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )


def _aligned(module):
    """Fresh allocator-aligned weights: CPU GEMMs round by data alignment, which files leave arbitrary."""
    for parameter in module.parameters():
        parameter.data = parameter.data.clone()
    return module


def bench_transformers(layouts: dict[str, Path], repeats: int) -> dict:
    from transformers import Cosmos3OmniForConditionalGeneration

    from transformers_cosmos3 import Cosmos3ForConditionalGeneration

    inputs = _reasoner_inputs(layouts["transformers"])
    loaders = {
        "native": lambda: Cosmos3OmniForConditionalGeneration.from_pretrained(layouts["transformers"]),
        "shim": lambda: Cosmos3ForConditionalGeneration.from_pretrained(layouts["transformers"]),
        "shim_framework_layout": lambda: Cosmos3ForConditionalGeneration.from_pretrained(
            layouts["framework"]
        ),
    }
    times = {name: {"load": [], "first_output": []} for name in loaders}
    outputs = {}
    for round_ in range(repeats):
        for name, load in _rotated(loaders, round_):
            seconds, model = timed(load)
            times[name]["load"].append(seconds)
            with torch.no_grad():
                seconds, logits = timed(lambda model=model: model(**inputs).logits)
            times[name]["first_output"].append(seconds)
            outputs[name] = logits
    for name in loaders:
        assert torch.equal(outputs[name], outputs["native"]), f"{name} logits differ from native"
    return _summarize(times)


def bench_diffusers(layouts: dict[str, Path], repeats: int) -> dict:
    from diffusers import Cosmos3OmniPipeline

    import diffusers_cosmos3

    loaders = {
        "native": lambda: Cosmos3OmniPipeline.from_pretrained(layouts["diffusers"]),
        "shim": lambda: diffusers_cosmos3.load_pipeline(layouts["diffusers"]),
        "shim_framework_layout": lambda: diffusers_cosmos3.load_pipeline(layouts["framework"]),
    }

    def generate(pipeline):
        return pipeline(
            "a robot arm stacks cubes",
            num_frames=1,
            height=64,
            width=64,
            num_inference_steps=2,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).video

    times = {name: {"load": [], "first_output": []} for name in loaders}
    weights, images = {}, {}
    for round_ in range(repeats):
        for name, load in _rotated(loaders, round_):
            seconds, pipeline = timed(load)
            pipeline.set_progress_bar_config(disable=True)
            times[name]["load"].append(seconds)
            seconds, _ = timed(lambda pipeline=pipeline: generate(pipeline))
            times[name]["first_output"].append(seconds)
            weights[name] = pipeline.transformer.state_dict()
            _aligned(pipeline.transformer)
            images[name] = generate(pipeline)
    for name in loaders:
        assert all(torch.equal(weights[name][k], weights["native"][k]) for k in weights["native"]), name
        assert torch.equal(images[name], images["native"]), f"{name} image differs from native"
    return _summarize(times)


# One load in a fresh process: {name: python statement} run after the imports; prints peak RSS in MB.
RSS_LOADS = {
    "transformers": {
        "native": "Cosmos3OmniForConditionalGeneration.from_pretrained(folders['transformers'])",
        "shim": "Cosmos3ForConditionalGeneration.from_pretrained(folders['transformers'])",
        "shim_framework_layout": "Cosmos3ForConditionalGeneration.from_pretrained(folders['framework'])",
    },
    "diffusers": {
        "native": "Cosmos3OmniPipeline.from_pretrained(folders['diffusers'])",
        "shim": "diffusers_cosmos3.load_pipeline(folders['diffusers'])",
        "shim_framework_layout": "diffusers_cosmos3.load_pipeline(folders['framework'])",
    },
}
RSS_SCRIPT = """
import json, sys
from pathlib import Path
from diffusers import Cosmos3OmniPipeline
from transformers import Cosmos3OmniForConditionalGeneration
import diffusers_cosmos3
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
folders = {{k: Path(v) for k, v in json.loads(sys.argv[1]).items()}}
model = {load}
# VmHWM: this process's own peak. (ru_maxrss would report the forking benchmark's, carried over exec.)
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
print(int(status["VmHWM"].split()[0]) / 1024)
"""


def bench_peak_rss(layouts: dict[str, Path], rounds: int) -> dict:
    """Median peak RSS (MB) per loader over `rounds` interleaved fresh processes, and shim/native ratios."""
    folders = json.dumps({name: str(path) for name, path in layouts.items()})
    results = {}
    for library, loads in RSS_LOADS.items():
        peaks: dict[str, list[float]] = {name: [] for name in loads}
        for round_ in range(rounds):
            for name, load in _rotated(loads, round_):
                done = subprocess.run(
                    [sys.executable, "-c", RSS_SCRIPT.format(load=load), folders],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "HF_HUB_OFFLINE": "1"},
                )
                peaks[name].append(float(done.stdout.strip().splitlines()[-1]))
        summary = {name: {"peak_rss_mb": round(median(values), 1)} for name, values in peaks.items()}
        for name in summary:
            if name != "native":
                summary[name]["peak_rss_ratio"] = round(
                    summary[name]["peak_rss_mb"] / summary["native"]["peak_rss_mb"], 3
                )
        results[library] = summary
    return results


def _rotated(loaders: dict, round_: int) -> list:
    """Each round starts with a different loader, so warm-up costs do not favour one."""
    items = list(loaders.items())
    shift = round_ % len(items)
    return items[shift:] + items[:shift]


def _summarize(times: dict) -> dict:
    summary = {}
    for name, measured in times.items():
        summary[name] = {f"{kind}_s": round(median(values), 4) for kind, values in measured.items()}
    for name in summary:
        if name != "native":
            for kind in ("load_s", "first_output_s"):
                summary[name][kind.replace("_s", "_ratio")] = round(
                    summary[name][kind] / summary["native"][kind], 3
                )
            # Native transformers maps files lazily and pays for the reads at the first output; the sum
            # is what a user waits for.
            total = summary[name]["load_s"] + summary[name]["first_output_s"]
            native_total = summary["native"]["load_s"] + summary["native"]["first_output_s"]
            summary[name]["load_plus_first_output_ratio"] = round(total / native_total, 3)
    return summary


def _sizes(name: str):
    import dataclasses

    from transformers_cosmos3.testing import SMALL, TINY

    if name == "medium":  # ~290M parameters over both towers: a 1.1 GB float32 checkpoint
        return dataclasses.replace(SMALL, hidden=1024, heads=16, kv_heads=4, layers=12, intermediate=3072)
    return SMALL if name == "small" else TINY


SIZES = {name: (lambda name=name: _sizes(name)) for name in ("tiny", "small", "medium")}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--size", choices=list(SIZES), default="medium")
    parser.add_argument("--rss-rounds", type=int, default=3)
    args = parser.parse_args()

    from diffusers_cosmos3.testing import save_tiny_cosmos3_layouts

    sizes = SIZES[args.size]()
    with tempfile.TemporaryDirectory() as scratch:
        layouts = save_tiny_cosmos3_layouts(Path(scratch), sizes=sizes)
        size_mb = sum(f.stat().st_size for f in layouts["diffusers"].rglob("*.safetensors")) / 2**20
        results = {
            "size": args.size,
            "checkpoint_mb": round(size_mb, 1),
            "repeats": args.repeats,
            "transformers": bench_transformers(layouts, args.repeats),
            "diffusers": bench_diffusers(layouts, args.repeats),
            "peak_rss": bench_peak_rss(layouts, args.rss_rounds),
            "goal": "load time ratio <= 1.05 (transformers), <= 1.15 (diffusers, framework layout); peak RSS ratio <= 1.10",
        }
    for library in ("transformers", "diffusers"):
        for name, figures in results[library].items():
            print(f"{library:<13} {name:<22} {figures} {results['peak_rss'][library][name]}")
    write_results("shim_load", results)


if __name__ == "__main__":
    main()
