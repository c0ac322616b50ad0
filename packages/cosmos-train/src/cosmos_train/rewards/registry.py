"""The rewards registry: the built-in text rewards (`BUILTINS`, GRPO) and image/video rewards (`MEDIA_BUILTINS`,
diffusion RL and the reward service), the checks of a `[rewards]` table's names and parameters, and the builders
that turn a job's `RewardSpec`s into checked reward functions.

- `build_rewards`: TRL reward functions (built-ins, `module:function`, `remote:<name>`), each a `CheckedReward`
  that stops the run with a `RewardError` naming the reward and the completion when it raises or returns NaN.
- `build_media_rewards`: `MediaReward`s, called as `reward(media, prompts, metadata)`, checked alike.
- `check_reward`, `check_reward_name`, `check_reward_table`: one-line ValueErrors, for the job schemas.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import suggest
from ..config.rewards import RewardSpec, RewardTable, entry_parameters
from ..errors import RewardError, first_line
from ..references import BadReferenceError, is_reference, load_reference
from . import media as _media
from .cosmos_reason1 import cosmos_reason1 as _cosmos_reason1
from .cosmos_reason1 import preload as _preload_cosmos_reason1
from .gen_eval import gen_eval as _gen_eval
from .gen_eval import preload as _preload_gen_eval
from .ocr import load_engine as _load_ocr_engine
from .ocr import ocr as _ocr
from .remote import RemoteMediaReward, RemoteRewardClient, RemoteRewardError, RemoteTextReward
from .scorers import SCORERS as _SCORERS
from .scorers import preload as _preload_scorer
from .text import (
    REFERENCE_COLUMN,
    completion_text,
    conversational,
    exact_match_reward,
    format_reward,
    length_reward,
    single_choice_reward,
)


@dataclass(frozen=True)
class Builtin:
    make: Callable[..., Callable]  # parameters -> reward function
    reads: str  # what it reads besides the completion, for docs and errors
    summary: str
    requires: str | None = None  # an optional package it needs ("math-verify")
    defaults_from_train: dict[str, str] = field(default_factory=dict)  # parameter -> [train] key
    positive: tuple[str, ...] = ()  # parameters that must be > 0
    load: Callable[..., None] | None = None  # parameters -> None: loads models once at build time, or raises


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


def _media_partial(function: Callable) -> Callable[..., Callable]:
    """A media reward's maker: its parameters (after media, prompts, metadata) are the job's."""

    def make(**parameters: Any) -> Callable:
        return functools.partial(function, **parameters) if parameters else function

    own = list(inspect.signature(function).parameters.values())[3:]
    make.__signature__ = inspect.Signature([p.replace(kind=p.KEYWORD_ONLY) for p in own])  # type: ignore[attr-defined]
    return make


def _load_ocr(engine: Any = "rapidocr", **_: Any) -> None:
    if isinstance(engine, str):
        _load_ocr_engine(engine)


MEDIA_BUILTINS: dict[str, Builtin] = {
    "jpeg_compressibility": Builtin(
        _media_partial(_media.jpeg_compressibility), "-", "minus the JPEG size in kB (DDPO)"
    ),
    "jpeg_incompressibility": Builtin(
        _media_partial(_media.jpeg_incompressibility), "-", "the JPEG size in kB (DDPO)"
    ),
    "brightness": Builtin(_media_partial(_media.brightness), "-", "mean pixel value in [0, 1]"),
    "color_target": Builtin(
        _media_partial(_media.color_target), "-", "1 minus the mean RGB distance to target, in [0, 1]"
    ),
    "ocr": Builtin(
        _media_partial(_ocr),
        "prompt (its quoted text) or metadata text",
        "1 - normalised edit distance of the text read to the text quoted in the prompt",
        "rapidocr-onnxruntime",
        load=_load_ocr,
    ),
    "gen_eval": Builtin(
        _media_partial(_gen_eval),
        "metadata (GenEval records: tag, include)",
        "GenEval as the reference service scores it: Mask2Former detections, CLIP colours (score, reward, strict, group)",
        load=_preload_gen_eval,
    ),
    "cosmos_reason1": Builtin(
        _media_partial(_cosmos_reason1),
        "prompt (or question); metadata video_fps",
        "Cosmos-Reason1 video critic: the probability of no physical anomaly (no_score), as the reference service",
        load=_preload_cosmos_reason1,
    ),
    **{
        name: Builtin(
            _media_partial(function),
            "prompt" if name != "aesthetic" else "-",
            (function.__doc__ or "").strip().splitlines()[0],
            load=functools.partial(_preload_scorer, name),
        )
        for name, function in _SCORERS.items()
    },
}


def _registry(name: str) -> dict[str, Builtin]:
    return MEDIA_BUILTINS if name in MEDIA_BUILTINS else BUILTINS


def _signature(builtin: Builtin) -> inspect.Signature:
    make = builtin.make
    return make.signature() if hasattr(make, "signature") else inspect.signature(make)


def check_reward(name: str, parameters: dict[str, Any] | None = None, *, media: bool = False) -> None:
    """Raise ValueError (one line) unless `name` is a built-in, `module:function` or `remote:<name>`, and
    a built-in's `parameters` are ones it takes. `media`: the rewards score images or videos, not text."""
    check_reward_name(name, media=media)
    if name.startswith("remote:"):
        remote_score_key(name, parameters or {})
    elif name in (MEDIA_BUILTINS if media else BUILTINS) and parameters:
        _check_parameters(name, parameters)


