"""GenEval in miniature: DiffusionNFT, FlowGRPO and DDRL from one base model that our own SFT taught, scored
on held-out prompts per GenEval task, as the papers report it.

The base (`benchmarks/geneval_mini/base`, 11 MB, hash-checked) is a tiny Stable Diffusion 3 pipeline whose
transformer `cosmos-train diffusion-sft` trained from scratch on the shapes domain
(`domains.geneval_mini.base.build_base`). Each algorithm trains it in full from the same start on the train
prompts (balanced by task) with the `geneval_mini` reward (partial credit; named by import path, `REWARD`), and
`[eval]` scores the held-out prompts (8 samples each, GenEval's strict score, no CFG) ten times a run. A
vocabulary other than the shipped one builds its own base first (about 30 minutes), cached under
`benchmarks/results/`.

    python benchmarks/geneval_mini.py [--quick] [--seed N] [--seeds 3] [--colors a,b,...] [--shapes a,b,...]
                                      [--rollouts N] [--out FILE] [--rebuild-base]
    python benchmarks/geneval_mini.py --combine A.json B.json [--out FILE]   # seeds run apart, one report

Writes JSON (`base`, `nft`, `flow_grpo`, `ddrl`, each with its held-out `overall` and per-task scores at the
budget and the mean over the budget's last third, over seeds; steps and seconds to the target), `<out>.png`
(held-out score against rollouts and against training seconds) and `<out>_samples.png` (base against each
algorithm on a few held-out prompts).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, default_out, first_reaching, plot_curves, run_job, write_payload
from domains.geneval_mini import TASKS, Vocabulary, balanced_by_task, write_metadata, write_pairs
from domains.geneval_mini.base import build_base, check_base, load_vocabulary

SHIPPED = Path(__file__).resolve().parent / "geneval_mini" / "base"
# The domain's rewards, by import path (`benchmarks/` is on the runs' PYTHONPATH: `_common.run_job`); an evaluation
# logs each as `eval/<name>`.
REWARD = "domains.geneval_mini.evaluator:geneval_mini"
WELL_FORMED = "domains.geneval_mini.evaluator:well_formed_shapes"
ALGORITHMS = {"nft": "nft", "flow_grpo": "flow-grpo", "ddrl": "ddrl"}
COLORS = {"nft": "#c83c28", "flow_grpo": "#285ac8", "ddrl": "#28a050"}
LEARNING_RATE = 1e-4  # 3e-4 (NFT's and FlowGRPO's) wrecked this base's shapes within 25 rollouts
UPDATES_PER_ROLLOUT = 2  # as FlowGRPO's reference; the same for all three, so rollouts and steps compare
PROMPTS_PER_ROLLOUT = 8
SAMPLES_PER_PROMPT = 8  # the papers' K = 24 (FlowGRPO, NFT), 8 (DDRL): 64 samples per rollout here

# Each algorithm's paper defaults, scaled to a 2.3M-parameter transformer trained in full (see the docstring of
# `job`): one learning rate for all three, K = 8, 10 sampler steps, no CFG.
OWN_SECTIONS = {
    "nft": """
[nft]
beta = 1.0
kl_beta = 0.0
timestep_fraction = 0.5
decay_type = 1
ema_decay = 0.9
""",
    "flow_grpo": """
[flow_grpo]
noise_level = 0.7
clip_range = 0.0001
kl_beta = 0.04
timestep_fraction = 0.99
ema_decay = 0.9
ema_every = 1
""",
    "ddrl": """
