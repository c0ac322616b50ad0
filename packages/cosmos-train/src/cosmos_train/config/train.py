"""`[train]`: a TRL / transformers config dataclass as a strict section (`trainer_section`), and the config built
from it (`build_training_arguments`): its field names verbatim, each value checked against the field's annotation
and a sensible range."""

from __future__ import annotations

import dataclasses
import enum
import logging
import typing
import warnings
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, create_model

from ..errors import ConfigError, first_line
from .sections import JobPath, Section

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------
# [train]: a TRL / transformers config dataclass as a strict section

_POSITIVE = Field(gt=0)
_NON_NEGATIVE = Field(ge=0)
_PROBABILITY = Field(ge=0, le=1)


def _steps_or_unset(value: int) -> int:
    if value != -1 and value <= 0:
        raise ValueError("must be a positive number of steps (or -1 to train by epochs)")
    return value


# Ranges for TrainingArguments fields (and those TRL configs add) that their annotations cannot say.
TRAINING_RANGES: dict[str, Any] = {
    # Above 1 is never meant (learning-rate-free optimizers such as Prodigy use 1.0).
    "learning_rate": Field(ge=0, le=1),
    "weight_decay": Field(ge=0, le=1),
    "max_grad_norm": _NON_NEGATIVE,
    "adam_beta1": Field(ge=0, lt=1),
    "adam_beta2": Field(ge=0, lt=1),
    "adam_epsilon": _POSITIVE,
    "num_train_epochs": _POSITIVE,
    "max_steps": AfterValidator(_steps_or_unset),
    "warmup_steps": _NON_NEGATIVE,
    "warmup_ratio": _PROBABILITY,
    "per_device_train_batch_size": _POSITIVE,
    "per_device_eval_batch_size": _POSITIVE,
    "gradient_accumulation_steps": _POSITIVE,
    "logging_steps": _POSITIVE,
    "save_steps": _POSITIVE,
    "eval_steps": _POSITIVE,
    "save_total_limit": _POSITIVE,
    "seed": _NON_NEGATIVE,
    "data_seed": _NON_NEGATIVE,
    "dataloader_num_workers": _NON_NEGATIVE,
    "max_length": _POSITIVE,
    "num_generations": Field(ge=2),
    "max_completion_length": _POSITIVE,
    "beta": _NON_NEGATIVE,
    "epsilon": _NON_NEGATIVE,
    "epsilon_high": _NON_NEGATIVE,
    "temperature": _POSITIVE,
    "top_p": Field(gt=0, le=1),
    "steps_per_generation": _POSITIVE,
}


def _report_to(value: str | list[str] | None) -> str | list[str] | None:
    """Known tracker names only, and installed ones: a typo would otherwise surface after the model loads."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    names = [value] if isinstance(value, str) else list(value or [])
    known = sorted(INTEGRATION_TO_CALLBACK)
    for name in names:
        if name in ("all", "none"):
            continue
        if name not in known:
            raise ValueError(f"unknown tracker '{name}'; expected none, all or one of {', '.join(known)}")
        if name not in get_available_reporting_integrations():
            raise ValueError(f"tracker '{name}' is not installed (pip install {name})")
    return value


def trainer_section(
    config_class: type,
    *,
    name: str,
    overrides: dict[str, tuple[Any, Any]] | None = None,
    paths: tuple[str, ...] = ("output_dir", "logging_dir"),
) -> type[Section]:
    """A strict `[train]` section whose keys are `config_class`'s init fields.

    Every field is optional (absent means the dataclass's own default) and validated strictly against its
    annotation, its `choices` metadata and `TRAINING_RANGES`. `overrides` replaces `(annotation, default)`
    for fields the job treats differently; `paths` are resolved against the job file.
    """
    hints = typing.get_type_hints(config_class)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):
        if not field.init:
            continue
        annotation = hints[field.name]
        choices = field.metadata.get("choices") or _enum_values(annotation)
        if choices:
            annotation = (
                Literal[tuple(choices)] | None if _admits_none(annotation) else Literal[tuple(choices)]
            )
        extras = [TRAINING_RANGES[field.name]] if field.name in TRAINING_RANGES else []
        if field.name == "report_to":
            extras.append(AfterValidator(_report_to))
        if field.name in paths:
            extras.append(JobPath())
        default: Any = None
        if overrides and field.name in overrides:
            annotation, default = overrides[field.name]
        if extras:
            annotation = Annotated[annotation, *extras]
        fields[field.name] = (annotation, default)
    section = create_model(
        name, __base__=Section, __doc__=f"`[train]`: {config_class.__name__}'s fields.", **fields
    )
    section.config_class = config_class  # for the job-file reference
    return section


def _enum_values(annotation: Any) -> list[str]:
    """The values of an `Enum | str` field (transformers' strategies, schedulers, optimizers)."""
    members = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, enum.Enum)]
    return [member.value for member in members[0]] if members else []


def _admits_none(annotation: Any) -> bool:
    return annotation is type(None) or type(None) in typing.get_args(annotation)


def build_training_arguments(
    config_class: type,
    train: Section,
    source: str,
    forced: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
    exclude: tuple[str, ...] = (),
):
    """Instantiate `config_class` from a validated `[train]` section.

    `forced` are values the job sets from its other sections: `[train]` may not contradict them.
    `defaults` are cosmos-train's own defaults, which `[train]` may change. `exclude` are `[train]` keys
    the trainer handles itself.
    """
    given = {key: value for key, value in train.model_dump(exclude_unset=True).items() if key not in exclude}
    for key, value in (forced or {}).items():
        if key in given and given[key] != value:
            raise ConfigError(
                f"{source}: [train] {key} is set by the job ({value!r}) from another section; remove it from [train]"
            )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            arguments = config_class(**{**(defaults or {}), **given, **(forced or {})})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: [train] {first_line(error)}") from None
    # Deprecations of the dataclass's own defaults are not the user's business; those of their keys are.
    for warning in caught:
        if any(f"`{key}`" in str(warning.message) for key in given):
            logger.warning("%s: [train] %s", source, warning.message)
    return arguments
