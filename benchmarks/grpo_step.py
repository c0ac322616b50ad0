"""Time split of one GRPO step, `CosmosGRPOTrainer` next to bare TRL `GRPOTrainer`, same settings, same run.

    uv run python benchmarks/grpo_step.py [--steps 4] [--warmup 1] [--rounds 5] [--size small] [--threads 1]

One random Qwen3 text LM (`save_tiny_text_lm` at the `--size` sizes; `small` is hidden 512 x 8 layers, a
step takes about two seconds here, so compute dominates) is saved once and loaded by every side with
`from_pretrained`. Every side gets the same `GRPOConfig` (seed 0, 4 rows per step = 1 prompt x 4
generations, 32-token completions, fp32 on CPU, TRL's other defaults, gradient checkpointing included), the
shapes sample's chat prompts and one cheap reward (fraction of lowercase letters). Sides:
- `trl`: bare `trl.GRPOTrainer`, the raw reward, a `datasets.Dataset` with `prompt` / `solution` columns
  read straight from the JSONL;
- `ours`: `CosmosGRPOTrainer` as a job builds it, defaults included (shared-prompt rollouts on), the reward
  wrapped by `cosmos_train.rewards.checked`, the prompts from `load_prompts` (text-only messages);
- `ours_unshared`: the same with `[rollout] shared_prompt = false`, i.e. TRL's generation path: the cost of
  the subclass alone.
Completions are forced to full length (`min_new_tokens`), so each side generates and trains on exactly as
many tokens whatever it samples (the shared-prompt path draws its random numbers in another order).

Each step's wall time runs from the end of the previous step to the end of this one (data, rollout, loss,
optimizer, logging, callbacks: all of it), after `--warmup` untimed steps. Inside it, instance methods are
wrapped with timers on every side alike: `_generate` (tokenize, generate, decode), `_calculate_rewards`,
`_prepare_inputs` (the whole rollout; minus the two before = padding, advantages, metrics) and
`training_step` (minus the rollout = loss forward + backward); the rest of the wall time is the optimizer
step and the trainer's loop. A side's figure in a round is its median step (column by column), so a burst
of load from elsewhere spoils a step rather than the round. A run whose per-round ratios spread more than
1.25x is flagged `noisy`; rerun it on a quiet machine.

All sides run in this one process: fresh subprocesses would pay ~10-20 s of imports each
(PYTHONDONTWRITEBYTECODE) and blow the time budget, and nothing that matters leaks between sides here: each
side builds its own model (from disk), trainer and optimizer, its own first steps are warm-up, one untimed
pass over all sides absorbs the process's one-time costs, and the methods timed are wrapped on the
instance, not the class. What is shared (imported modules, the allocator's pools, the machine's noise) is
what the interleaving is for: the sides alternate over `--rounds` in a rotating order, and the ratio is the
median of the per-round ratios.

`torch.set_num_threads(--threads)` is set once, for every side; the default is 1. With 2 threads on this
2-core machine while another job ran, OpenMP's spin-waiting threads made a step 25x slower (51 s instead
of 2 s; `OMP_WAIT_POLICY=PASSIVE` brought it to 3 s), which no interleaving can average away; one thread
has no barrier to spin on and is merely time-sliced. With one thread a step still takes ~2 s, all compute.
Ratio goal: ours / trl <= 1.05. Writes benchmarks/results/grpo_step.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

import torch
from _common import median, timed, write_results
from datasets import disable_progress_bars
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as transformers_logging

PROMPTS = Path(__file__).resolve().parents[1] / "examples" / "data" / "shapes" / "text.jsonl"
GENERATIONS, BATCH, COMPLETION = 4, 4, 32
SIDES = ("trl", "ours", "ours_unshared")
NOISY = 1.25  # max / min of the per-round ratios above which the run is flagged as disturbed
# Timed methods: phase -> method wrapped on the trainer instance.
METHODS = {
    "generation": "_generate",
    "rewards": "_calculate_rewards",
    "rollout": "_prepare_inputs",
    "training_step": "training_step",
}


def lowercase_fraction(completions, **kwargs) -> list[float]:
    """Share of a completion's letters that are lowercase (0 when it has none): cheap, pure Python."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.islower() for ch in t) / max(1, sum(ch.isalpha() for ch in t)) for t in texts]


