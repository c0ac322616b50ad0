"""Strict TOML job configs, validated by pydantic and shared by every trainer.

A job file has the sections `[model]`, `[lora]` (absent: full fine-tuning), `[data]`, `[train]` and
`[launch]`. `[train]` takes the trainer's own TRL config fields verbatim (`SFTConfig` for `sft`),
checked against that dataclass. Any mistake becomes a `ConfigError` whose message is one line
naming the file, section and key, with a "did you mean" for near misses.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ConfigError(ValueError):
    """A job config is invalid; the message is a single line meant for the user."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(Section):
    name_or_path: str = Field(description="Hub id or local folder, in any Cosmos3 checkpoint layout.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: (
        Literal["eager", "sdpa", "segment_sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
        | None
    ) = None
    freeze: list[str] = Field(
        default_factory=list,
        description="Regexes of parameter names to freeze, e.g. 'visual' for the vision tower.",
    )
    trust_remote_code: bool = False


class LoraSection(Section):
    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    exclude_modules: list[str] | None = Field(
        default=None,
        description="Regexes of modules to leave without adapters (defaults to the vision tower).",
    )


class DataSection(Section):
    format: Literal["llava", "jsonl", "hf"]
    path: str = Field(description="JSON/JSONL file, a saved datasets folder, or a hub dataset name.")
    media_dir: str | None = Field(default=None, description="Folder that image/video paths are relative to.")
    split: str = "train"
    system_prompt: str | None = None
    fps: float = Field(2.0, gt=0, description="Frames per second sampled from videos.")
    max_frames: int = Field(16, gt=0, description="Cap on frames per video.")
    max_length: int | None = Field(default=2048, gt=0)
    packing: bool = Field(False, description="Padding-free packing (text-only data).")
    skip_bad: bool = Field(False, description="Skip and count bad records instead of failing.")


class LaunchSection(Section):
    backend: Literal["ddp", "zero2", "zero3", "fsdp"] = "ddp"


class JobConfig(Section):
    model: ModelSection
    lora: LoraSection | None = None
    data: DataSection
    train: dict[str, Any] = Field(default_factory=dict)
    launch: LaunchSection = LaunchSection()

    @field_validator("train")
    @classmethod
    def _train_is_a_table(cls, value: dict[str, Any]) -> dict[str, Any]:
        return dict(value)


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    close = close or [k for k in known if key.startswith(k) or k.startswith(key)][:1]  # rank -> r
    return f" (did you mean '{close[0]}'?)" if close else ""


def _error_location(loc: tuple) -> tuple[str, str]:
    parts = [str(p) for p in loc]
    section = parts[0] if parts else "?"
    key = ".".join(parts[1:]) if len(parts) > 1 else parts[0] if parts else "?"
    return section, key


def _pydantic_error(error: ValidationError, source: str) -> ConfigError:
    first = error.errors()[0]
    section, key = _error_location(first["loc"])
    if first["type"] == "extra_forbidden":
        if len(first["loc"]) == 1:
            known = list(JobConfig.model_fields)
            return ConfigError(f"{source}: unknown section [{section}]{_suggest(section, known)}")
        model = JobConfig.model_fields[section].annotation
        model = next(m for m in getattr(model, "__args__", (model,)) if isinstance(m, type))
        return ConfigError(
            f"{source}: [{section}] unknown key '{key}'{_suggest(key, list(model.model_fields))}"
        )
    if first["type"] == "missing":
        where = (
            f"[{section}] missing key '{key}'" if len(first["loc"]) > 1 else f"missing section [{section}]"
        )
        return ConfigError(f"{source}: {where}")
    return ConfigError(f"{source}: [{section}] {key}: {first['msg']} (got {first.get('input')!r})")


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` with a TOML value (bare words are taken as strings)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted, raw = text.split("=", 1)
    path = [part.strip() for part in dotted.strip().split(".")]
    if len(path) < 2 or not all(path):
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


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None


def load_job_config(path: str | Path, overrides: list[str] | None = None) -> JobConfig:
    path = Path(path)
    data = apply_overrides(read_toml(path), overrides or [])
    try:
        return JobConfig.model_validate(data)
    except ValidationError as error:
        raise _pydantic_error(error, str(path)) from None


def build_trl_config(config_class: type, train: dict[str, Any], source: str, **forced: Any):
    """Instantiate a TRL config dataclass from `[train]`, rejecting what is not one of its fields.

    `forced` are the values the job sets itself (from other sections); `[train]` may not contradict them.
    """
    fields = {f.name for f in dataclasses.fields(config_class) if f.init}
    for key in train:
        if key not in fields:
            raise ConfigError(f"{source}: [train] unknown key '{key}'{_suggest(key, sorted(fields))}")
    for key, value in forced.items():
        if key in train and train[key] != value:
            raise ConfigError(
                f"{source}: [train] {key} is set by the job ({value!r}); remove it from [train]"
            )
    if "output_dir" not in train:
        raise ConfigError(f"{source}: [train] missing key 'output_dir'")
    try:
        return config_class(**train, **forced)
    except (TypeError, ValueError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"{source}: [train] {message}") from None
