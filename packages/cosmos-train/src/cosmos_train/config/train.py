"""`[train]`: a TRL / transformers config dataclass as a strict section (`trainer_section`), and the config built
from it (`build_training_arguments`): its field names verbatim, each value checked against the field's annotation
and a sensible range."""

from __future__ import annotations

import logging
import warnings
from typing import Annotated, Any

from pydantic import AfterValidator, Field, create_model

from ..errors import ConfigError, first_line
from .sections import JobPath, Section
from .trainer_fields import tracker_names, trainer_fields

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
    """Known tracker names only: a typo would otherwise surface after the model loads (whether each is installed is
    checked with the trainer config, where transformers is imported anyway)."""
    known = tracker_names()
    for name in _named_trackers(value):
        if name not in ("all", "none") and name not in known:
            raise ValueError(f"unknown tracker '{name}'; expected none, all or one of {', '.join(known)}")
    return value


def _named_trackers(value: str | list[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _check_trackers_installed(train: Section, source: str) -> None:
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    value = getattr(train, "report_to", None)
    for name in _named_trackers(value):
        if name not in ("all", "none") and name not in get_available_reporting_integrations():
            raise ConfigError(
                f"{source}: [train] report_to: tracker '{name}' is not installed (pip install {name})"
            )


def trainer_section(
    config_class: str | type,
    *,
    name: str,
    overrides: dict[str, tuple[Any, Any]] | None = None,
    paths: tuple[str, ...] = ("output_dir", "logging_dir"),
) -> type[Section]:
    """A strict `[train]` section whose keys are the init fields of `config_class`: a class, or a reference to one
    (`"trl:SFTConfig"`), which is read without importing it where the installed version's snapshot allows
    (`trainer_fields`).

    Every field is optional (absent means the dataclass's own default) and validated strictly against its
    annotation, its `choices` metadata and `TRAINING_RANGES`. `overrides` replaces `(annotation, default)`
    for fields the job treats differently; `paths` are resolved against the job file.
    """
    fields: dict[str, Any] = {}
    for field_name, annotation in trainer_fields(config_class):
        extras = [TRAINING_RANGES[field_name]] if field_name in TRAINING_RANGES else []
        if field_name == "report_to":
            extras.append(AfterValidator(_report_to))
        if field_name in paths:
            extras.append(JobPath())
        default: Any = None
        if overrides and field_name in overrides:
            annotation, default = overrides[field_name]
        if extras:
            annotation = Annotated[annotation, *extras]
        fields[field_name] = (annotation, default)
    if isinstance(config_class, str):
        module, _, class_name = config_class.partition(":")
    else:
        module, class_name = config_class.__module__, config_class.__name__
    section = create_model(name, __base__=Section, __doc__=f"`[train]`: {class_name}'s fields.", **fields)
    section.config_class = f"{module.split('.')[0]}.{class_name}"  # for the job-file reference
    return section


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
    _check_trackers_installed(train, source)
    # Deprecations of the dataclass's own defaults are not the user's business; those of their keys are.
    for warning in caught:
        if any(f"`{key}`" in str(warning.message) for key in given):
            logger.warning("%s: [train] %s", source, warning.message)
    return arguments