class PhaseTimer(TrainerCallback):
    """Each step's wall time (end of the previous step to end of this one) and its time in `METHODS`."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.ends: dict[int, float] = {}  # global step -> when it ended
        self.spent: dict[int, dict[str, float]] = {}  # step index (global_step while running) -> phase -> s
        self.lengths: list[float] = []  # logged mean completion length, one per step (TRL clears _metrics)
        for phase, name in METHODS.items():
            setattr(trainer, name, self._wrap(phase, getattr(trainer, name)))
        trainer.add_callback(self)

    def _wrap(self, phase: str, method):
        def timed_method(*args, **kwargs):
            elapsed, value = timed(lambda: method(*args, **kwargs))
            spent = self.spent.setdefault(self.trainer.state.global_step, dict.fromkeys(METHODS, 0.0))
            spent[phase] += elapsed
            return value

        return timed_method

    def on_step_end(self, args, state, control, **kwargs):
        self.ends[state.global_step] = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs:
            self.lengths.append(logs["completions/mean_length"])

    def steps(self, warmup: int) -> list[dict[str, float]]:
        """Seconds spent in each step after the first `warmup`: the wall time and its parts."""
        rows = []
        for step in sorted(self.ends):
            if step <= warmup:
                continue
            wall, spent = self.ends[step] - self.ends[step - 1], self.spent[step - 1]
            rows.append(
                {
                    "step_s": wall,
                    "generation_s": spent["generation"],
                    "rewards_s": spent["rewards"],
                    "rollout_other_s": spent["rollout"] - spent["generation"] - spent["rewards"],
                    "loss_fwd_bwd_s": spent["training_step"] - spent["rollout"],
                    "optimizer_and_loop_s": wall - spent["training_step"],
                }
            )
        return rows


def trl_dataset():
    """The prompts as bare TRL takes them: chat messages without the final (reference) assistant turn."""
    from datasets import Dataset

    rows = []
    for line in PROMPTS.read_text().splitlines():
        messages = json.loads(line)["messages"]
        rows.append({"prompt": messages[:-1], "solution": messages[-1]["content"]})
    return Dataset.from_list(rows)


def our_dataset():
    """The prompts as a cosmos-train job loads them for a text LM (`build_grpo_trainer`)."""
    from cosmos_train.algorithms.grpo.schema import PromptData
    from cosmos_train.data import to_text_messages
    from cosmos_train.data.chat_prompts import load_prompts

    dataset, _ = load_prompts(PromptData(format="jsonl", path=str(PROMPTS)))
    return dataset.map(lambda row: {"prompt": to_text_messages(row["prompt"], row["source"])})


def config(output_dir: Path, steps: int):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir),
        seed=0,
        num_generations=GENERATIONS,
        per_device_train_batch_size=BATCH,
        max_completion_length=COMPLETION,
        # Full-length completions on every side: the same tokens to generate and train on.
        generation_kwargs={"min_new_tokens": COMPLETION},
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        max_steps=steps,
    )


def build(side: str, model_dir: Path, datasets: dict, output_dir: Path, steps: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from cosmos_train.algorithms.grpo.schema import GRPORolloutSection
    from cosmos_train.algorithms.grpo.trainer import CosmosGRPOTrainer
    from cosmos_train.rewards import checked

    common = {
        "model": AutoModelForCausalLM.from_pretrained(model_dir),
        "args": config(output_dir, steps),
        "processing_class": AutoTokenizer.from_pretrained(model_dir),
    }
    if side == "trl":
        return GRPOTrainer(reward_funcs=[lowercase_fraction], train_dataset=datasets["trl"], **common)
    return CosmosGRPOTrainer(
        reward_funcs=[checked("lowercase", lowercase_fraction)],
        train_dataset=datasets["ours"],
        rollout=GRPORolloutSection(shared_prompt=side == "ours"),
        **common,
    )


def run_side(side: str, model_dir: Path, datasets: dict, output_dir: Path, steps: int, warmup: int) -> dict:
    trainer = build(side, model_dir, datasets, output_dir, steps + warmup)
    trainer.remove_callback(PrinterCallback)  # logging_steps = 1 still computes the logs on every side
    timer = PhaseTimer(trainer)
    trainer.train()
    lengths = timer.lengths
    assert len(lengths) == steps + warmup, f"{side}: {len(lengths)} logged steps, expected {steps + warmup}"
    assert all(length == COMPLETION for length in lengths), f"{side}: completion lengths {lengths}"
    rows = timer.steps(warmup)
    assert len(rows) == steps, f"{side}: timed {len(rows)} steps, expected {steps}"
    del trainer
    gc.collect()
    # The median step, column by column: a burst of load from elsewhere spoils a step, not the figure.
    return {key: median([row[key] for row in rows]) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps per side and round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first steps per side and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)
    transformers_logging.disable_progress_bar()
    # The shared-prompt prefill (max_new_tokens = 1) warns on every step that min_new_tokens cannot be met.
    warnings.filterwarnings("ignore", message="Unfeasible length constraints")
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' checkpointing renames
    disable_progress_bars()

    from transformers import AutoModelForCausalLM

    from cosmos_train.tiny_models import save_tiny_text_lm
    from transformers_cosmos3 import testing as tiny

    sizes = tiny.SMALL if args.size == "small" else tiny.TINY
    datasets = {"trl": trl_dataset(), "ours": our_dataset()}
    assert datasets["trl"]["prompt"] == datasets["ours"]["prompt"], "the two datasets' prompts differ"

    start = time.perf_counter()
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model_dir = save_tiny_text_lm(scratch / "model", sizes=sizes)
        parameters = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
        for side in SIDES:  # first steps in this process (lazy init, allocator pools): not counted
            run_side(side, model_dir, datasets, scratch / f"{side}-warmup", 1, args.warmup)
        for round_ in range(args.rounds):
            order = SIDES[round_ % len(SIDES) :] + SIDES[: round_ % len(SIDES)]
            measured = {
                side: run_side(
                    side, model_dir, datasets, scratch / f"{side}-{round_}", args.steps, args.warmup
                )
                for side in order
            }
            rounds.append(measured)
            print(
                f"round {round_} ({' > '.join(order)}): "
                + ", ".join(f"{side} {measured[side]['step_s']:.3f}" for side in SIDES)
                + " s/step",
                flush=True,
            )
    assert torch.get_num_threads() == args.threads

    figures = {
        side: {key: median([r[side][key] for r in rounds]) for key in rounds[0][side]} for side in SIDES
    }
    ratios = {
        side: [r[side]["step_s"] / r["trl"]["step_s"] for r in rounds] for side in SIDES if side != "trl"
    }
    # Per phase, ours / trl: where a gap comes from (generation differs by design with shared prompts).
    phase_ratios = {
        side: {
            key: round(median([r[side][key] / r["trl"][key] for r in rounds]), 3)
            for key in ("generation_s", "loss_fwd_bwd_s")
        }
        for side in ratios
    }
    columns = list(figures["trl"])
    print()
    print(
        f"{'side':<15}"
        + "".join(f"{c.removesuffix('_s'):>21}" for c in columns)
        + "   (s/step, median of rounds)"
    )
    for side in SIDES:
        print(f"{side:<15}" + "".join(f"{figures[side][c]:>21.4f}" for c in columns))
    for side, values in ratios.items():
        print(
            f"ratio {side}/trl (time per step), median of rounds = {median(values):.3f}  "
            f"{[round(v, 3) for v in values]}; per phase {phase_ratios[side]}"
        )
    # The rounds should agree to a few percent; when they do not, something else took the cores.
    spread = max(max(v) / min(v) for v in ratios.values())
    if spread > NOISY:
        print(f"NOISY: per-round ratios spread {spread:.2f}x; the machine was busy, rerun it when quiet")
    runtime = time.perf_counter() - start
    print(f"runtime {runtime:.0f} s")

    write_results(
        "grpo_step",
        {
            "setup": {
                "model": f"Qwen3 text LM, hidden {sizes.hidden} x {sizes.layers} layers, "
                f"intermediate {sizes.intermediate}, random weights",
                "size": args.size,
                "parameters": parameters,
                "prompts_per_step": BATCH // GENERATIONS,
                "num_generations": GENERATIONS,
                "per_device_train_batch_size": BATCH,
                "completion_tokens": COMPLETION,
                "grpo_config": "seed 0, fp32, use_cpu, TRL defaults otherwise (beta 0, gradient checkpointing)",
                "reward": "fraction of lowercase letters (python)",
                "steps_timed": args.steps,
                "warmup_steps": args.warmup,
                "rounds": args.rounds,
                "runtime_s": round(runtime, 1),
            },
            "seconds_per_step": {side: {k: round(v, 5) for k, v in figures[side].items()} for side in SIDES},
            "phase_ratios": phase_ratios,
            "step_s_per_round": {side: [round(r[side]["step_s"], 4) for r in rounds] for side in SIDES},
            "ratios_per_round": {side: [round(v, 3) for v in values] for side, values in ratios.items()},
            "ratio_time_per_step": round(median(ratios["ours"]), 3),
            "ratio_time_per_step_unshared": round(median(ratios["ours_unshared"]), 3),
            "ratio_spread": round(spread, 3),
            "noisy": spread > NOISY,
            "goal": "ratio (ours / trl) <= 1.05",
        },
    )


if __name__ == "__main__":
    main()
