"""The `ocr` image reward: does the image show the text quoted in its prompt?

    a sign that says "hello"   ->   target "hello"

Score = 1 - normalised edit distance between the recognised text and the target, both lowercased with
spaces removed (as the reference reward service and Flow-GRPO compute it): the distance is 0 when the target
appears anywhere in the recognised text, is capped at the target's length and divided by it, so a score lies
in [0, 1]. A sample's metadata may name its target as `{"text": ...}`, which wins over the prompt's quote.

The OCR engine is pluggable: `engine` is a name in `OCR_ENGINES` (`"rapidocr"`, RapidOCR on ONNX Runtime,
`pip install 'cosmos-train[ocr]'`, whose wheel ships its models), a `"package.module:function"` path, or a
callable; an engine maps one H x W x 3 uint8 image to the text it reads.
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .media import _rgb, per_clip

OcrEngine = Callable[[np.ndarray], str]

# Straight or curly double quotes; the first quoted span is the target.
_QUOTED = re.compile(r"[\"“”](.+?)[\"“”]", re.DOTALL)


class OcrEngineMissing(RuntimeError):
    """No OCR engine is installed; the message names the package to install."""


def quoted_text(prompt: str) -> str | None:
    """The first double-quoted span of `prompt` (straight or curly quotes), or None."""
    match = _QUOTED.search(prompt)
    return match.group(1) if match else None


def normalise(text: str) -> str:
    """Lowercase, whitespace removed: OCR engines disagree on spacing, and case is rarely the point."""
    return "".join(text.split()).lower()


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions each cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def ocr_score(recognised: str, target: str) -> float:
    """1 - normalised edit distance of `recognised` to `target` (see the module docstring), in [0, 1]."""
    recognised, target = normalise(recognised), normalise(target)
    if not target:
        return 1.0 if not recognised else 0.0
    distance = 0 if target in recognised else min(edit_distance(recognised, target), len(target))
    return 1.0 - distance / len(target)


def _rapidocr() -> OcrEngine:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        raise OcrEngineMissing(
            "the ocr reward needs an OCR engine: pip install 'cosmos-train[ocr]' (rapidocr-onnxruntime)"
        ) from None
    reader = RapidOCR()
    lock = threading.Lock()  # one ONNX session per engine; calls are serialised

    def read(image: np.ndarray) -> str:
        with lock:
            found, _ = reader(image)
        return " ".join(text for _box, text, _confidence in found or [])

    return read


OCR_ENGINES: dict[str, Callable[[], OcrEngine]] = {"rapidocr": _rapidocr}


@functools.cache
def load_engine(name: str) -> OcrEngine:
    """The engine called `name` (in `OCR_ENGINES`, or `package.module:function`), loaded once per process."""
    if name in OCR_ENGINES:
        return OCR_ENGINES[name]()
    module, _, attribute = name.partition(":")
    if not module or not attribute:
        raise ValueError(
            f"unknown OCR engine {name!r}; use {', '.join(OCR_ENGINES)} or 'package.module:function'"
        )
    engine = getattr(importlib.import_module(module), attribute, None)
    if not callable(engine):
        raise ValueError(f"OCR engine {name!r}: {module} has no function {attribute!r}")
    return engine


def _target(prompt: str, metadata: Any) -> str:
    if isinstance(metadata, dict) and isinstance(metadata.get("text"), str):
        return metadata["text"]
    target = quoted_text(prompt)
    if target is None:
        raise ValueError(
            f"ocr: the prompt quotes no text to look for (e.g. 'a sign that says \"hi\"'): {prompt!r}"
        )
    return target


@per_clip
def ocr(
    media, prompts: Sequence[str] = (), metadata=None, engine: str | OcrEngine = "rapidocr"
) -> list[float]:
    """1 - normalised edit distance between the text read in the image and the text quoted in its prompt."""
    if len(prompts) != len(media):
        raise ValueError(f"ocr: {len(media)} images but {len(prompts)} prompts")
    targets = [_target(p, metadata[i] if metadata else None) for i, p in enumerate(prompts)]
    read = engine if callable(engine) else load_engine(engine)
    return [ocr_score(read(image), target) for image, target in zip(_rgb(media), targets, strict=True)]