[ddrl]
data_beta = 0.01
train_step_stride = 2
ema_decay = 0.9
""",
}


def job(
    algorithm: str, base: Path, work: Path, vocabulary: Vocabulary, seed: int, rollouts: int, lr: float
) -> str:
    """The job file of one run. Scaled from the papers, and why (docs/geneval-mini.md):
    - full fine-tuning (the base is 2.3M parameters: LoRA buys nothing) at lr 1e-4, constant, for all three, for
      `rollouts` rollouts of two optimizer steps each (the papers' 3e-4 wrecked this base; DDRL's 1e-5 is for 2B
      weights);
    - K = 8 samples per prompt and 8 prompts per rollout (24 and 48 or more in the papers), 10 sampler steps
      (as the papers train), 32 x 32 pictures, the train prompts balanced by task (`write_training_data`);
    - no CFG anywhere: NFT and DDRL are CFG-free, and FlowGRPO's 4.5 would give it a different base score;
    - evaluation at 20 sampler steps (the papers: 40), 8 samples per held-out prompt, every tenth of the run;
    - each algorithm's own constants as its paper sets them (NFT beta 1; FlowGRPO noise 0.7, clip 1e-4, KL 0.04;
      DDRL data weight 0.01, every second step), except NFT's: half the levels per sample (its 0.99 costs twice
      the training per rollout) and no KL (1e-4 of it is negligible here and costs a third forward); EMA 0.9 per
      step for evaluation (theirs: thousands of steps)."""
    kind = ALGORITHMS[algorithm]
    updates = UPDATES_PER_ROLLOUT
    samples = PROMPTS_PER_ROLLOUT * SAMPLES_PER_PROMPT
    vocabulary_keys = f"colors = {list(vocabulary.colors)}, shapes = {list(vocabulary.shapes)}"
    vocabulary_keys = vocabulary_keys.replace("'", '"')
    if algorithm == "ddrl":
        data = f'[data]\npath = "{work / "pairs"}"\nformat = "folder"\nheight = {vocabulary.size}\nwidth = {vocabulary.size}\n'
        size = ""
    else:
        data = f'[data]\npath = "{work / "train_metadata.jsonl"}"\n'
        size = f"height = {vocabulary.size}\nwidth = {vocabulary.size}\n"
    return f"""\
kind = "{kind}"

[model]
name_or_path = "{base}"

{data}
[rewards]
"{REWARD}" = {{ weight = 1.0, {vocabulary_keys} }}

