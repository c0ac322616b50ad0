"""GenEval in miniature: DiffusionNFT, FlowGRPO and DDRL from one base model that a flawed teacher taught, scored
on balanced held-out prompts per GenEval task, as the papers report it.

The base (`benchmarks/geneval_mini/base`, hash-checked) is a tiny Stable Diffusion 3 pipeline whose transformer
`cosmos-train diffusion-sft` trained from scratch on the shapes domain (`domains.geneval_mini.base.build_base`)
from a *flawed teacher* (`TEACHER`): in 70% of its pictures for a count or a single colour, the count is one off or
the colour another, while the caption stays. The base so knows every shape, colour and count but maps those
captions wrongly in a fixed share: a systematic mistake that a verifiable reward can fix, as the arithmetic base's
forgotten carries are. Each algorithm trains it in full from the same start on the train prompts (balanced by
task) with the `geneval_mini` reward (partial credit; named by import path, `REWARD`), for the same budget of
generated samples. `[eval]` scores the held-out prompts (balanced: every task 108 samples, GenEval's strict
score) at one common setting for all three (`COMMON_GUIDANCE`: CFG-free, as NFT and DDRL evaluate); each final
model is also scored as its reference evaluates it (`REFERENCE_GUIDANCE`: FlowGRPO at CFG 4.5, noise-free).
`--tasks` trains and evaluates on some of GenEval's six tasks only (`--tasks counting`: the teacher's counting
mistake, as the learning test runs it). A vocabulary other than the shipped one builds its own base first, with the
same teacher (about 30 minutes), cached under `benchmarks/results/`.

    python benchmarks/geneval_mini.py [--quick] [--seed N] [--seeds 3] [--colors a,b,...] [--shapes a,b,...]
                                      [--rollouts N] [--tasks a,b,...] [--parallel N] [--out FILE]
                                      [--rebuild-base]
    python benchmarks/geneval_mini.py --combine A.json B.json [--out FILE]   # seeds run apart, one report

Writes JSON (`base`, `nft`, `flow_grpo`, `ddrl`, each with its held-out `overall` and per-task scores at the
budget, over seeds, and `reference`: the same as its paper evaluates; steps and seconds to the target),
`<out>.png` (held-out score against rollouts and against training seconds), `<out>_hacking.png` (train reward
beside the held-out score, per algorithm) and `<out>_samples.png` (base against each algorithm on held-out
prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import RESULTS, default_out, plot_curves, run_job, write_payload
from domains.geneval_mini import (
    TASKS,
    Vocabulary,
    balanced_by_task,
    bootstrap_error,
    evaluate,
    task_scores,
    well_formed_share,
    write_metadata,
    write_pairs,
)
from domains.geneval_mini.base import build_base, check_base, load_vocabulary
from domains.geneval_mini.teacher import FlawedTeacher

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
# What the base's teacher draws wrong, and how often (recorded in the base's build.json).
TEACHER = FlawedTeacher(counting=0.7, colors=0.7)
# CFG of each algorithm's rollouts and of its paper's evaluation (NFT and DDRL are CFG-free; FlowGRPO samples and
# evaluates at 4.5, noise-free). The common setting every model is scored at, and the curves: CFG-free, where the
# base scores mid-range (0.27; 0.49 at 4.5, where the teacher's counting mistakes hardly show on held-out prompts).
ROLLOUT_GUIDANCE = {"nft": 1.0, "flow_grpo": 4.5, "ddrl": 1.0}
REFERENCE_GUIDANCE = {"nft": 1.0, "flow_grpo": 4.5, "ddrl": 1.0}
COMMON_GUIDANCE = 1.0
EVAL_SAMPLES_PER_PROMPT = 6  # x 108 balanced held-out rows: 648 samples, standard error about 0.02
EVALUATIONS = 4  # after step 0, evenly over the budget
QUICK_EVAL_SAMPLES_PER_PROMPT = (
    2  # --quick: 216 samples (standard error about 0.03), at the start and the end
)
EVAL_STEPS = 20
EVAL_SEED = 1000

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
    algorithm: str,
    base: Path,
    work: Path,
    vocabulary: Vocabulary,
    seed: int,
    rollouts: int,
    lr: float,
    evaluations: int = EVALUATIONS,
    eval_samples: int = EVAL_SAMPLES_PER_PROMPT,
) -> str:
    """The job file of one run. Scaled from the papers, and why (docs/geneval-mini.md):
    - full fine-tuning (the base is 2.3M parameters: LoRA buys nothing) at lr 1e-4, constant, for all three, for
      `rollouts` rollouts of two optimizer steps each (the papers' 3e-4 wrecked this base; DDRL's 1e-5 is for 2B
      weights);
    - K = 8 samples per prompt and 8 prompts per rollout (24 and 48 or more in the papers), 10 sampler steps
      (as the papers train), 32 x 32 pictures, the train prompts balanced by task (`write_training_data`);
    - rollouts as each paper samples them: NFT and DDRL CFG-free, FlowGRPO at CFG 4.5;
    - evaluation at 20 sampler steps (the papers: 40) and the common CFG, 6 samples per row of the balanced
      held-out prompts (648 samples), `evaluations` times over the run;
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
guidance_scale = {ROLLOUT_GUIDANCE[algorithm]}
{size}max_sequence_length = 16
train_batch_size = {samples // updates}
updates_per_rollout = {updates}
{OWN_SECTIONS[algorithm]}
[eval]
path = "{work / "test_metadata.jsonl"}"
every = {max(1, rollouts // evaluations) * updates}
sampling_steps = {EVAL_STEPS}
guidance_scale = {COMMON_GUIDANCE}
samples_per_prompt = {eval_samples}
seed = {EVAL_SEED}

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


def read_prompts(base: Path, split: str) -> list[dict]:
    lines = (base / "prompts" / f"{split}_metadata.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def write_training_data(
    base: Path, work: Path, vocabulary: Vocabulary, seed: int, tasks: tuple[str, ...] = TASKS
) -> tuple[list, list]:
    """What every run reads from `work`: the base's train prompts of `tasks` with each task given the same share
    (`train_metadata.jsonl`, as GenEval's prompt set is balanced; colour attribution alone would take most
    rollouts), its held-out prompts balanced alike (`test_metadata.jsonl`: every task the same number of
    samples), and 512 right pictures of the train prompts (`pairs/`, DDRL's data term: the data, not the flawed
    teacher's pictures, which would pull the model back to its mistakes)."""
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown or not tasks:
        raise SystemExit(
            f"--tasks: {', '.join(unknown) or 'none given'}; GenEval's tasks are {', '.join(TASKS)}"
        )
    train = [r for r in balanced_by_task(read_prompts(base, "train")) if r["tag"] in tasks]
    test = [r for r in balanced_by_task(read_prompts(base, "test")) if r["tag"] in tasks]
    write_metadata(work / "train_metadata.jsonl", train)
    write_metadata(work / "test_metadata.jsonl", test)
    write_pairs(work / "pairs", train, 512, vocabulary, seed=seed)
    return train, test


def held_out(
    model: Path,
    test: list[dict],
    vocabulary: Vocabulary,
    guidance: float,
    samples_per_row: int = EVAL_SAMPLES_PER_PROMPT,
) -> dict:
    """GenEval's strict score of `model` (a pipeline folder) on the balanced held-out rows `test`, sampled as
    `[eval]` samples them but at CFG `guidance` (`score_pipeline`)."""
    from diffusers import DiffusionPipeline

    pipeline = DiffusionPipeline.from_pretrained(model)
    pipeline.set_progress_bar_config(disable=True)
    return score_pipeline(pipeline, test, vocabulary, guidance, samples_per_row)


def score_pipeline(
    pipeline,
    records: list[dict],
    vocabulary: Vocabulary,
    guidance: float,
    samples_per_row: int,
    batch: int = 108,
) -> dict:
    """`records` each sampled `samples_per_row` times (sample i from seed EVAL_SEED + i, EVAL_STEPS steps, CFG
    `guidance`) and judged: overall and per task, the overall's bootstrap standard error and the well-formed
    share."""
    import torch

    rows = [record for record in records for _ in range(samples_per_row)]
    correct, formed = [], []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        images = pipeline(
            [r["prompt"] for r in chunk],
            num_inference_steps=EVAL_STEPS,
            guidance_scale=guidance,
            height=vocabulary.size,
            width=vocabulary.size,
            max_sequence_length=16,
            generator=[torch.Generator().manual_seed(EVAL_SEED + start + k) for k in range(len(chunk))],
            output_type="np",
        ).images
        for image, record in zip((images * 255).round().astype(np.uint8), chunk, strict=True):
            correct.append(float(evaluate(image, record, vocabulary.colors, vocabulary.shapes).correct))
            formed.append(well_formed_share(image, vocabulary.colors, vocabulary.shapes))
    tags = [r["tag"] for r in rows]
    scores = task_scores(correct, tags)
    return {
        "guidance": guidance,
        "overall": scores.pop("overall"),
        "tasks": scores,
        "standard_error": bootstrap_error(correct, tags),
        "well_formed": statistics.fmean(formed),
    }


def eval_standard_error(folder: Path, step: int) -> float:
    """The bootstrap standard error of an `[eval]` (its per-sample strict scores in `eval/step_N/samples.json`)."""
    samples = json.loads((folder / "eval" / f"step_{step}" / "samples.json").read_text())
    return bootstrap_error([s[REWARD] for s in samples], [s["tag"] for s in samples])


def run(
    algorithm: str,
    base: Path,
    work: Path,
    vocabulary: Vocabulary,
    seed: int,
    rollouts: int,
    lr: float,
    test: list[dict],
    evaluations: int = EVALUATIONS,
    eval_samples: int = EVAL_SAMPLES_PER_PROMPT,
    threads: int | None = None,
):
    """Train one algorithm (the real CLI, in a child process on `threads` CPU threads) and read its evaluations
    back (with the train reward since the previous one, for the reward-hacking watch); score its final model as
    its paper evaluates."""
    folder = work / f"{algorithm}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.toml").write_text(
        job(algorithm, base, work, vocabulary, seed, rollouts, lr, evaluations, eval_samples)
    )
    started = time.perf_counter()
    history = run_job(ALGORITHMS[algorithm], folder / "job.toml", f"{algorithm} seed {seed}", threads)
    curve, train_rewards = [], []
    for entry in history:
        if "reward" in entry:
            train_rewards.append(entry["reward"])
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
                "train_reward": statistics.fmean(train_rewards) if train_rewards else None,
            }
        )
        train_rewards = []
    for point in (curve[0], curve[-1]):
        point["standard_error"] = eval_standard_error(folder, point["step"])
    final = next(folder.glob("safetensors/step_*"))
    reference = (
        held_out(final, test, vocabulary, REFERENCE_GUIDANCE[algorithm], eval_samples)
        if REFERENCE_GUIDANCE[algorithm] != COMMON_GUIDANCE
        else None
    )
    print(
        f"  {algorithm:9s} seed {seed}: held-out {curve[0]['overall']:.3f} -> {curve[-1]['overall']:.3f} "
        f"(CFG {COMMON_GUIDANCE:g}"
        + (f"; {reference['overall']:.3f} at its paper's CFG {reference['guidance']:g}" if reference else "")
        + f") in {curve[-1]['rollout']} rollouts ({time.perf_counter() - started:.0f} s with evaluations)",
        flush=True,
    )
    return curve, reference, folder


