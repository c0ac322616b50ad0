"""Steps/s of `cosmos-train sft` against a bare PyTorch loop: same tiny model, same batches, AdamW.

    uv run python benchmarks/sft_overhead.py [--steps 12] [--warmup 3] [--rounds 3] [--size small]

Both sides full-fine-tune a small random Cosmos3 reasoner (hidden 512, 8 layers: a step takes
about a second here, so compute dominates and scheduling noise does not) on the bundled shapes sample (images) with the
same collator, batch size, AdamW settings and gradient clipping, single process on CPU, without
activation checkpointing (TRL's default turns it on; that alone costs a re-run of the forward).
Wall time per step is measured after a warm-up on both sides, data loading included. The bare
loop's step is split into data, forward+backward and optimizer, so the gap shows where the
trainer's extra time goes. The two sides alternate over `--rounds` (the machine is shared and noisy);
the ratio is the median of the per-round ratios. Ratio goal: trainer/bare <= 1.05.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import median, write_results
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sft_helpers import write_job

BATCH = 4
LR = 1e-4


class StepTimer(TrainerCallback):
    """Wall time from the end of the warm-up to the end of the last step: data, step, callbacks, all of it."""

    def __init__(self, warmup: int):
        self.warmup, self.start, self.end, self.steps = warmup, None, None, 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.start = time.perf_counter()
        elif state.global_step > self.warmup:
            self.end, self.steps = time.perf_counter(), state.global_step - self.warmup


def trainer_steps(model_dir: Path, folder: Path, steps: int, warmup: int) -> dict:
    from cosmos_train.algorithms.sft.trainer import run_sft
    from cosmos_train.jobs import read_job

    job_path = write_job(
        folder,
        model_dir,
        lora=False,
        train={
            "max_steps": steps + warmup,
            "learning_rate": LR,
            "per_device_train_batch_size": BATCH,
            "save_strategy": "no",
            "logging_steps": 10_000,
            "disable_tqdm": True,
            "lr_scheduler_type": "constant",
            "warmup_steps": 0,
            "weight_decay": 0.0,
            # TRL turns activation checkpointing on by default; the bare loop does not recompute activations.
            "gradient_checkpointing": False,
        },
    )
    job = read_job(job_path)
    timer = StepTimer(warmup)
    run_sft(job, callbacks=[timer])
    return {"step_s": (timer.end - timer.start) / timer.steps, "steps_timed": timer.steps}


def bare_steps(model_dir: Path, steps: int, warmup: int) -> dict:
    from transformers import AutoProcessor

    from cosmos_train.algorithms.sft.schema import ConversationData
    from cosmos_train.data import build_collator, load_conversations
    from cosmos_train.samples import shapes_dir
    from transformers_cosmos3 import Cosmos3ForConditionalGeneration

    data = ConversationData(
        format="llava", path=str(shapes_dir() / "llava.json"), media_dir=str(shapes_dir()), max_length=512
    )
    dataset, _ = load_conversations(data)
    processor = AutoProcessor.from_pretrained(model_dir)
    collate = build_collator(processor, data, data.max_length)
    model = Cosmos3ForConditionalGeneration.from_pretrained(model_dir).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, shuffle=True, collate_fn=collate, generator=generator
    )
    split = {"data_s": [], "forward_backward_s": [], "optimizer_s": []}
    done = 0
    while done < steps + warmup:
        batches = iter(loader)
        while done < steps + warmup:
            t0 = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            loss = model(**batch).loss
            loss.backward()
            t2 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            done += 1
            if done == warmup:
                wall_start = time.perf_counter()
            if done > warmup:
                split["data_s"].append(t1 - t0)
                split["forward_backward_s"].append(t2 - t1)
                split["optimizer_s"].append(t3 - t2)
    wall = (time.perf_counter() - wall_start) / len(split["data_s"])
    mean = {k: sum(v) / len(v) for k, v in split.items()}
    return {"step_s": wall, **mean, "steps_timed": len(split["data_s"])}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    args = parser.parse_args()

    from transformers_cosmos3 import testing as tiny

    sizes = tiny.SMALL if args.size == "small" else tiny.TINY
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model_dir = tiny.save_tiny_cosmos3_reasoner(scratch / "model", sizes=sizes)
        for round_ in range(args.rounds):
            sides = {
                "bare": lambda: bare_steps(model_dir, args.steps, args.warmup),
                "trainer": lambda round_=round_: trainer_steps(
                    model_dir, _fresh(scratch / f"job-{round_}"), args.steps, args.warmup
                ),
            }
            order = ["bare", "trainer"] if round_ % 2 == 0 else ["trainer", "bare"]
            measured = {side: sides[side]() for side in order}
            rounds.append(measured)
            print(
                f"round {round_}: bare {measured['bare']['step_s']:.3f} s/step, "
                f"trainer {measured['trainer']['step_s']:.3f} s/step"
            )
    bare = {key: median([r["bare"][key] for r in rounds]) for key in rounds[0]["bare"]}
    trainer_step = median([r["trainer"]["step_s"] for r in rounds])
    ratios = [r["trainer"]["step_s"] / r["bare"]["step_s"] for r in rounds]
    results = {
        "size": args.size,
        "rounds": args.rounds,
        "bare_loop": {
            **{k: round(v, 5) for k, v in bare.items()},
            "steps_per_s": round(1 / bare["step_s"], 3),
        },
        "cosmos_train_sft": {"step_s": round(trainer_step, 5), "steps_per_s": round(1 / trainer_step, 3)},
        "ratios_per_round": [round(r, 3) for r in ratios],
        "ratio_time_per_step": round(median(ratios), 3),
        "goal": "ratio <= 1.05",
    }
    print(f"bare loop        {results['bare_loop']}")
    print(f"cosmos-train sft {results['cosmos_train_sft']}")
    print(f"ratio (trainer time per step / bare), median of rounds = {results['ratio_time_per_step']}")
    write_results("sft_overhead", results)


def _fresh(folder: Path) -> Path:
    folder.mkdir()
    return folder


if __name__ == "__main__":
    main()
