"""A media reward for multi-replica reward-service tests: brightness that logs each batch's start and finish
(with the batch's first prompt and the scoring process), optionally sleeping between, so a test can kill a replica
mid-batch and count which process scored what."""

from __future__ import annotations

import os
import time

import numpy as np


def _log(path: str, event: str, prompts) -> None:
    with open(path, "a") as log:
        log.write(f"{event} {prompts[0]} {os.getpid()}\n")


def counted_brightness(media, prompts, metadata=None, log: str = "", seconds: float = 0.0) -> list[float]:
    _log(log, "start", prompts)
    time.sleep(seconds)
    scores = (np.asarray(media, dtype=np.float64).reshape(len(media), -1).mean(axis=1) / 255).tolist()
    _log(log, "finish", prompts)
    return scores
