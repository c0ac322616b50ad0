"""Read a job file into the *effective* job: its kind, `--set` overrides applied, paths resolved, values
validated, and the trainer's TRL config built once. Shared by every trainer and `validate-config`."""

from __future__ import annotations

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
    schema_for,
    validate_job,
)

JOB_RECORD = "cosmos_train_job.toml"  # written into output_dir; export puts it in the model card


@dataclass(frozen=True)
class Job:
    config: JobSchema  # validated, overrides applied, paths absolute
    source: str  # the job file, for messages
    args: Any  # the trainer's TRL / transformers config (e.g. SFTConfig)

    @property
    def kind(self) -> str:
        return self.config.kind

    def record(self) -> str:
        """The effective job as TOML: what this run actually used, so it can be rerun as is."""
        import tomli_w

        values = self.config.model_dump(mode="json", exclude_none=True)
        # The trainer's own sections first, in file order; the shared [train] and [launch] last.
        values = {key: values[key] for key in sorted(values, key=lambda key: key in ("train", "launch"))}
        return f"# {self.source}, as run: --set overrides applied, paths resolved\n" + tomli_w.dumps(values)


def read_job(path: str | Path, overrides: list[str] | None = None, kind: str | None = None) -> Job:
    """Validate a job file (of `kind`, when a command needs one) and build its trainer config."""
    path = Path(path)
    source = str(path)
    data = apply_overrides(read_toml(path), overrides or [])
    found = job_kind(data, source)
    if kind is not None and found != kind:
        raise ConfigError(f"{source}: kind '{found}' is not a {kind} job; run `cosmos-train {found}` instead")
    schema = schema_for(found, source)
    config = validate_job(resolve_paths(data, schema, path.resolve().parent), schema, source)
    return Job(config, source, config.training_arguments(source))
