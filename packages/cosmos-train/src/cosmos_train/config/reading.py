"""Reading a job file: TOML, `--set` overrides, paths made absolute, validation, and one-line errors naming the
file, section and key (with a "did you mean" for near misses)."""

from __future__ import annotations

import difflib
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .sections import JobPath, JobSchema

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


def section_model(schema: type[BaseModel], section: str) -> type[BaseModel] | None:
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
        model = section_model(schema, section)
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


def refuse_given_values(data: dict[str, Any], schema: type[JobSchema], source: str) -> None:
    """Raise the job's errors now when each is in a value it gives, or is a key or section it should not have:
    filling the keys it leaves out (family defaults, which need its model looked up: a download for a hub id, or a
    wait for retries offline) cannot change those."""
    try:
        schema.model_validate(data)
    except ValidationError as error:
        if all(_in_a_given_value(detail, data) for detail in error.errors()):
            raise _one_line(error, schema, source) from None


def _in_a_given_value(detail: dict[str, Any], data: dict[str, Any]) -> bool:
    loc, kind = detail["loc"], detail["type"]
    if kind == "extra_forbidden":
        return True
    if kind == "missing" or not loc or loc[0] not in data:
        return False
    if len(loc) == 1:  # the section itself: not a table (a check across its keys could change)
        return kind != "value_error"
    section = data[loc[0]]
    return isinstance(section, dict) and loc[1] in section


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


def _first_error(error: ValidationError, schema: type[JobSchema]) -> dict[str, Any]:
    """The error to report: the first, except that an unknown section goes before a missing one (`[trian]` is a
    misspelt `[train]`: its did-you-mean says more than "missing section [train]")."""
    errors = error.errors()
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    for candidate in errors:
        section = str(candidate["loc"][0]) if len(candidate["loc"]) == 1 else None
        if (
            missing
            and section is not None
            and section not in schema.model_fields
            and suggest(section, missing)
        ):
            return candidate
    return errors[0]


def _one_line(error: ValidationError, schema: type[JobSchema], source: str) -> ConfigError:
    first = _first_error(error, schema)
    loc = [str(part) for part in first["loc"]]
    section = loc[0] if loc else "?"
    # Keep field names and list indices; drop the union-member tags pydantic adds ("list[str]", ...).
    model = section_model(schema, section)
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
