"""The fields of the TRL / transformers config classes that `[train]` mirrors, known without importing them.

Importing `trl.SFTConfig` or `transformers.TrainingArguments` imports torch (about 4 s on a 2-core machine), and a
job file with `learning_rate = "fast"` should not wait that long to be refused. `trainer_fields.json` holds each
class's init fields with their annotations encoded as JSON, taken from the trl and transformers versions it names.
When those are the installed versions the snapshot is read; otherwise the class is imported and read, which gives
the same fields, only later. `test_trainer_fields.py` compares the snapshot with the installed classes; after
upgrading either library, regenerate it:

    uv run python scripts/update-trainer-fields.py
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import types
import typing
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import PlainValidator

SNAPSHOT = Path(__file__).with_name("trainer_fields.json")

# The classes the built-in kinds' `[train]` sections mirror (a kind from another package naming another class is
# read from that class).
SNAPSHOT_CLASSES = ("trl:SFTConfig", "trl:GRPOConfig", "transformers:TrainingArguments")

_NAMED = {"None": type(None), "Any": Any, **{t.__name__: t for t in (bool, int, float, str, dict, list)}}


def installed_versions() -> dict[str, str | None]:
    def installed(package: str) -> str | None:
        try:
            return version(package)
        except PackageNotFoundError:
            return None

    return {"trl": installed("trl"), "transformers": installed("transformers")}


def trainer_fields(config_class: str | type) -> list[tuple[str, Any]]:
    """`(name, annotation)` for each init field of a config class, given as a reference (`"trl:SFTConfig"`: read
    from the snapshot where it can be) or as the class, in declaration order; a field with `choices` (or an
    `Enum | str` one) is a `Literal` of its values."""
    if isinstance(config_class, str):
        encoded = _snapshot_for_installed()["classes"].get(config_class) or encode_class(
            _import(config_class)
        )
    else:
        encoded = encode_class(config_class)
    return [(name, decode(annotation)) for name, annotation in encoded]


def tracker_names() -> list[str]:
    """The `report_to` names transformers knows."""
    snapshot = _snapshot_for_installed()
    return snapshot["trackers"] if "trackers" in snapshot else _live_tracker_names()


@functools.cache
def _snapshot_for_installed() -> dict[str, Any]:
    try:
        snapshot = json.loads(SNAPSHOT.read_text())
    except (OSError, ValueError):
        return {"classes": {}}
    return snapshot if snapshot.get("versions") == installed_versions() else {"classes": {}}


def _import(reference: str) -> type:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _live_tracker_names() -> list[str]:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return sorted(INTEGRATION_TO_CALLBACK)


# ---------------------------------------------------------------------------------------------------
# Annotations as JSON


def encode_class(config_class: type) -> list[list[Any]]:
    hints = typing.get_type_hints(config_class)
    fields = []
    for field in dataclasses.fields(config_class):
        if not field.init:
            continue
        annotation = hints[field.name]
        choices = field.metadata.get("choices") or _enum_values(annotation)
        if choices:
            literal = Literal[tuple(choices)]
            annotation = literal | None if _admits_none(annotation) else literal
        fields.append([field.name, encode(annotation)])
    return fields


def encode(annotation: Any) -> Any:
    """`int | None` -> `{"union": ["int", "None"]}`. A class a TOML value cannot be (`ParallelismConfig`, an enum
    inside a list) is kept by name only: no job-file value validates against it, as none does against the class."""
    if annotation is type(None):
        return "None"
    if annotation is Any or annotation in (bool, int, float, str, dict, list):
        return "Any" if annotation is Any else annotation.__name__
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated and isinstance(annotation.__metadata__[0], NotFromAJobFile):
        return {"object": annotation.__metadata__[0].class_name}
    if origin is Literal:
        return {"literal": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"union": [encode(arg) for arg in args]}
    if origin in (list, dict):
        return {origin.__name__: [encode(arg) for arg in args]}
    return {"object": f"{annotation.__module__}.{annotation.__qualname__}"}


def decode(encoded: Any) -> Any:
    if isinstance(encoded, str):
        return _NAMED[encoded]
    ((tag, value),) = encoded.items()
    if tag == "literal":
        return Literal[tuple(value)]
    if tag == "union":
        return typing.Union[tuple(decode(item) for item in value)]  # noqa: UP007  (a tuple of members)
    if tag in ("list", "dict"):
        container = list if tag == "list" else dict
        return container[tuple(decode(item) for item in value)] if value else container
    if tag == "object":
        marker = NotFromAJobFile(value)
        return Annotated[Any, marker, PlainValidator(marker.refuse)]
    raise ValueError(f"{SNAPSHOT.name}: unknown annotation tag {tag!r}")


@dataclasses.dataclass(frozen=True)
class NotFromAJobFile:
    """A field's type that no TOML value is (an accelerate object, a list of enum members): any value is refused."""

    class_name: str

    def refuse(self, value: Any) -> Any:
        raise ValueError(f"takes a {self.class_name.rsplit('.', 1)[-1]} object, which a job file cannot give")


def _enum_values(annotation: Any) -> list[str]:
    """The values of an `Enum | str` field (transformers' strategies, schedulers, optimizers)."""
    members = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, enum.Enum)]
    return [member.value for member in members[0]] if members else []


def _admits_none(annotation: Any) -> bool:
    return annotation is type(None) or type(None) in typing.get_args(annotation)


def snapshot() -> dict[str, Any]:
    """The snapshot of the installed classes, as `trainer_fields.json` holds it."""
    return {
        "versions": installed_versions(),
        "trackers": _live_tracker_names(),
        "classes": {reference: encode_class(_import(reference)) for reference in SNAPSHOT_CLASSES},
    }


def write_snapshot(path: Path = SNAPSHOT) -> None:
    """Write `snapshot()` with one field per line (a library upgrade then reads as a diff of fields)."""
    data = snapshot()
    classes = ",\n".join(
        f"  {json.dumps(reference)}: [\n"
        + ",\n".join(f"   {json.dumps(field)}" for field in fields)
        + "\n  ]"
        for reference, fields in data["classes"].items()
    )
    head = f' "versions": {json.dumps(data["versions"])},\n "trackers": {json.dumps(data["trackers"])}'
    path.write_text(f'{{\n{head},\n "classes": {{\n{classes}\n }}\n}}\n')
