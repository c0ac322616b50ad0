"""The job-file reference, made from the schemas' own field descriptions: `cosmos-train <kind> --help` lists its
kind's sections and keys, `docs/job-files.md` holds every kind's, and the README's key tables sit between
`<!-- job-keys KIND SECTION -->` markers. Regenerate both with `python -m cosmos_train.config.reference`; a test
keeps them current."""

from __future__ import annotations

import enum
import re
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import PydanticUndefined


@dataclass(frozen=True)
class Key:
    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class SectionReference:
    name: str  # "" for the file's top level
    summary: str
    keys: list[Key]


def reference(schema: type[BaseModel]) -> list[SectionReference]:
    """A schema's sections, each with its keys; `[train]` summarised (its keys are a TRL/transformers config's)."""
    top: list[Key] = []
    sections: list[SectionReference] = []
    for name, field in schema.model_fields.items():
        model = _section_model(field.annotation)
        if name == "train":
            source = getattr(model, "config_class", None) or "the trainer's config"
            summary = f"The fields of `{source}`, verbatim, each checked."
            defaults = getattr(schema, "train_defaults", {})
            if defaults:
                listed = ", ".join(f"`{key} = {_toml(value)}`" for key, value in defaults.items())
                summary += f" This kind's defaults where they differ from that class's: {listed}."
            sections.append(SectionReference("train", summary, []))
        elif model is not None:
            summary = re.sub(r"^`\[\w+\]`:?\s*", "", field.description or _first_line(model.__doc__))
            summary = summary[:1].upper() + summary[1:]
            required = "" if not field.is_required() else " (required)"
            sections.append(
                SectionReference(
                    name, summary + required, [_key(k, f) for k, f in model.model_fields.items()]
                )
            )
        elif typing.get_origin(field.annotation) is dict:
            sections.append(SectionReference(name, field.description or "", []))
        else:
            top.append(_key(name, field))
    last = {"train": 1, "launch": 2}  # the trainer's own sections first, as in a job file
    return [
        SectionReference("", "Top-level keys.", top),
        *sorted(sections, key=lambda s: last.get(s.name, 0)),
    ]


def key_table(section: SectionReference) -> list[str]:
    """A section's keys as a Markdown table."""
    rows = [
        f"| `{k.name}` | {_cell(k.type)} | {_cell(k.default, code=True)} | {_cell(k.description)} |"
        for k in section.keys
    ]
    return ["| key | type | default | |", "|---|---|---|---|", *rows] if rows else []


MARKER = re.compile(r"(<!-- job-keys (\S+) (\S+) -->\n)(.*?)(<!-- /job-keys -->)", re.DOTALL)


def with_key_tables(document: str, kinds: dict[str, Any]) -> str:
    """`document` with each `<!-- job-keys KIND SECTION -->` block holding that section's key table."""

    def table(match: re.Match) -> str:
        sections = {s.name: s for s in reference(kinds[match.group(2)].schema_class())}
        return match.group(1) + "\n".join(key_table(sections[match.group(3)])) + "\n" + match.group(5)

    return MARKER.sub(table, document)


def markdown(kinds: dict[str, Any]) -> str:
    """Every kind's reference as Markdown (`docs/job-files.md`)."""
    lines = [
        "# Job files",
        "",
        "Every key of every job kind, made from the schemas (`cosmos_train/config/reference.py`; regenerate with",
        "`python -m cosmos_train.config.reference`). `cosmos-train <kind> --help` lists the same.",
        "Relative paths are relative to the job file. `[train]` takes the fields of the kind's TRL or transformers",
        "config verbatim, type- and range-checked; the values other sections own are refused there.",
        "",
    ]
    for kind in kinds.values():
        lines += [f"## `{kind.name}`", "", kind.summary, ""]
        for section in reference(kind.schema_class()):
            title = "Top level" if not section.name else f"`[{section.name}]`"
            lines += [f"### {title}", "", section.summary, ""]
            if section.keys:
                lines += [*key_table(section), ""]
    return "\n".join(lines).rstrip() + "\n"


def text(kind) -> str:
    """A kind's reference as plain text, for its command's `--help`."""
    lines = ["Job file (TOML) sections and keys:", ""]
    for section in reference(kind.schema_class()):
        lines.append(f"[{section.name}] {section.summary}" if section.name else section.summary)
        for key in section.keys:
            lines.append(f"  {key.name} ({key.type}, default {key.default}): {key.description}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _cell(value: str, code: bool = False) -> str:
    """A Markdown table cell: pipes escaped, a literal value as code."""
    if code and value not in ("required", "none"):
        value = f"`{value}`"
    return value.replace("|", "\\|").replace("\n", " ")


def _section_model(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _key(name: str, field) -> Key:
    if field.is_required():
        default = "required"
    elif field.default_factory is not None:
        default = _toml(field.default_factory())
    elif field.default is None or field.default is PydanticUndefined:
        default = "none"
    else:
        default = _toml(field.default)
    return Key(name, _type(field.annotation), default, field.description or "")


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " | ".join(_toml(value) for value in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type(arg) for arg in args if arg is not type(None))
    if origin is list:
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(_toml(member.value) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


if __name__ == "__main__":
    from pathlib import Path

    from ..kinds import BUILTIN_KINDS

    root = Path(__file__).resolve().parents[5]
    builtins = {kind.name: kind for kind in BUILTIN_KINDS}
    (root / "docs" / "job-files.md").write_text(markdown(builtins))
    readme = root / "README.md"
    readme.write_text(with_key_tables(readme.read_text(), builtins))
    print(f"wrote {root / 'docs' / 'job-files.md'} and the key tables of {readme}")
