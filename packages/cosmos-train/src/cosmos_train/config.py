"""Strict TOML job files, shared by every trainer: reading, `--set` overrides, paths, one-line errors.

Each trainer declares its schema beside its TRL config, in `trainers/<kind>_config.py`, as a subclass of
`JobSchema`; the registry of job kinds (`kinds.py`) names them. The sections shared by several trainers
(`[model]`, `[lora]`, `[launch]`, the data sections) live here, and so does `trainer_section`, which turns a TRL
or transformers config dataclass into a strict `[train]` section: its field names verbatim, each value checked
against the field's annotation and a sensible range.

Every mistake becomes a `ConfigError` whose message is one line naming the file, section and key,
with a "did you mean" for near misses. Path fields carry a `JobPath` marker: a relative value is
relative to the job file's folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import re
import tomllib
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from .errors import first_line

logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A job config is invalid; the message is a single line meant for the user."""


@dataclass(frozen=True)
class JobPath:
    """Marks a string field as a path: a relative value is relative to the job file's folder.

    With `hub_id` the value may also be a Hugging Face hub id: it is resolved only when that path
    exists beside the job file, and kept as written otherwise.
    """

    hub_id: bool = False


class Section(BaseModel):
    # strict: TOML values are typed, so "yes" is not a bool and "10" is not a number.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelSection(Section):
    """`[model]`: the model to train, a transformers model (an LM or VLM)."""

    name_or_path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="Hub id or local folder, in any Cosmos3 checkpoint layout."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype when loading ('auto': the checkpoint's)."
    )
    attn_implementation: (
        Literal["eager", "sdpa", "segment_sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
        | None
    ) = Field(None, description="transformers' attention kernel (default: sdpa; packing: segment_sdpa).")
    freeze: list[str] = Field(
        default_factory=list,
        description="Regexes of parameter names to freeze; 'vision' means the vision tower.",
    )
    trust_remote_code: bool = Field(
        False, description="Run model code the checkpoint ships (transformers' option)."
    )

    @field_validator("freeze")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"{pattern!r} is not a valid regex ({error})") from None
        return patterns

    def check_source(self, key: str, base: Path | None = None) -> None:
        """The model exists as a transformers model (its `config.json`, not its weights)."""
        from .model_sources import model_file

        model_file(self.name_or_path, "config.json", f"{key} name_or_path", "a transformers model", base)


class PipelineSection(Section):
    """`[model]`: the diffusers pipeline whose transformer is trained."""

    name_or_path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="A diffusers pipeline: hub id or local folder with model_index.json."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights of the frozen parts (VAE, text encoders); the transformer trains in float32.",
    )
    adapter: str | None = Field(
        None,
        description="The model family's adapter as 'package.module:Class' (default: the one for the pipeline's "
        "class).",
    )
    trust_remote_code: bool = Field(
        False, description="Load components whose code ships in the pipeline's folders (diffusers' option)."
    )

    def check_source(self, key: str, base: Path | None = None) -> None:
        """The model exists as a diffusers pipeline that an adapter supports (its `model_index.json` only)."""
        self.adapter_class(key, base)

    def adapter_class(self, key: str = "[model]", base: Path | None = None) -> type:
        """The adapter class for this pipeline, from its `model_index.json` (no weights are read)."""
        from .diffusion.adapter import adapter_class_for
        from .model_sources import SourceError, custom_code_files, model_file, read_json

        where = f"{key} name_or_path"
        index_file = model_file(self.name_or_path, "model_index.json", where, "a diffusers pipeline", base)
        index = read_json(index_file, where)
        if "_class_name" not in index:
            raise SourceError(f"{where}: {index_file} names no pipeline class (_class_name)")
        custom = custom_code_files(index_file.parent, index)
        if custom and not self.trust_remote_code:
            raise SourceError(
                f"{where} {self.name_or_path} ships code of its own ({', '.join(custom)}): "
                f"set {key} trust_remote_code = true if you trust it"
            )
        return adapter_class_for(index["_class_name"], self.adapter)