def summarise(
    curves: list[list[dict]], references: list[dict | None], target: float, reference_guidance: float
) -> dict:
    """Held-out scores at the budget (mean and spread over seeds) at the common setting, and as the paper evaluates
    (`reference`); the mean of each run's evaluations over the last third of the budget; rollouts / seconds to
    `target`; the well-formed share at the budget and where the target was first reached."""
    finals = [curve[-1] for curve in curves]
    overall = [f["overall"] for f in finals]
    last_third = [
        statistics.fmean(p["overall"] for p in curve if 3 * p["rollout"] >= 2 * curve[-1]["rollout"])
        for curve in curves
    ]
    reached = [next((p for p in c if p["overall"] >= target), None) for c in curves]
    if reference_guidance == COMMON_GUIDANCE:
        reference = {"guidance": COMMON_GUIDANCE, "same_as_common": True}
    elif any(r is None for r in references):  # a run stopped before its export
        reference = {"guidance": reference_guidance, "not_measured": True}
    else:
        ref_overall = [r["overall"] for r in references]
        reference = {
            "guidance": references[0]["guidance"],
            "overall": statistics.fmean(ref_overall),
            "overall_per_seed": ref_overall,
            "spread": statistics.stdev(ref_overall) if len(ref_overall) > 1 else 0.0,
            "tasks": {t: statistics.fmean(r["tasks"][t] for r in references) for t in references[0]["tasks"]},
            "standard_error": statistics.fmean(r["standard_error"] for r in references),
            "well_formed": statistics.fmean(r["well_formed"] for r in references),
        }
    return {
        "overall": statistics.fmean(overall),
        "overall_per_seed": overall,
        "spread": statistics.stdev(overall) if len(overall) > 1 else 0.0,
        "standard_error": statistics.fmean(f.get("standard_error", float("nan")) for f in finals),
        "last_third": statistics.fmean(last_third),
        "last_third_per_seed": last_third,
        "last_third_spread": statistics.stdev(last_third) if len(last_third) > 1 else 0.0,
        "tasks": {t: statistics.fmean(f["tasks"][t] for f in finals) for t in finals[0]["tasks"]},
        "well_formed": statistics.fmean(f["well_formed"] for f in finals),
        "well_formed_at_target": [None if r is None else r["well_formed"] for r in reached],
        "reference": reference,
        "rollouts": finals[0]["rollout"],
        "rollouts_to_target": [None if r is None else r["rollout"] for r in reached],
        "seconds_to_target": [None if r is None else r["seconds"] for r in reached],
        "curves": curves,
        "references": references,
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
            logit_mean=recipe["logit_mean"],
            teacher=TEACHER,
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
            num_inference_steps=EVAL_STEPS,
            guidance_scale=COMMON_GUIDANCE,
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
        "--quick",
        action="store_true",
        help="1 seed, 12 rollouts per algorithm, evaluated at the start and the end",
    )
    parser.add_argument("--seed", type=int, default=0, help="the first training seed (and the domain's)")
    parser.add_argument(
        "--seeds", type=int, help="training seeds per algorithm, for the spread (3; quick: 1)"
    )
    parser.add_argument("--rollouts", type=int, help="rollouts per run, the fixed budget (120; quick: 12)")
    parser.add_argument("--lr", type=float, default=LEARNING_RATE, help="learning rate of every algorithm")
    parser.add_argument(
        "--tasks",
        default=",".join(TASKS),
        help="comma-separated GenEval tasks to train and evaluate on (default: all six; fewer never publish)",
    )
    parser.add_argument(
        "--eval-samples",
        type=int,
        help="samples per held-out row (6: 648 samples over six tasks; quick: 2); fewer tasks need more, "
        "e.g. 24 for one task (432 samples)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="runs side by side, the machine's CPU threads shared among them (default: one at a time)",
    )
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
    args.tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    if args.parallel < 1:
        parser.error("--parallel: at least 1")
    seeds = args.seeds or (1 if args.quick else 3)
    published = bool(args.combine) or (not args.quick and seeds >= 3 and set(args.tasks) == set(TASKS))
    args.out = (
        args.out or default_out("geneval_mini", published=published)
    ).resolve()  # the jobs name paths under it
    return args