def remote_score_key(name: str, parameters: dict[str, Any]) -> str | None:
    """A remote reward's `score_key` (the key of the service's answer to read; "a+b" sums two), its only
    parameter besides the weight; None reads the key named as the reward. ValueError (one line) otherwise."""
    unknown = sorted(set(parameters) - {"score_key"})
    if unknown:
        raise ValueError(f"{name}: remote rewards take weight and score_key only, not {', '.join(unknown)}")
    key = parameters.get("score_key")
    if key is not None and (not isinstance(key, str) or not all(part.strip() for part in key.split("+"))):
        raise ValueError(
            f"{name}: score_key must name a key of the service's answer (e.g. 'ocr_reward'), or 'a+b' for a sum"
        )
    return key


def _check_parameters(name: str, parameters: dict[str, Any]) -> inspect.Signature:
    signature = _signature(_registry(name)[name])
    for key in parameters:
        if key not in signature.parameters:
            known = ", ".join(p for p in signature.parameters if p != "kwargs") or "none"
            raise ValueError(f"{name}: unknown parameter '{key}' (it takes: {known})")
    for key in _registry(name)[name].positive:
        value = parameters.get(key)
        if value is not None and (not isinstance(value, numbers.Real) or value <= 0):
            raise ValueError(f"{name}: {key} must be a positive number (got {value!r})")
    return signature


def check_reward_name(name: str, *, media: bool = False) -> None:
    """Raise ValueError (one line) unless `name` is a built-in (of text rewards, or of image/video ones when
    `media`), `module:function` or `remote:<name>`."""
    if name.startswith("remote:"):
        if not name.removeprefix("remote:"):
            raise ValueError("'remote:' needs the service's reward name, e.g. 'remote:pickscore'")
        return
    if ":" in name:
        if not is_reference(name):
            raise ValueError(f"'{name}' is not 'package.module:function'")
        return
    if media:
        if name in BUILTINS:
            raise ValueError(f"'{name}' scores text completions, not images or videos")
        if name not in MEDIA_BUILTINS:
            raise ValueError(
                f"unknown reward '{name}'{suggest(name, list(MEDIA_BUILTINS))}; "
                f"image/video built-ins are {', '.join(MEDIA_BUILTINS)} "
                "(or use 'package.module:function' or 'remote:<name>')"
            )
        return
    if name in MEDIA_BUILTINS:
        raise ValueError(
            f"'{name}' scores images or videos (diffusion RL, reward-serve), not text completions; "
            f"text built-ins are {', '.join(BUILTINS)}"
        )
    if name not in BUILTINS:
        raise ValueError(
            f"unknown reward '{name}'{suggest(name, list(BUILTINS))}; built-ins are {', '.join(BUILTINS)} "
            "(or use 'package.module:function' or 'remote:<name>')"
        )


def check_reward_table(table: RewardTable, *, media: bool = False) -> RewardTable:
    """A job's `[rewards]` table, each name and parameters checked (`check_reward`); for pydantic validators."""
    for name, entry in table.items():
        check_reward(name, entry_parameters(entry), media=media)
    return table


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
            score_key = _score_key(spec)
            client = client or _reachable_client()
            function = RemoteTextReward(spec.name.removeprefix("remote:"), client, score_key)
        elif ":" in spec.name:
            function = _import_reward(spec, search_path)
        else:
            if spec.name in MEDIA_BUILTINS:
                raise RewardError(
                    f"[rewards] '{spec.name}' scores images or videos, not text completions (see MEDIA_BUILTINS)"
                )
            function = _make_builtin(spec, train or {})
        rewards.append(checked(spec.name, function))
    return rewards