class LoraSection(Section):
    """`[lora]`: a PEFT LoRA; only the adapters train. Absent: full fine-tuning."""

    r: int = Field(16, gt=0, description="The adapters' rank.")
    alpha: int = Field(32, gt=0, description="Scale numerator: the update is (alpha / r) B A.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input.")
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        default=None,
        description="Default: all-linear for LMs and VLMs, the family's attention projections for diffusion.",
    )
    exclude_modules: list[str] | None = Field(
        default=None,
        description="Regexes of modules to leave without adapters (defaults to the vision tower).",
    )


class MediaData(Section):
    """`[data]` fields every trainer on LLaVA JSON / JSONL / `datasets` data shares; trainers subclass it."""

    format: Literal["llava", "jsonl", "hf"] = Field(
        description="LLaVA JSON, typed-message JSONL, or a `datasets` source."
    )
    path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="JSON/JSONL file, a saved datasets folder, or a hub dataset name."
    )
    media_dir: Annotated[str | None, JobPath()] = Field(
        default=None, description="Folder that image/video paths are relative to."
    )
    split: str = Field("train", description="hf: the dataset split.")
    system_prompt: str | None = Field(None, description="A system turn put before every conversation.")
    fps: float = Field(2.0, gt=0, description="Frames per second sampled from videos.")
    max_frames: int = Field(16, gt=0, description="Cap on frames per video.")
    skip_bad: bool = Field(False, description="Skip and count bad records instead of failing.")

    @model_validator(mode="after")
    def _local_files_exist(self):
        if self.format != "hf" and not Path(self.path).is_file():
            raise ValueError(f"path {self.path} does not exist")
        if self.media_dir is not None and not Path(self.media_dir).is_dir():
            raise ValueError(f"media_dir {self.media_dir} does not exist")
        return self


class PairData(Section):
    """`[data]` for diffusion training: images or videos paired with captions.

    `format = "auto"` recognises a Cosmos-Predict2.5 dataset (`videos/` + `metas/` folders), a folder of
    pairs sharing a basename (`0001.json` + `0001.jpg|png|mp4`), or else a `datasets` source.
    """

    path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="A folder of pairs, a Cosmos-Predict2.5 dataset folder, or a datasets folder / hub name."
    )
    format: Literal["auto", "folder", "cosmos_predict", "hf"] = Field(
        "auto", description="How `path` is read; auto: by looking at it."
    )
    split: str = Field("train", description="hf: the dataset split.")
    image_column: str = Field("image", description="hf: the image column.")
    video_column: str | None = Field(
        None, description="hf: the video column (file paths or a datasets Video feature), for video data."
    )
    caption_column: str = Field("text", description="hf: the caption column.")
    height: int = Field(gt=0, description="Training height: media are resized and centre-cropped to it.")
    width: int = Field(gt=0, description="Training width.")
    num_frames: int | None = Field(None, gt=0, description="Videos: a random window of this many frames.")
    cache: bool = Field(
        False,
        description="Cache latents and text embeddings as safetensors; fixes each video's frame window and "
        "each item's VAE latent sample.",
    )
    cache_dir: Annotated[str | None, JobPath()] = Field(
        None, description="Where the cache lives (default: output_dir/cache)."
    )
    skip_bad: bool = Field(False, description="Skip and count bad pairs instead of failing.")

    @model_validator(mode="after")
    def _local_path_exists(self):
        if self.format in ("folder", "cosmos_predict") and not Path(self.path).is_dir():
            raise ValueError(f"path {self.path} is not a folder")
        return self


class PromptListData(Section):
    """`[data]` for diffusion RL: a prompt list (`cosmos_train.data.prompt_lists`).

    `path` alone is enough: `.txt` is one prompt per line, `*_metadata.jsonl` is GenEval, another `.jsonl` holds
    `{"prompt", ...metadata}` records; a folder is resolved by `split` (`train.txt`, `train_metadata.jsonl`, ...).
    """

    path: Annotated[str, JobPath()] = Field(
        description="A prompt file, or a folder holding {split}.txt / {split}_metadata.jsonl / {split}.jsonl."
    )
    format: Literal["auto", "txt", "geneval", "jsonl"] = Field(
        "auto", description="txt: a prompt a line; geneval: {split}_metadata.jsonl; auto: from the file name."
    )
    split: str = Field("train", min_length=1, description="For a folder: which split's file to read.")
    max_prompts: int | None = Field(None, gt=0, description="Use only the first this many prompts.")
    skip_bad: bool = Field(False, description="Skip and count bad lines instead of failing.")

    @model_validator(mode="after")
    def _source_resolves(self):
        from cosmos_train.data.prompt_lists import DataError, resolve_prompt_source

        try:
            resolve_prompt_source(self.path, self.format, self.split)
        except DataError as error:
            raise ValueError(str(error)) from None
        return self


