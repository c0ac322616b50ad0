"""Held-out accuracy as the issue measures it: greedy generation, then the same `exact_match` and `format`
rules the GRPO rewards apply (`cosmos_train.rewards.text`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cosmos_train.rewards.text import exact_match_reward, format_reward

from .domain import ANSWER_TAG


def load(path: str | Path):
    """A causal LM and its tokenizer from a folder or hub id, ready for batched greedy generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer


@torch.no_grad()
def greedy_completions(
    model, tokenizer, questions: Sequence[str], max_new_tokens: int = 16, batch_size: int = 200
) -> list[str]:
    """Each question as a one-turn chat, answered greedily."""
    was_training = model.training
    model.eval()
    completions = []
    try:
        for start in range(0, len(questions), batch_size):
            chats = [[{"role": "user", "content": q}] for q in questions[start : start + batch_size]]
            texts = tokenizer.apply_chat_template(chats, tokenize=False, add_generation_prompt=True)
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            batch = batch.to(model.device)
            generated = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            completions += tokenizer.batch_decode(
                generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
            )
    finally:
        model.train(was_training)
    return completions


def held_out_scores(model, tokenizer, records: Sequence[dict[str, Any]], **generation) -> dict[str, float]:
    """`accuracy` (the answer tag holds the right number) and `format` (the completion is exactly an answer
    tag) over `records`, greedy."""
    completions = greedy_completions(model, tokenizer, [r["question"] for r in records], **generation)
    answers = [r["answer"] for r in records]
    right = exact_match_reward(completions, answers, answer_tag=ANSWER_TAG)
    formed = format_reward(completions, think_tag="", answer_tag=ANSWER_TAG)
    return {"accuracy": sum(right) / len(records), "format": sum(formed) / len(records)}
