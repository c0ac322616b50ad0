"""Rewards for RL jobs: built-ins, user functions by import path, and rewards hosted by the remote service.

A job's `[rewards]` table maps a reward to its weight, or to a table with `weight` and the reward's
parameters:

    [rewards]
    accuracy = 1.0
    format = { weight = 0.5, think_tag = "think", answer_tag = "answer" }
    "my_package.rewards:brevity" = 0.2
    "remote:pickscore" = 1.0

`build_rewards` turns that table into TRL reward functions, each wrapped so that a reward that raises or
returns NaN stops the run with a `RewardError` naming the reward and the offending completion.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .remote import RemoteRewardClient, RemoteRewardError, RemoteTextReward
from .text import (
    REFERENCE_COLUMN,
    completion_text,
    conversational,
    exact_match_reward,
    format_reward,
    length_reward,
    single_choice_reward,
)

__all__ = [
    "BUILTINS",
    "AsyncCheckedReward",
    "Builtin",
    "CheckedReward",
    "RemoteRewardClient",
    "RemoteRewardError",
    "RewardError",
    "build_rewards",
    "check_reward",
    "check_reward_name",
    "checked",
]


class RewardError(RuntimeError):
    """A reward function failed or returned NaN during a run; the message names it and the completion."""


@dataclass(frozen=True)
class Builtin:
    make: Callable[..., Callable]  # parameters -> reward function
    reads: str  # what it reads besides the completion, for docs and errors
    summary: str
    requires: str | None = None  # an optional package it needs ("math-verify")
    defaults_from_train: dict[str, str] = field(default_factory=dict)  # parameter -> [train] key
    positive: tuple[str, ...] = ()  # parameters that must be > 0


def _partial(function: Callable) -> Callable[..., Callable]:
    def make(**parameters: Any) -> Callable:
        def reward(completions, **columns):
            return function(completions, **columns, **parameters)

        return reward

    make.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p for p in inspect.signature(function).parameters.values() if p.kind == p.KEYWORD_ONLY]
    )
    return make


# What TRL passes to every reward: never a job parameter.
_CALL_ARGUMENTS = {
    "prompts",
    "completions",
    "completion_ids",
    "solution",
    "log_extra",
    "log_metric",
    "trainer_state",
}


def _trl(name: str, factory: bool = False) -> Callable[..., Callable]:
    """A `trl.rewards` reward (or reward factory), taking plain-text completions too. A factory's arguments,
    or a reward's own options (`reasoning_delimiters`), are the job's parameters."""

    def make(**parameters: Any) -> Callable:
        import trl.rewards

        reward = getattr(trl.rewards, name)
        if factory:
            return conversational(reward(**parameters))
        return conversational(functools.partial(reward, **parameters) if parameters else reward)

    def signature() -> inspect.Signature:
        import trl.rewards

        params = inspect.signature(getattr(trl.rewards, name)).parameters.values()
        own = [p for p in params if p.kind != p.VAR_KEYWORD and p.name not in _CALL_ARGUMENTS]
        return inspect.Signature([p.replace(kind=p.KEYWORD_ONLY) for p in own])

    make.signature = signature  # type: ignore[attr-defined]
    return make


BUILTINS: dict[str, Builtin] = {
    "accuracy": Builtin(
        _trl("accuracy_reward"),
        REFERENCE_COLUMN,
        "math answer equals the solution (TRL, math-verify)",
        "math-verify",
    ),
    "reasoning_accuracy": Builtin(
        _trl("reasoning_accuracy_reward"),
        REFERENCE_COLUMN,
        "math answer after </think> equals the solution (TRL, math-verify)",
        "math-verify",
    ),
    "cosine": Builtin(
        _trl("get_cosine_scaled_reward", factory=True),
        f"{REFERENCE_COLUMN}, completion_ids",
        "accuracy scaled by length (TRL, math-verify)",
        "math-verify",
    ),
    "think_format": Builtin(_trl("think_format_reward"), "-", "<think>...</think> then an answer (TRL)"),
    "repetition": Builtin(
        _trl("get_repetition_penalty_reward", factory=True),
        "completion_ids",
        "n-gram repetition penalty (TRL)",
    ),
    "overlong": Builtin(
        _trl("get_soft_overlong_punishment", factory=True),
        "completion_ids",
        "DAPO's soft overlong punishment (TRL)",
        defaults_from_train={"max_completion_len": "max_completion_length"},
        positive=("soft_punish_cache",),
    ),
    "format": Builtin(
        _partial(format_reward), "-", "<think>...</think><answer>...</answer>, tags configurable"
    ),
    "single_choice": Builtin(
        _partial(single_choice_reward),
        REFERENCE_COLUMN,
        "option letter in the answer tag equals the solution",
    ),
    "exact_match": Builtin(
        _partial(exact_match_reward), REFERENCE_COLUMN, "answer equals the solution (case/space-insensitive)"
    ),
    "length": Builtin(_partial(length_reward), "-", "1 up to max_words words, falling to 0 at twice that"),
}


def _signature(builtin: Builtin) -> inspect.Signature:
    make = builtin.make
    return make.signature() if hasattr(make, "signature") else inspect.signature(make)


def check_reward(name: str, parameters: dict[str, Any] | None = None) -> None:
    """Raise ValueError (one line) unless `name` is a built-in, `module:function` or `remote:<name>`, and
    a built-in's `parameters` are ones it takes."""
    check_reward_name(name)
    if name in BUILTINS and parameters:
        _check_parameters(name, parameters)


