"""The arithmetic domain: seeded problems with one right answer, as conversations the SFT and GRPO jobs read.

    problems = Problems(digits=2, operations=("+", "-"))
    train, test = split_problems(problems, seed=0)       # [{"question", "answer"}], disjoint
    write_conversations("train.jsonl", train)           # {"messages": [user, assistant]} per line

A problem is "What is 47 + 38?" and its answer is written `<answer>85</answer>`: the `format` reward (with
`think_tag = ""`) checks the shape, `exact_match` (with `answer_tag = "answer"`) the number.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
ANSWER_TAG = "answer"


@dataclass(frozen=True)
class Problems:
    """Which problems exist: operands of `digits` digits (leading ones nonzero, so 10..99 for two) and the
    operations among `+`, `-` and `*`."""

    digits: int = 2
    operations: tuple[str, ...] = ("+",)

    def __post_init__(self):
        if not 1 <= self.digits <= 4:
            raise ValueError("digits must lie in 1..4")
        unknown = [op for op in self.operations if op not in OPERATIONS]
        if unknown or not self.operations:
            raise ValueError(
                f"unknown operation {unknown[0] if unknown else None!r}; known: {' '.join(OPERATIONS)}"
            )

    def as_dict(self) -> dict[str, Any]:
        return {"digits": self.digits, "operations": list(self.operations)}

    def operands(self) -> range:
        low = 0 if self.digits == 1 else 10 ** (self.digits - 1)
        return range(low, 10**self.digits)

    def all(self) -> list[dict[str, str]]:
        """Every problem, in a fixed order."""
        return [
            problem(a, op, b)
            for op in self.operations
            for a, b in itertools.product(self.operands(), repeat=2)
        ]


def problem(a: int, op: str, b: int) -> dict[str, str]:
    return {"question": f"What is {a} {op} {b}?", "answer": str(OPERATIONS[op](a, b))}


def operands(record: dict[str, str]) -> tuple[int, str, int]:
    a, op, b = record["question"].removeprefix("What is ").removesuffix("?").split()
    return int(a), op, int(b)


def without_carries(a: int, op: str, b: int) -> str:
    """The answer of a student who never carries or borrows: digit by digit, each result mod 10 (47 + 38 gives
    75, 52 - 17 gives 45). Products have no such slip: the right answer."""
    if op == "*":
        return str(a * b)
    digits = max(len(str(a)), len(str(b)))
    column = [
        (a // 10**i % 10 + b // 10**i % 10) % 10 if op == "+" else (a // 10**i % 10 - b // 10**i % 10) % 10
        for i in range(digits)
    ]
    return str(int("".join(map(str, reversed(column)))))


def flawed_teacher(records: list[dict[str, str]], slip: float, seed: int = 0) -> list[dict[str, str]]:
    """`records` as a teacher who forgets every carry (and borrow) in a share `slip` of them would answer: the
    demonstrations of an SFT base that knows the format and only part of the skill. A problem without carries
    is answered right either way."""
    if not 0.0 <= slip <= 1.0:
        raise ValueError("slip must lie in 0..1")
    rng = random.Random(seed)
    return [
        {**record, "answer": without_carries(*operands(record))} if rng.random() < slip else record
        for record in records
    ]


def answer_text(answer: str) -> str:
    """The completion a right answer is: the number in the answer tag."""
    return f"<{ANSWER_TAG}>{answer}</{ANSWER_TAG}>"


def split_problems(problems: Problems, seed: int = 0, test_size: int = 200) -> tuple[list[dict], list[dict]]:
    """Train and held-out problems, disjoint and shuffled by `seed`; `test_size` are held out."""
    every = problems.all()
    if not 0 < test_size < len(every) // 2:
        raise ValueError(f"test_size must lie in 1..{len(every) // 2 - 1} for {len(every)} problems")
    random.Random(seed).shuffle(every)
    return every[test_size:], every[:test_size]


def conversation(record: dict[str, str]) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": record["question"]},
            {"role": "assistant", "content": answer_text(record["answer"])},
        ],
        "solution": record["answer"],
    }


def write_conversations(path: str | Path, records: Iterable[dict[str, str]]) -> Path:
    """One chat per line, with the bare answer as `solution`: SFT trains on the assistant turn; GRPO prompts
    with the user turn and hands `solution` to the rewards."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for record in records:
            out.write(json.dumps(conversation(record)) + "\n")
    return path
