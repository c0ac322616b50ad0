"""Read a job file into the *effective* job: its kind, `--set` overrides applied, paths resolved, values
validated, what it names outside the file checked (its model, its reward functions), and the trainer's TRL
config built once. Shared by every trainer, `validate-config` and `export`.

The command names the kind (`cosmos-train grpo -c job.toml` reads a GRPO job); a file's own `kind` must agree
with it, and is needed only where no command names one (`validate-config`, `run`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import (
    ConfigError,
    JobSchema,
    apply_overrides,
    job_kind,
    read_toml,
    resolve_paths,
    validate_job,
)
from .kinds import JobKind, job_kinds, kind_named

JOB_RECORD = (
    "cosmos_train_job.toml"  # written into output_dir; export reads it, and puts it in the model card
)


@dataclass(frozen=True)
class Job:
    config: JobSchema  # validated, overrides applied, paths absolute
    source: str  # the job file, for messages
    args: Any  # the trainer's TRL / transformers config (e.g. SFTConfig)
    kind: JobKind

    def run(self, callbacks: list | None = None):
        """Train with the kind's run function (`callbacks`: extra `transformers.TrainerCallback`s); returns the
        trainer, after the final model is saved under `output_dir`."""
        from .launch import process_group_for

        with process_group_for(self.config.launch.backend):
            return self.kind.run_function()(self, callbacks)

    def record(self) -> str:
        """The effective job as TOML: what this run actually used, so it can be rerun as is."""
        import tomli_w

        values = self.config.model_dump(mode="json", exclude_none=True)
        values["kind"] = self.kind.name
        # The kind first, the trainer's own sections in file order, the shared [train] and [launch] last.
        order = {"kind": -1, "train": 1, "launch": 1}
        values = {key: values[key] for key in sorted(values, key=lambda key: order.get(key, 0))}
        return f"# {self.source}, as run: --set overrides applied, paths resolved\n" + tomli_w.dumps(values)


def read_job(path: str | Path, overrides: list[str] | None = None, kind: str | JobKind | None = None) -> Job:
    """Validate a job file of `kind` (the command's; None: the file's own `kind`), check what it names, and build
    its trainer config. Raises a one-line ConfigError."""
    path = Path(path)
    source, base = str(path), path.resolve().parent
    data = apply_overrides(read_toml(path), overrides or [])
    written = job_kind(data, source)
    if kind is None:
        if written is None:
            raise ConfigError(
                f'{source}: no kind: add a top-level kind = "..." naming its trainer '
                f"({', '.join(job_kinds())}), or pass --kind"
            )
        entry = kind_named(written, source, base)
    else:
        entry = kind if isinstance(kind, JobKind) else kind_named(kind, source, base)
        if written is not None and written != entry.name:
            command = "run -c FILE" if ":" in written else written
            raise ConfigError(
                f"{source}: kind '{written}' is not a {entry.name} job; run `cosmos-train {command}` instead"
            )
    schema = entry.schema_class()
    config = validate_job(resolve_paths({**data, "kind": entry.name}, schema, base), schema, source)
    config.check_sources(source, base)
    return Job(config, source, config.training_arguments(source), entry)


def run_record(checkpoint: Path) -> tuple[Path, dict[str, Any]] | None:
    """The job record of the run `checkpoint` belongs to (in it, or in its parent): (file, values), or None."""
    for folder in (checkpoint, checkpoint.parent):
        path = folder / JOB_RECORD
        if path.is_file():
            try:
                return path, tomllib.loads(path.read_text())
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
                raise ConfigError(f"{path}: unreadable job record ({error})") from None
    return None