def build_media_rewards(
    specs: list[RewardSpec],
    client: RemoteRewardClient | None = None,
    search_path: str | Path | None = None,
) -> list[MediaReward]:
    """Image/video rewards for `specs`, in order, each a checked `MediaReward`.

    Built-ins load their models (scorers, OCR engine) here, once per process, so a bad path or a missing
    package fails before any training; `remote:<name>` uses `client` (from the environment when None, checked
    reachable); `module:function` is imported as in `build_rewards`.
    """
    rewards: list[MediaReward] = []
    for spec in specs:
        if spec.name.startswith("remote:"):
            score_key = _score_key(spec)
            client = client or _reachable_client()
            function: Callable = RemoteMediaReward(spec.name.removeprefix("remote:"), client, score_key)
        elif ":" in spec.name:
            function = _import_reward(spec, search_path)
        else:
            try:
                check_reward(spec.name, spec.parameters, media=True)
            except ValueError as error:
                raise RewardError(f"[rewards] {error}") from None
            builtin = MEDIA_BUILTINS[spec.name]
            try:
                _signature(builtin).bind(**spec.parameters)
                if builtin.load is not None:
                    builtin.load(**spec.parameters)
            except Exception as error:  # a missing engine, a bad model path, a wrong type: one line
                raise RewardError(f"[rewards] {spec.name}: {first_line(error)}") from None
            function = builtin.make(**spec.parameters)
        rewards.append(MediaReward(spec.name, spec.weight, function))
    return rewards


def _reachable_client() -> RemoteRewardClient:
    """The `REMOTE_REWARD_*` client, checked reachable, so a service that is down fails before any model loads."""
    client = RemoteRewardClient.from_env()
    client.check_reachable()
    return client


def _score_key(spec: RewardSpec) -> str | None:
    try:
        return remote_score_key(spec.name, spec.parameters)
    except ValueError as error:
        raise RewardError(f"[rewards] {error}") from None


class MediaReward:
    """An image/video reward, `reward(media, prompts, metadata=None) -> list[float]`, that raises RewardError
    (one line, naming itself) when its function raises or returns anything but one finite number per sample.

    A function may also return a dict of named scores, as the reference service's rewards answer several keys
    (`gen_eval_score`, `gen_eval_strict`, ...): its first key is the score trainers use; `scores()` returns them
    all, under the reward's name and their own keys (what the reward service answers)."""

    def __init__(self, name: str, weight: float, function: Callable):
        self.__name__, self.name, self.weight, self.function = name, name, weight, function

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict] | None = None) -> list[float]:
        return self.scores(media, prompts, metadata)[self.name]

    def scores(self, media: Any, prompts: list[str], metadata: list[dict] | None = None) -> dict[str, Any]:
        return self._checked(lambda: self.function(media, prompts, metadata), len(media))

    def submit(
        self, media: Any, prompts: list[str], metadata: list[dict] | None = None
    ) -> Callable[[], dict[str, Any]]:
        """Start scoring `media`; calling the result gives what `scores` gives. A remote reward (a function with
        `submit` / `fetch`) enqueues the batch now and fetches it in that call, so the service scores while the
        caller goes on (a trainer decodes its next part); a local one scores in that call."""
        start = getattr(self.function, "submit", None)
        if start is None:
            return lambda: self.scores(media, prompts, metadata)
        pending = self._checked(lambda: start(media, prompts, metadata), None)
        return lambda: self._checked(lambda: self.function.fetch(pending), len(media))

    def _checked(self, call: Callable[[], Any], size: int | None) -> Any:
        """`call()`'s scores, its failures as one-line RewardErrors; with `size`, checked to be one finite number
        per sample (None: `call` only starts the work)."""
        try:
            values = call()
        except RewardError:
            raise
        except RemoteRewardError as error:
            raise RewardError(f"reward '{self.name}': {error}") from error
        except Exception as error:
            raise RewardError(
                f"reward '{self.name}' raised {type(error).__name__}: {first_line(error)}"
            ) from error
        if size is None:
            return values
        named: dict[str, Any] = {}
        if isinstance(values, dict):
            if not values:
                raise RewardError(f"reward '{self.name}' returned an empty dict of scores")
            named, values = values, next(iter(values.values()))
        if not isinstance(values, list | tuple) or len(values) != size:
            got = f"{len(values)} values" if isinstance(values, list | tuple) else type(values).__name__
            raise RewardError(f"reward '{self.name}' returned {got} for a batch of {size}")
        for index, value in enumerate(values):
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise RewardError(f"reward '{self.name}' returned {value!r} for sample {index}")
        return {self.name: [float(value) for value in values], **named}


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
    try:
        function = load_reference(spec.name, search_path)
    except BadReferenceError as error:
        raise RewardError(f"[rewards] {spec.name}: {error}") from None
    if not callable(function):
        raise RewardError(f"[rewards] {spec.name}: is a {type(function).__name__}, not a function")
    # functools.partial keeps an async function recognisably async for TRL.
    return functools.partial(function, **spec.parameters) if spec.parameters else function


# --- failures stop the run, naming the reward and the completion ------------------------------------------


def _check(name: str, values: Any, completions: list) -> list:
    if not isinstance(values, list | tuple):
        raise RewardError(f"reward '{name}' returned {type(values).__name__}, expected a list of floats")
    if len(values) != len(completions):
        raise RewardError(
            f"reward '{name}' returned {len(values)} values for {len(completions)} completions (one per completion)"
        )
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