def main() -> None:
    args = options()
    if args.combine:
        print(table(combine(args.combine, args.gain, args.out)))
        return
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.rollouts = args.rollouts or (12 if args.quick else 120)

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
    train, test = write_training_data(base, work, vocabulary, args.seed, args.tasks)

    seeds = list(range(args.seed, args.seed + args.seeds))
    curves: dict[str, list] = {name: [] for name in ALGORITHMS}
    references: dict[str, list] = {name: [] for name in ALGORITHMS}
    folders: dict[str, Path] = {}
    print(
        f"base {base}; {len(train)} train prompts / {len(test)} held-out (each balanced by task); seeds {seeds}",
        flush=True,
    )
    evaluations, eval_samples = (
        (1, QUICK_EVAL_SAMPLES_PER_PROMPT) if args.quick else (EVALUATIONS, EVAL_SAMPLES_PER_PROMPT)
    )
    eval_samples = args.eval_samples or eval_samples
    base_reference = {
        f"{g:g}": held_out(base, test, vocabulary, g, eval_samples)
        for g in sorted(set(REFERENCE_GUIDANCE.values()))
    }
    # Interleaved, so the machine's drift touches every algorithm alike; `--parallel` runs side by side (a machine
    # with more cores than one tiny run can use), the CPU threads shared out.
    runs = [(seed, algorithm) for seed in seeds for algorithm in ALGORITHMS]
    threads = max(1, len(os.sched_getaffinity(0)) // args.parallel) if args.parallel > 1 else None
    if threads:
        import torch

        torch.set_num_threads(threads)  # the final models' reference evaluations run in this process

    def train(entry: tuple[int, str]):
        seed, algorithm = entry
        return run(
            algorithm,
            base,
            work,
            vocabulary,
            seed,
            args.rollouts,
            args.lr,
            test,
            evaluations,
            eval_samples,
            threads,
        )

    with ThreadPoolExecutor(args.parallel) as pool:
        for (_, algorithm), (curve, reference, folder) in zip(runs, pool.map(train, runs), strict=True):
            curves[algorithm].append(curve)
            references[algorithm].append(reference)
            folders.setdefault(algorithm, folder)
    payload = report(
        curves, references, base_reference, seeds, vocabulary.as_dict(), args.rollouts, args.gain, args.out
    )
    sample_grid(folders, base, test, args.out.with_name(args.out.stem + "_samples.png"))
    print(table(payload))


def report(
    curves: dict[str, list],
    references: dict[str, list],
    base_reference: dict[str, dict],
    seeds: list[int],
    vocabulary: dict,
    rollouts: int,
    gain: float,
    out: Path,
) -> dict:
    """The JSON (`out`) and the PNGs of runs' evaluations: the base's score is the mean of every run's step 0 (at
    the common setting), the target that plus `gain`; `base_reference` holds the base scored at each paper's
    CFG."""
    starts = [curve[0] for runs in curves.values() for curve in runs]
    base_score = statistics.fmean(point["overall"] for point in starts)
    target = base_score + gain
    results = {
        name: summarise(curves[name], references[name], target, REFERENCE_GUIDANCE[name])
        for name in ALGORITHMS
    }
    steps_nft = [r for r in results["nft"]["rollouts_to_target"] if r is not None]
    steps_grpo = [r for r in results["flow_grpo"]["rollouts_to_target"] if r is not None]
    plot_curves(
        out.with_suffix(".png"),
        {name: results[name]["curves"] for name in ALGORITHMS},
        COLORS,
        (("rollout", "rollouts"), ("seconds", "training seconds (evaluations excluded)")),
        ("overall", f"GenEval-mini held-out overall (CFG {COMMON_GUIDANCE:g})"),
        base_score,
        target,
    )
    plot_hacking(out.with_name(out.stem + "_hacking.png"), {n: results[n]["curves"] for n in ALGORITHMS})
    payload = {
        "vocabulary": vocabulary,
        "teacher": TEACHER.as_dict(),
        "tasks": list(starts[0]["tasks"]),  # trained and evaluated on (`--tasks`)
        "seeds": seeds,
        "budget_rollouts": rollouts,
        "samples_per_rollout": PROMPTS_PER_ROLLOUT * SAMPLES_PER_PROMPT,
        "common_guidance": COMMON_GUIDANCE,
        "target": target,
        "base": {
            "overall": base_score,
            "tasks": {t: statistics.fmean(p["tasks"][t] for p in starts) for t in starts[0]["tasks"]},
            "well_formed": statistics.fmean(p["well_formed"] for p in starts),
            "standard_error": statistics.fmean(p["standard_error"] for p in starts if "standard_error" in p)
            if any("standard_error" in p for p in starts)
            else None,
            "reference": base_reference,
        },
        **results,
        "nft_vs_flow_grpo_rollouts_to_target": (
            statistics.median(steps_grpo) / statistics.median(steps_nft) if steps_nft and steps_grpo else None
        ),
    }
    write_payload(out, payload)
    return payload


def plot_hacking(path: Path, curves: dict[str, list[list[dict]]]) -> None:
    """Reward-hacking watch: per algorithm, the train reward (partial credit, mean over the rollouts since the
    last evaluation) beside the held-out strict score, against rollouts. Hacking shows as the first rising while
    the second stalls or falls."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(1, len(curves), figsize=(5 * len(curves), 3.8), dpi=100, sharey=True)
    for axis, (name, runs) in zip(axes, curves.items(), strict=True):
        for index, curve in enumerate(runs):
            points = [p for p in curve if p.get("train_reward") is not None]
            axis.plot(
                [p["rollout"] for p in points],
                [p["train_reward"] for p in points],
                "--",
                color=COLORS[name],
                alpha=0.7,
                label="train reward (partial credit)" if index == 0 else None,
            )
            axis.plot(
                [p["rollout"] for p in curve],
                [p["overall"] for p in curve],
                "o-",
                ms=3,
                color=COLORS[name],
                label="held-out score (strict)" if index == 0 else None,
            )
        axis.set_title(name)
        axis.set_xlabel("rollouts")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("score")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def combine(paths: list[Path], gain: float, out: Path) -> dict:
    """One report from the runs of several result files (seeds run apart, e.g. on several machines): they must
    share the vocabulary and the budget, and no seed may appear twice."""
    payloads = [json.loads(path.read_text()) for path in paths]
    for path, payload in zip(paths[1:], payloads[1:], strict=True):
        for key in ("vocabulary", "budget_rollouts", "tasks"):
            if payload.get(key) != payloads[0].get(key):
                raise SystemExit(f"{path}: its {key} differs from {paths[0]}'s; only like runs combine")
    seeds = [seed for payload in payloads for seed in payload["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"seeds {seeds}: a seed appears in more than one file")
    curves = {name: [curve for p in payloads for curve in p[name]["curves"]] for name in ALGORITHMS}
    references = {name: [r for p in payloads for r in p[name]["references"]] for name in ALGORITHMS}
    first = payloads[0]
    return report(
        curves,
        references,
        first["base"]["reference"],
        seeds,
        first["vocabulary"],
        first["budget_rollouts"],
        gain,
        out,
    )


def table(payload: dict) -> str:
    """The README's table: base and each algorithm at the budget, at the common setting overall and per task, as
    each paper evaluates, and to-target figures (per seed)."""
    tasks = list(payload["base"]["tasks"])
    common = f"CFG {payload['common_guidance']:g}"
    head = (
        f"| model | overall ({common}) | "
        + " | ".join(tasks)
        + " | as its paper evaluates | well-formed | rollouts to target | seconds to target |"
    )
    lines = [head, "|" + "---|" * (len(tasks) + 6)]

    def cells(entry: dict) -> str:
        return " | ".join(f"{entry['tasks'][t]:.2f}" for t in tasks)

    base = payload["base"]
    as_papers = ", ".join(f"{v['overall']:.3f} (CFG {g})" for g, v in base["reference"].items())
    lines.append(
        f"| base | {base['overall']:.3f} | {cells(base)} | {as_papers} | {base['well_formed']:.2f} | | |"
    )
    for name in ALGORITHMS:
        entry = payload[name]
        reference = entry["reference"]
        if reference.get("same_as_common"):
            as_paper = "same"
        elif reference.get("not_measured"):
            as_paper = f"not measured (CFG {reference['guidance']:g})"
        else:
            as_paper = (
                f"{reference['overall']:.3f} ± {reference['spread']:.3f} (CFG {reference['guidance']:g})"
            )
        reach = ", ".join("-" if r is None else str(r) for r in entry["rollouts_to_target"])
        secs = ", ".join("-" if s is None else f"{s:.0f}" for s in entry["seconds_to_target"])
        lines.append(
            f"| {name} | {entry['overall']:.3f} ± {entry['spread']:.3f} | {cells(entry)} | {as_paper} | "
            f"{entry['well_formed']:.2f} | {reach} | {secs} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