def _check_parameters(name: str, parameters: dict[str, Any]) -> inspect.Signature:
    signature = _signature(BUILTINS[name])
    for key in parameters:
        if key not in signature.parameters:
            known = ", ".join(p for p in signature.parameters if p != "kwargs") or "none"
            raise ValueError(f"{name}: unknown parameter '{key}' (it takes: {known})")
    for key in BUILTINS[name].positive:
        value = parameters.get(key)
        if value is not None and (not isinstance(value, numbers.Real) or value <= 0):
            raise ValueError(f"{name}: {key} must be a positive number (got {value!r})")
    return signature


def check_reward_name(name: str) -> None:
    """Raise ValueError (one line) unless `name` is a built-in, `module:function` or `remote:<name>`."""
    if name.startswith("remote:"):
        if not name.removeprefix("remote:"):
            raise ValueError("'remote:' needs the service's reward name, e.g. 'remote:pickscore'")
        return
    if ":" in name:
        module, _, attribute = name.partition(":")
        if not module or not attribute.isidentifier():
            raise ValueError(f"'{name}' is not 'package.module:function'")
        return
    if name not in BUILTINS:
        raise ValueError(
            f"unknown reward '{name}'; built-ins are {', '.join(BUILTINS)} "
            "(or use 'package.module:function' or 'remote:<name>')"
        )


@dataclass(frozen=True)
class RewardSpec:
    name: str
    weight: float
    parameters: dict[str, Any]


def build_rewards(
    specs: list[RewardSpec],
    train: dict[str, Any] | None = None,
    client: RemoteRewardClient | None = None,
    search_path: str | Path | None = None,
) -> list[Callable]:
    """TRL reward functions for `specs`, in order, each checked (`CheckedReward`).

    `train` supplies defaults some built-ins take from `[train]` (e.g. `overlong`'s length). Remote rewards
    use `client` (from the `REMOTE_REWARD_*` environment when None), checked reachable here, so a service
    that is down fails the run before any model loads. `module:function` rewards are imported from
    `sys.path` or, failing that, from `search_path` (the job file's folder).
    """
    rewards: list[Callable] = []
    for spec in specs:
        if spec.name.startswith("remote:"):
            if spec.parameters:
                raise RewardError(f"[rewards] {spec.name}: remote rewards take no parameters besides weight")
            if client is None:
                client = RemoteRewardClient.from_env()
                client.check_reachable()
            function = RemoteTextReward(spec.name.removeprefix("remote:"), client)
        elif ":" in spec.name:
            function = _import_reward(spec, search_path)
        else:
            function = _make_builtin(spec, train or {})
        rewards.append(checked(spec.name, function))
    return rewards