class LaunchSection(Section):
    """`[launch]`: how the processes share the work."""

    backend: Literal["ddp", "zero2", "zero3", "fsdp"] = Field(
        "ddp",
        description="DDP, DeepSpeed ZeRO-2 / ZeRO-3 or FSDP2, with the configs shipped in cosmos_train/launch/.",
    )


class JobSchema(Section):
    """The top level of a job file. Trainers subclass it with their sections."""

    # Each trainer adds its sections, ending with `train`: its config dataclass (`trainer_section`).
    kind: str | None = Field(
        None,
        description="The trainer that runs the job (its command's name); needed only by validate-config.",
    )
    launch: LaunchSection = LaunchSection()

    # cosmos-train's defaults for this kind's `[train]` keys where they differ from its config class's (a job's
    # `[train]` may change them): the reference implementations' optimizer settings.
    train_defaults: ClassVar[dict[str, Any]] = {}

    def training_arguments(self, source: str) -> Any:
        """The trainer's TRL / transformers config for this job (raises `ConfigError`)."""
        raise NotImplementedError

    def check_sources(self, source: str, base: Path) -> None:
        """What the job names outside its file, checked before anything loads (every command does): each
        section's model (`check_source`: its folder or hub id, never its weights) and the `module:function`
        rewards, which must import (from `sys.path` or `base`, the job file's folder)."""
        from .model_sources import SourceError
        from .references import BadReferenceError, is_reference, load_reference

        try:
            for name in type(self).model_fields:
                check = getattr(getattr(self, name), "check_source", None)
                if callable(check):
                    check(f"[{name}]", base)
        except (SourceError, ConfigError) as error:
            raise ConfigError(f"{source}: {error}") from None
        for reward in getattr(self, "rewards", None) or {}:
            if not reward.startswith("remote:") and is_reference(reward):
                try:
                    function = load_reference(reward, base)
                except BadReferenceError as error:
                    raise ConfigError(f"{source}: [rewards] {reward}: {error}") from None
                if not callable(function):
                    raise ConfigError(
                        f"{source}: [rewards] {reward} is a {type(function).__name__}, not a function"
                    )

    def check_data(self, source: str) -> None:
        """Read and validate the job's data as its trainer will (records, media files), loading no model:
        `validate-config` runs it. Raises a one-line `DataError` or `ConfigError`."""


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


