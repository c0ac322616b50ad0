"""The arithmetic domain (issue: learning that counts for language models) and GRPO's `[eval]`: problems carry the
answers Python's own operators give, the rewards score a right answer 1 and a wrong one 0, and `[eval]` logs the
held-out accuracy that plain greedy `generate` measures."""

from __future__ import annotations

import json
import operator
import re

import pytest
from domains.arithmetic import (
    Problems,
    flawed_teacher,
    held_out_scores,
    load,
    operands,
    split_problems,
    without_carries,
    write_conversations,
)
from grpo_helpers import grpo_job
from sft_helpers import REPO

from cosmos_train.algorithms.grpo.trainer import run_grpo
from cosmos_train.config import ConfigError
from cosmos_train.jobs import read_job
from cosmos_train.rewards.text import exact_match_reward, format_reward

BASE = REPO / "benchmarks" / "grpo_math" / "base"
PYTHON = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def test_problems_hold_the_answers_pythons_operators_give():
    problems = Problems(digits=2, operations=("+", "-", "*"))
    train, test = split_problems(problems, seed=3, test_size=100)
    assert len(train) + len(test) == 3 * 90 * 90 and len(test) == 100
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    for record in test + train[:500]:
        a, op, b = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", record["question"]).groups()
        assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99
        assert record["answer"] == str(PYTHON[op](int(a), int(b)))
    assert split_problems(problems, seed=3, test_size=100)[1] == test
    assert split_problems(problems, seed=4, test_size=100)[1] != test


def carries(a: int, op: str, b: int) -> bool:
    """Written out column by column, does any column carry (or borrow)?"""
    columns = [(a // 10**i % 10, b // 10**i % 10) for i in range(len(str(max(a, b))))]
    carry = 0
    for x, y in columns:
        total = x + y + carry if op == "+" else x - y - carry
        carry = int(total >= 10) if op == "+" else int(total < 0)
        if carry:
            return True
    return False


def test_the_flawed_teacher_forgets_exactly_the_carries():
    train, _ = split_problems(Problems(operations=("+", "-")), seed=0)
    assert without_carries(47, "+", 38) == "75" and without_carries(52, "-", 17) == "45"
    assert without_carries(85, "+", 47) == "22" and without_carries(12, "*", 13) == "156"
    for record in train[:2000]:
        a, op, b = operands(record)
        assert (without_carries(a, op, b) == record["answer"]) == (not carries(a, op, b)), record
    taught = flawed_teacher(train, slip=0.6, seed=1)
    assert [r["question"] for r in taught] == [r["question"] for r in train]
    with_carries = [(t, r) for t, r in zip(taught, train, strict=True) if carries(*operands(r))]
    slipped = sum(t["answer"] != r["answer"] for t, r in with_carries) / len(with_carries)
    assert 0.55 < slipped < 0.65  # the slip rate, on the problems where a slip shows
    assert flawed_teacher(train, slip=0.0) == train


@pytest.mark.parametrize(
    ("problems", "message"),
    [
        (lambda: Problems(digits=0), "digits"),
        (lambda: Problems(operations=("/",)), "unknown operation '/'"),
        (lambda: split_problems(Problems(digits=1), test_size=60), "test_size"),
        (lambda: flawed_teacher([], slip=1.5), "slip"),
    ],
)
def test_bad_problem_settings_are_one_line_errors(problems, message):
    with pytest.raises(ValueError, match=message):
        problems()


def test_the_written_answer_is_what_the_rewards_score_right(tmp_path):
    train, _ = split_problems(Problems(), seed=0)
    path = write_conversations(tmp_path / "train.jsonl", train[:50])
    records = [json.loads(line) for line in path.read_text().splitlines()]
    answers = [r["messages"][-1]["content"] for r in records]
    solutions = [r["solution"] for r in records]
    assert exact_match_reward(answers, solutions, answer_tag="answer") == [1.0] * 50
    assert format_reward(answers, think_tag="", answer_tag="answer") == [1.0] * 50
    off_by_one = [a.replace(s, str(int(s) + 1)) for a, s in zip(answers, solutions, strict=True)]
    assert exact_match_reward(off_by_one, solutions, answer_tag="answer") == [0.0] * 50
    assert exact_match_reward(solutions, solutions, answer_tag="answer") == [0.0] * 50  # no tag, no credit
    assert format_reward(solutions, think_tag="", answer_tag="answer") == [0.0] * 50


def test_eval_section_checks_greedy_answers_once(tmp_path):
    job = grpo_job(tmp_path, "unused", extra=f'[eval]\nformat = "jsonl"\npath = "{tmp_path / "job.toml"}"\n')
    with open(job, "a") as text:
        text.write("samples_per_prompt = 4\n")
    with pytest.raises(ConfigError, match=r"eval.*samples_per_prompt = 1 or greedy = false"):
        read_job(job)


def test_eval_logs_the_accuracy_greedy_generate_measures(tmp_path):
    """The shipped SFT base answers part of the held-out problems; `[eval]` at step 0 (before any update) must log
    exactly the share that transformers' own greedy `generate` gets right, and sampled evaluation must run too."""
    test = [json.loads(line) for line in (BASE / "data" / "test.jsonl").read_text().splitlines()][:64]
    problems = [{"question": r["messages"][0]["content"], "answer": r["solution"]} for r in test]
    held_out = write_conversations(tmp_path / "test.jsonl", problems)
    model, tokenizer = load(BASE)
    expected = held_out_scores(model, tokenizer, problems, max_new_tokens=24)
    assert 0.0 < expected["accuracy"] < 1.0 and expected["format"] > 0.9  # neither score is trivially reached

    def run(name: str, extra_eval: str = "") -> list[dict]:
        (tmp_path / name).mkdir()
        job = grpo_job(
            tmp_path / name,
            BASE,
            data=BASE / "data" / "train.jsonl",
            rewards={"exact_match": '{ weight = 1.0, answer_tag = "answer" }'},
            train={"max_steps": 1, "max_completion_length": 24, "per_device_train_batch_size": 8},
            extra=f'[eval]\nformat = "jsonl"\npath = "{held_out}"\nevery = 1\nbatch_size = 32\n{extra_eval}',
        )
        trainer = run_grpo(read_job(job))
        return trainer.state.log_history

    history = run("greedy")
    evaluations = [
        e["eval_rewards/exact_match/mean"] for e in history if "eval_rewards/exact_match/mean" in e
    ]
    assert len(evaluations) == 2  # before training and after the step
    assert evaluations[0] == pytest.approx(expected["accuracy"], abs=1e-6)
    trained = [e for e in history if "generated_tokens" in e]
    assert trained[0]["generated_tokens"] == pytest.approx(8 * trained[0]["completions/mean_length"])

    sampled = run("sampled", "greedy = false\nsamples_per_prompt = 4\n")
    assert sum("eval_rewards/exact_match/mean" in e for e in sampled) == 2
