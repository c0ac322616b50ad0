"""Arithmetic with one right answer: the task on which `cosmos-train sft` teaches a tiny Qwen3 and GRPO improves it.

    from domains.arithmetic import Problems, split_problems, write_conversations, held_out_scores

`benchmarks/grpo_math.py` runs the experiment: GRPO, DAPO, Dr. GRPO and GSPO from the same SFT base, scored by
greedy exact-match on held-out problems.
"""

from .domain import (
    ANSWER_TAG,
    Problems,
    answer_text,
    flawed_teacher,
    operands,
    problem,
    split_problems,
    without_carries,
    write_conversations,
)
from .evaluate import greedy_completions, held_out_scores, load

__all__ = [
    "ANSWER_TAG",
    "Problems",
    "answer_text",
    "flawed_teacher",
    "greedy_completions",
    "held_out_scores",
    "load",
    "operands",
    "problem",
    "split_problems",
    "without_carries",
    "write_conversations",
]