# ---------------------------------------------------------------------------------------------------
# Reading, overrides, paths


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a job file (TOML)") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ConfigError(f"{path}: cannot read the job file ({reason})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # Show the offending line: tomllib's message gives its number, not its key.
        found = re.search(r"at line (\d+)", str(error))
        lines = text.splitlines()
        line = lines[int(found.group(1)) - 1].strip() if found and int(found.group(1)) <= len(lines) else ""
        shown = f" in '{line[:80]}'" if line else ""
        raise ConfigError(f"{path}: invalid TOML{shown}: {error}") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` with a TOML value (bare words are taken as strings)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted, raw = text.split("=", 1)
    path = [part.strip() for part in dotted.strip().split(".")]
    if not all(path) or (len(path) < 2 and path != ["kind"]):
        raise ConfigError(f"--set {text!r}: the key must be section.key")
    try:
        value = tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for override in overrides:
        path, value = parse_override(override)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {override!r}: '{part}' is not a section")
        node[path[-1]] = value
    return data


def _section_model(schema: type[BaseModel], section: str) -> type[BaseModel] | None:
    field = schema.model_fields.get(section)
    if field is None:
        return None
    candidates = typing.get_args(field.annotation) or (field.annotation,)
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _path_marker(field) -> JobPath | None:
    return next((m for m in field.metadata if isinstance(m, JobPath)), None)


def resolve_paths(data: dict[str, Any], schema: type[JobSchema], base: Path) -> dict[str, Any]:
    """Make the relative values of `JobPath` fields absolute against `base` (the job file's folder)."""
    resolved = dict(data)
    for section, values in data.items():
        model = _section_model(schema, section)
        if model is None or not isinstance(values, dict):
            continue  # validation reports it
        values = dict(values)
        for key, field in model.model_fields.items():
            marker, value = _path_marker(field), values.get(key)
            if marker is None or not isinstance(value, str) or not value or Path(value).is_absolute():
                continue
            candidate = base / value
            if marker.hub_id and not candidate.exists():
                continue  # a hub id, or a path relative to the working directory
            values[key] = str(candidate.resolve())
        resolved[section] = values
    return resolved


def validate_job(data: dict[str, Any], schema: type[JobSchema], source: str) -> JobSchema:
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise _one_line(error, schema, source) from None


def job_kind(data: dict[str, Any], source: str) -> str | None:
    """The job file's `kind` (None when it has none)."""
    kind = data.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise ConfigError(f"{source}: kind must be a string naming the trainer (got {kind!r})")
    return kind


# ---------------------------------------------------------------------------------------------------
# One-line errors


def suggest(key: str, known: list[str]) -> str:
    """A ' (did you mean ...?)' for the nearest known name, or ''."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    close = close or [k for k in known if key.startswith(k) or k.startswith(key)][:1]  # rank -> r
    return f" (did you mean '{close[0]}'?)" if close else ""


_TABLE_ERRORS = {"model_type", "model_attributes_type", "dict_type"}


def _one_line(error: ValidationError, schema: type[JobSchema], source: str) -> ConfigError:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    section = loc[0] if loc else "?"
    # Keep field names and list indices; drop the union-member tags pydantic adds ("list[str]", ...).
    model = _section_model(schema, section)
    key_parts = [p for p in loc[1:2]] + [p for p in loc[2:] if p.isdigit()]
    key = ".".join(key_parts)
    kind = first["type"]
    got = f" (got {first['input']!r})" if "input" in first and kind not in ("missing", "value_error") else ""
    message = first["msg"].removeprefix("Value error, ")

    if not loc:  # a check across sections (a job-level validator): its message names them
        return ConfigError(f"{source}: {message}")
    if len(loc) == 1 and section not in schema.model_fields:
        return ConfigError(
            f"{source}: unknown section [{section}]{suggest(section, list(schema.model_fields))}"
        )
    field = schema.model_fields.get(section)
    if model is None and field is not None and typing.get_origin(field.annotation) is dict:
        # A section that is a table of names (`[rewards]`): its keys are data, not fields.
        where = f" {key}:" if key else ""
        if kind == "missing":
            return ConfigError(f"{source}: missing section [{section}]")
        return ConfigError(f"{source}: [{section}]{where} {message}{got}")
    if len(loc) == 1 and model is None:  # a top-level key such as `kind`
        return ConfigError(f"{source}: {section}: {message}{got}")
    if len(loc) == 1 and kind == "missing":
        return ConfigError(f"{source}: missing section [{section}]")
    if len(loc) == 1 and kind == "value_error":  # a check across the section's keys; it names them
        return ConfigError(f"{source}: [{section}] {message}")
    if len(loc) == 1 and kind in _TABLE_ERRORS:
        return ConfigError(f"{source}: [{section}] must be a table of keys{got}")
    if kind == "extra_forbidden" and len(loc) == 2 and model is not None:
        return ConfigError(
            f"{source}: [{section}] unknown key '{key}'{suggest(key, list(model.model_fields))}"
        )
    if kind == "missing":
        return ConfigError(f"{source}: [{section}] missing key '{key}'")
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", first["ctx"]["expected"])
        if len(allowed) > 8:  # optimizers, schedulers, ...: a short line, with the nearest names
            message = f"expected one of {len(allowed)} names ({', '.join(allowed[:4])}, ...)"
        if isinstance(first["input"], str):
            got += suggest(first["input"], allowed)
    return ConfigError(f"{source}: [{section}] {key}: {message}{got}")
