"""GenEval in miniature: a procedural domain of coloured shapes captioned with GenEval's six task templates,
and an evaluator that judges pictures the way GenEval does, usable as a reward by import path
(`"domains.geneval_mini.evaluator:geneval_mini"`, with `benchmarks/` on `sys.path`).

    from domains.geneval_mini import Vocabulary, split_prompts, render, evaluate, task_scores

`benchmarks/geneval_mini.py` runs the experiment: a base model taught by `cosmos-train diffusion-sft`, then
DiffusionNFT, FlowGRPO and DDRL from it, scored on held-out prompts. Not part of the cosmos-train package: GenEval's
judging rules, which the `gen_eval` reward shares, are (`cosmos_train.rewards.geneval_rules`).
"""

from .domain import (
    NAMED_COLORS,
    RELATIONS,
    SHAPES,
    TASKS,
    Vocabulary,
    all_prompts,
    balanced_by_task,
    relative_position,
    render,
    split_prompts,
    write_metadata,
    write_pairs,
)
from .evaluator import (
    Detection,
    Verdict,
    bootstrap_error,
    detect,
    evaluate,
    geneval_mini,
    judge,
    task_scores,
    well_formed_shapes,
    well_formed_share,
)

__all__ = [
    "NAMED_COLORS",
    "RELATIONS",
    "SHAPES",
    "TASKS",
    "Detection",
    "Verdict",
    "Vocabulary",
    "all_prompts",
    "balanced_by_task",
    "bootstrap_error",
    "detect",
    "evaluate",
    "geneval_mini",
    "judge",
    "relative_position",
    "render",
    "split_prompts",
    "task_scores",
    "well_formed_shapes",
    "well_formed_share",
    "write_metadata",
    "write_pairs",
]