[rollout]
samples_per_prompt = {SAMPLES_PER_PROMPT}
sampling_steps = 10
guidance_scale = 1.0
{size}max_sequence_length = 16
train_batch_size = {samples // updates}
updates_per_rollout = {updates}
{OWN_SECTIONS[algorithm]}
[eval]
path = "{base / "prompts" / "test_metadata.jsonl"}"
every = {max(2, rollouts // 10) * updates}
sampling_steps = 20
guidance_scale = 1.0
samples_per_prompt = 8
seed = 1000

[eval.rewards]
"{REWARD}" = {{ weight = 1.0, strict = true, {vocabulary_keys} }}
"{WELL_FORMED}" = {{ weight = 0.0, {vocabulary_keys} }}

[train]
output_dir = "{work / f"{algorithm}-seed{seed}"}"
learning_rate = {lr}
lr_scheduler_type = "constant"
warmup_steps = 0
max_steps = {rollouts * updates}
per_device_train_batch_size = {PROMPTS_PER_ROLLOUT}
logging_steps = 1
save_steps = {rollouts * updates}
report_to = "none"
disable_tqdm = true
seed = {seed}
"""


def write_training_data(base: Path, work: Path, vocabulary: Vocabulary, seed: int) -> list[dict]:
    """What every run reads from `work`: the base's train prompts with each task given the same share
    (`train_metadata.jsonl`, as GenEval's prompt set is balanced; colour attribution alone would take most
    rollouts), and 512 pictures of them (`pairs/`, DDRL's data term)."""
    lines = (base / "prompts" / "train_metadata.jsonl").read_text().splitlines()
    train = balanced_by_task([json.loads(line) for line in lines])
    write_metadata(work / "train_metadata.jsonl", train)
    write_pairs(work / "pairs", train, 512, vocabulary, seed=seed)
    return train


def run(algorithm: str, base: Path, work: Path, vocabulary: Vocabulary, seed: int, rollouts: int, lr: float):
    """Train one algorithm (the real CLI, in a child process) and read its evaluations back."""
    folder = work / f"{algorithm}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.toml").write_text(job(algorithm, base, work, vocabulary, seed, rollouts, lr))
    started = time.perf_counter()
    history = run_job(ALGORITHMS[algorithm], folder / "job.toml", f"{algorithm} seed {seed}")
    curve = []
    for entry in history:
        if "eval/reward" not in entry:
            continue
        tasks = {task: entry[f"eval/reward/{task}"] for task in TASKS if f"eval/reward/{task}" in entry}
        curve.append(
            {
                "step": entry["step"],
                "rollout": entry["step"] // UPDATES_PER_ROLLOUT,
                "seconds": entry["eval/train_seconds"],
                "overall": statistics.fmean(tasks.values()),
                "tasks": tasks,
                "well_formed": entry[f"eval/{WELL_FORMED}"],
            }
        )
    print(
        f"  {algorithm:9s} seed {seed}: held-out {curve[0]['overall']:.3f} -> {curve[-1]['overall']:.3f} "
        f"in {curve[-1]['rollout']} rollouts ({time.perf_counter() - started:.0f} s with evaluations)",
        flush=True,
    )
    return curve, folder


def summarise(curves: list[list[dict]], target: float) -> dict:
    """Held-out scores at the budget (mean and spread over seeds); the mean of each run's evaluations over the
    last third of the budget, steadier than one evaluation (each moves by about +-0.05); rollouts / seconds to
    `target`."""
    finals = [curve[-1] for curve in curves]
    overall = [f["overall"] for f in finals]
    last_third = [
        statistics.fmean(p["overall"] for p in curve if 3 * p["rollout"] >= 2 * curve[-1]["rollout"])
        for curve in curves
    ]
    to_target = [first_reaching(c, target, "rollout", "overall") for c in curves]
    seconds = [first_reaching(c, target, "seconds", "overall") for c in curves]
    return {
        "overall": statistics.fmean(overall),
        "overall_per_seed": overall,
        "spread": statistics.stdev(overall) if len(overall) > 1 else 0.0,
        "last_third": statistics.fmean(last_third),
        "last_third_per_seed": last_third,
        "last_third_spread": statistics.stdev(last_third) if len(last_third) > 1 else 0.0,
        "tasks": {t: statistics.fmean(f["tasks"][t] for f in finals) for t in finals[0]["tasks"]},
        "well_formed": statistics.fmean(f["well_formed"] for f in finals),
        "rollouts": finals[0]["rollout"],
        "rollouts_to_target": to_target,
        "seconds_to_target": seconds,
        "curves": curves,
    }


def resolve_base(vocabulary: Vocabulary, seed: int, rebuild: bool) -> Path:
    """The shipped base when the vocabulary is its own, else (or with --rebuild-base) one built for it."""
    if not rebuild and load_vocabulary(SHIPPED) == vocabulary:
        check_base(SHIPPED)
        return SHIPPED
    name = f"geneval_mini_base-{'-'.join(vocabulary.colors)}-{'-'.join(vocabulary.shapes)}-seed{seed}"
    folder = SHIPPED if rebuild and load_vocabulary(SHIPPED) == vocabulary else RESULTS / name
    if rebuild or not (folder / "SHA256SUMS").exists():
        recipe = json.loads((SHIPPED / "build.json").read_text())
        print(
            f"building the base model for {vocabulary.colors} x {vocabulary.shapes} into {folder}", flush=True
        )
        build_base(
            folder,
            vocabulary,
            seed=seed,
            pairs=recipe["pairs"],
            sft_steps=recipe["sft_steps"],
            vae_steps=recipe["vae_steps"],
            work=RESULTS / f"{name}.work",
        )
    check_base(folder)
    return folder


def sample_grid(runs: dict[str, Path], base: Path, test: list[dict], path: Path) -> None:
    """One held-out prompt per task (columns); the base, then each algorithm's trained model (rows)."""
    import torch
    from diffusers import DiffusionPipeline
    from PIL import Image, ImageDraw

    records = [
        next(r for r in test if r["tag"] == task) for task in TASKS if any(r["tag"] == task for r in test)
    ]
    prompts = [r["prompt"] for r in records]
    rows = {"base": base} | {name: next(folder.glob("safetensors/step_*")) for name, folder in runs.items()}
    scale, label_width = 3, 90
    pictures = []
    for name, model in rows.items():
        pipeline = DiffusionPipeline.from_pretrained(model)
        pipeline.set_progress_bar_config(disable=True)
        generators = [torch.Generator().manual_seed(1000 + i) for i in range(len(prompts))]
        images = pipeline(
            prompts,
            num_inference_steps=20,
            guidance_scale=1.0,
            height=32,
            width=32,
            max_sequence_length=16,
            generator=generators,
        ).images
        pictures.append((name, images))
    side = 32 * scale
    sheet = Image.new("RGB", (label_width + side * len(prompts), 14 + side * len(rows)), "white")
    pen = ImageDraw.Draw(sheet)
    for column, record in enumerate(records):
        pen.text((label_width + column * side + 2, 2), record["tag"], fill="black")
    for row, (name, images) in enumerate(pictures):
        pen.text((4, 14 + row * side + side // 2), name, fill="black")
        for column, image in enumerate(images):
            sheet.paste(
                image.resize((side, side), Image.NEAREST), (label_width + column * side, 14 + row * side)
            )
    sheet.save(path)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with where it writes filled in."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, 12 rollouts per algorithm (about 5 min)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the first training seed (and the domain's)")
    parser.add_argument(
        "--seeds", type=int, help="training seeds per algorithm, for the spread (3; quick: 1)"
    )
    parser.add_argument("--rollouts", type=int, help="rollouts per run, the fixed budget (150; quick: 12)")
    parser.add_argument("--lr", type=float, default=LEARNING_RATE, help="learning rate of every algorithm")
    parser.add_argument(
        "--gain", type=float, default=0.15, help="target: the base's held-out score plus this"
    )
    parser.add_argument("--colors", help="comma-separated colour names (default: the shipped base's)")
    parser.add_argument("--shapes", help="comma-separated shape names (default: the shipped base's)")
    parser.add_argument(
        "--rebuild-base", action="store_true", help="rebuild the base model (about 30 minutes)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON to write (default: results/geneval_mini.json for the 3-seed run or --combine, "
        "results/partial/ otherwise)",
    )
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="no training: one report (JSON, curves) from result files of separate runs, e.g. one seed each",
    )
    args = parser.parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 3)
    args.out = (
        args.out
        or default_out("geneval_mini", published=bool(args.combine) or (not args.quick and seeds >= 3))
    ).resolve()  # the jobs name paths under it
    return args


def main() -> None:
    args = options()
    if args.combine:
        print(table(combine(args.combine, args.gain, args.out)))
        return
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.rollouts = args.rollouts or (12 if args.quick else 150)

    shipped = load_vocabulary(SHIPPED)
    vocabulary = Vocabulary(
        colors=tuple(args.colors.split(",")) if args.colors else shipped.colors,
        shapes=tuple(args.shapes.split(",")) if args.shapes else shipped.shapes,
        max_count=shipped.max_count,
        size=shipped.size,
        object_size=shipped.object_size,
    )
    base = resolve_base(vocabulary, args.seed, args.rebuild_base)
    work = args.out.with_suffix("")
    work = work.with_name(work.name + ".runs")
    shutil.rmtree(work, ignore_errors=True)
    train = write_training_data(base, work, vocabulary, args.seed)
    test = [json.loads(line) for line in (base / "prompts" / "test_metadata.jsonl").read_text().splitlines()]

    seeds = list(range(args.seed, args.seed + args.seeds))
    curves: dict[str, list] = {name: [] for name in ALGORITHMS}
    folders: dict[str, Path] = {}
    print(
        f"base {base}; {len(train)} train prompts (balanced by task) / {len(test)} held-out; seeds {seeds}",
        flush=True,
    )
    for seed in seeds:  # interleaved: the machine's drift touches every algorithm alike
        for algorithm in ALGORITHMS:
            curve, folder = run(algorithm, base, work, vocabulary, seed, args.rollouts, args.lr)
            curves[algorithm].append(curve)
            folders.setdefault(algorithm, folder)
    payload = report(curves, seeds, vocabulary.as_dict(), args.rollouts, args.gain, args.out)
    sample_grid(folders, base, test, args.out.with_name(args.out.stem + "_samples.png"))
    print(table(payload))


def report(
    curves: dict[str, list], seeds: list[int], vocabulary: dict, rollouts: int, gain: float, out: Path
) -> dict:
    """The JSON (`out`) and the curves' PNG of runs' evaluations: the base's score is the mean of every run's
    step 0, the target that plus `gain`."""
    starts = [curve[0] for runs in curves.values() for curve in runs]
    base_score = statistics.fmean(point["overall"] for point in starts)
    target = base_score + gain
    results = {name: summarise(curves[name], target) for name in ALGORITHMS}
    steps_nft = [r for r in results["nft"]["rollouts_to_target"] if r is not None]
    steps_grpo = [r for r in results["flow_grpo"]["rollouts_to_target"] if r is not None]
    plot_curves(
        out.with_suffix(".png"),
        {name: results[name]["curves"] for name in ALGORITHMS},
        COLORS,
        (("rollout", "rollouts"), ("seconds", "training seconds (evaluations excluded)")),
        ("overall", "GenEval-mini held-out overall"),
        base_score,
        target,
    )
    payload = {
        "vocabulary": vocabulary,
        "seeds": seeds,
        "budget_rollouts": rollouts,
        "target": target,
        "base": {
            "overall": base_score,
            "tasks": {t: statistics.fmean(p["tasks"][t] for p in starts) for t in starts[0]["tasks"]},
            "well_formed": statistics.fmean(p["well_formed"] for p in starts),
        },
        **results,
        "nft_vs_flow_grpo_rollouts_to_target": (
            statistics.median(steps_grpo) / statistics.median(steps_nft) if steps_nft and steps_grpo else None
        ),
    }
    write_payload(out, payload)
    return payload


def combine(paths: list[Path], gain: float, out: Path) -> dict:
    """One report from the runs of several result files (seeds run apart, e.g. on several machines): they must
    share the vocabulary and the budget, and no seed may appear twice."""
    payloads = [json.loads(path.read_text()) for path in paths]
    for path, payload in zip(paths[1:], payloads[1:], strict=True):
        for key in ("vocabulary", "budget_rollouts"):
            if payload[key] != payloads[0][key]:
                raise SystemExit(f"{path}: its {key} differs from {paths[0]}'s; only like runs combine")
    seeds = [seed for payload in payloads for seed in payload["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"seeds {seeds}: a seed appears in more than one file")
    curves = {name: [curve for p in payloads for curve in p[name]["curves"]] for name in ALGORITHMS}
    first = payloads[0]
    return report(curves, seeds, first["vocabulary"], first["budget_rollouts"], gain, out)


def table(payload: dict) -> str:
    """The README's table: base and each algorithm at the budget, overall and per task, the last third's mean,
    and to-target figures (per seed)."""
    tasks = list(payload["base"]["tasks"])
    head = (
        "| model | overall | "
        + " | ".join(tasks)
        + " | well-formed | last third | rollouts to target | seconds to target |"
    )
    lines = [head, "|" + "---|" * (len(tasks) + 6)]

    def cells(entry: dict) -> str:
        return " | ".join(f"{entry['tasks'][t]:.2f}" for t in tasks)

    base = payload["base"]
    lines.append(f"| base | {base['overall']:.3f} | {cells(base)} | {base['well_formed']:.2f} | | | |")
    for name in ALGORITHMS:
        entry = payload[name]
        reach = ", ".join("-" if r is None else str(r) for r in entry["rollouts_to_target"])
        secs = ", ".join("-" if s is None else f"{s:.0f}" for s in entry["seconds_to_target"])
        lines.append(
            f"| {name} | {entry['overall']:.3f} ± {entry['spread']:.3f} | {cells(entry)} | "
            f"{entry['well_formed']:.2f} | {entry['last_third']:.3f} ± {entry['last_third_spread']:.3f} | "
            f"{reach} | {secs} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