def _make_builtin(spec: RewardSpec, train: dict[str, Any]) -> Callable:
    builtin = BUILTINS[spec.name]
    if builtin.requires == "math-verify":
        from trl.import_utils import is_math_verify_available

        if not is_math_verify_available():
            raise RewardError(
                f"[rewards] {spec.name} needs math-verify: pip install 'cosmos-train[math]' (or math-verify)"
            )
    parameters = dict(spec.parameters)
    for parameter, key in builtin.defaults_from_train.items():
        if parameter not in parameters and train.get(key) is not None:
            parameters[parameter] = train[key]
    try:
        signature = _check_parameters(spec.name, parameters)
    except ValueError as error:
        raise RewardError(f"[rewards] {error}") from None
    try:
        signature.bind(**parameters)
    except TypeError as error:
        raise RewardError(f"[rewards] {spec.name}: {error}") from None
    return builtin.make(**parameters)


def _import_reward(spec: RewardSpec, search_path: str | Path | None) -> Callable:
    module_name, _, attribute = spec.name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if search_path is None or error.name != module_name.split(".")[0]:
            raise RewardError(f"[rewards] {spec.name}: cannot import {module_name} ({error})") from None
        sys.path.append(str(search_path))  # kept: TRL may pickle the function by reference
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise RewardError(
                f"[rewards] {spec.name}: cannot import {module_name} from sys.path or {search_path} ({error})"
            ) from None
    except ImportError as error:
        raise RewardError(f"[rewards] {spec.name}: cannot import {module_name} ({error})") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise RewardError(f"[rewards] {spec.name}: {module_name} has no function '{attribute}'")
    # functools.partial keeps an async function recognisably async for TRL.
    return functools.partial(function, **spec.parameters) if spec.parameters else function


# --- failures stop the run, naming the reward and the completion ------------------------------------------


def _check(name: str, values: Any, completions: list) -> list:
    if not isinstance(values, list | tuple):
        raise RewardError(f"reward '{name}' returned {type(values).__name__}, expected a list of floats")
    for index, value in enumerate(values):
        if value is None:
            continue  # TRL's "not applicable to this sample"
        if not isinstance(value, numbers.Real) or math.isnan(value):
            shown = completion_text(completions[index]) if index < len(completions) else "?"
            raise RewardError(f"reward '{name}' returned {value!r} for completion {index}: {shown[:300]!r}")
    return list(values)


def _offender(name: str, error: Exception, completions: list, index: int | None) -> RewardError:
    if isinstance(error, RewardError):
        return error
    if isinstance(error, RemoteRewardError):
        return RewardError(f"reward '{name}': {error}")
    where = (
        f" on completion {index}: {completion_text(completions[index])[:300]!r}" if index is not None else ""
    )
    return RewardError(f"reward '{name}' raised {type(error).__name__}: {error}{where}")


def _one(kwargs: dict[str, Any], index: int) -> dict[str, Any]:
    """The reward's keyword arguments for one sample: every per-sample list cut to its `index` entry."""
    size = len(kwargs["completions"])
    return {k: [v[index]] if isinstance(v, list) and len(v) == size else v for k, v in kwargs.items()}


class CheckedReward:
    """A reward that stops the run on an exception or a NaN, naming itself and the completion at fault
    (found by scoring the samples one at a time)."""

    def __init__(self, name: str, function: Callable):
        self.__name__, self.function = name, function

    def __call__(self, **kwargs: Any) -> list:
        try:
            values = self.function(**kwargs)
        except Exception as error:
            raise _offender(self.__name__, error, kwargs["completions"], self._failing(kwargs)) from error
        return _check(self.__name__, values, kwargs["completions"])

    def _failing(self, kwargs: dict[str, Any]) -> int | None:
        for index in range(len(kwargs["completions"])):
            try:
                self.function(**_one(kwargs, index))
            except Exception:
                return index
        return None


class AsyncCheckedReward(CheckedReward):
    async def __call__(self, **kwargs: Any) -> list:
        try:
            values = await self.function(**kwargs)
        except Exception as error:
            index = None
            if not isinstance(
                error, RewardError | RemoteRewardError
            ):  # a service failure is not one sample's
                for candidate in range(len(kwargs["completions"])):
                    try:
                        await self.function(**_one(kwargs, candidate))
                    except Exception:
                        index = candidate
                        break
            raise _offender(self.__name__, error, kwargs["completions"], index) from error
        return _check(self.__name__, values, kwargs["completions"])


def checked(name: str, function: Callable) -> CheckedReward:
    from trl.trainer.utils import is_async_callable

    return (AsyncCheckedReward if is_async_callable(function) else CheckedReward)(name, function)
