"""GenEval-mini's base against the CFG scale: the held-out score of the shipped base sampled as a user samples it
(`pipe(prompt, guidance_scale=...)`), on the benchmark's evaluation (8 samples per held-out prompt, 20 steps,
sample i from seed 1000 + i, GenEval's strict score, overall = the mean of the task means).

The RL benchmark (`geneval_mini.py`) trains and evaluates without CFG, where NFT and DDRL sample; the papers
report their base models with CFG (SD3.5-Medium at 4.5 in FlowGRPO's tables; SD3's pipeline defaults to 7).
At scale 1 this reproduces the RL runs' step-0 evaluation.

    python benchmarks/geneval_mini_guidance.py [--scales 1,2,4.5,7] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import RESULTS, write_payload
from domains.geneval_mini.base import check_base, load_vocabulary
from geneval_mini import EVAL_STEPS, score_pipeline

BASE = Path(__file__).resolve().parent / "geneval_mini" / "base"
SAMPLES_PER_PROMPT = 8  # per held-out prompt; steps and seeds as the benchmark's [eval]


def held_out_score(pipeline, records: list[dict], vocabulary, guidance_scale: float) -> dict:
    """GenEval's per-task and overall strict scores, and the well-formed share, of `records` sampled at
    `guidance_scale` as the benchmark's evaluation samples them (`geneval_mini.score_pipeline`)."""
    return score_pipeline(pipeline, records, vocabulary, guidance_scale, SAMPLES_PER_PROMPT)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", default="1,2,4.5,7", help="comma-separated CFG scales (1: no CFG)")
    parser.add_argument("--out", type=Path, default=RESULTS / "geneval_mini_guidance.json")
    args = parser.parse_args()
    from diffusers import DiffusionPipeline

    check_base(BASE)
    vocabulary = load_vocabulary(BASE)
    records = [
        json.loads(line) for line in (BASE / "prompts" / "test_metadata.jsonl").read_text().splitlines()
    ]
    pipeline = DiffusionPipeline.from_pretrained(BASE)
    pipeline.set_progress_bar_config(disable=True)
    results = {}
    for scale in (float(s) for s in args.scales.split(",")):
        results[str(scale)] = held_out_score(pipeline, records, vocabulary, scale)
        tasks = " ".join(f"{t} {v:.2f}" for t, v in results[str(scale)]["tasks"].items())
        print(f"CFG {scale:>4}: held-out {results[str(scale)]['overall']:.3f} ({tasks})", flush=True)
    write_payload(
        args.out, {"samples_per_prompt": SAMPLES_PER_PROMPT, "steps": EVAL_STEPS, "by_scale": results}
    )


if __name__ == "__main__":
    main()
