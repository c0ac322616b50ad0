"""Read a job file into the *effective* job: its kind, `--set` overrides applied, paths resolved, values
validated by the kind's schema, then what it names outside the file checked (`check_sources`: its data files,
its model, its rewards). Shared by every trainer, `validate-config`, `estimate-memory` and `export`.

The command names the kind (`cosmos-train grpo -c job.toml` reads a GRPO job); a file's own `kind` must agree
with it, and is needed only where no command names one (`validate-config`, `run`).

The schemas only declare (`cosmos_train.config`); this module checks sources without loading weights or data
(`check_data`, which reads the data as its trainer will, is `validate-config`'s), and the kind's run function
loads. Reading a job sets no process-wide state: the trainer's TRL config with its DeepSpeed / FSDP settings,
which transformers registers process-wide, is built when a run first asks for `Job.args`.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import (
    ConfigError,
    JobSchema,
    LeRobotData,
    MediaData,
    ModelSection,
    PairData,
    PipelineSection,
    PromptListData,
    apply_overrides,
    entry_parameters,
    job_kind,
    read_toml,
    refuse_given_values,
    resolve_paths,
    validate_job,
)
from .errors import BadReferenceError, SourceError
from .kinds import JobKind, job_kinds, kind_named

JOB_RECORD = (
    "cosmos_train_job.toml"  # written into output_dir; export reads it, and puts it in the model card
)


@dataclass(frozen=True)
class Job:
    config: JobSchema  # validated, overrides applied, paths absolute
    source: str  # the job file, for messages
    kind: JobKind

    @functools.cached_property
    def args(self) -> Any:
        """The trainer's TRL / transformers config (e.g. `SFTConfig`), with the `[launch]` backend's settings. Built
        on first use: under DeepSpeed it registers transformers' process-wide DeepSpeed config."""
        from .launch import check_runnable_here

        check_runnable_here(self.config.launch.backend, self.source)
        return self.config.training_arguments(self.source)

    @functools.cached_property
    def settings(self) -> Any:
        """The trainer's config without the `[launch]` backend's settings: every `[train]` value as the run gets it,
        building nothing process-wide (what `estimate-memory` and validation read)."""
        return self.config.training_arguments(self.source, launch=False)

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


def read_job(
    path: str | Path,
    overrides: list[str] | None = None,
    kind: str | JobKind | None = None,
    runnable_here: bool = True,
    check_data_files: bool = True,
) -> Job:
    """Validate a job file of `kind` (the command's; None: the file's own `kind`), check what it names (its data
    files only with `check_data_files`: `estimate-memory` reads no data), and check its trainer config (and, with
    `runnable_here`, that this machine can run its `[launch]` backend). Raises a one-line ConfigError."""
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
    resolved = resolve_paths({**data, "kind": entry.name}, schema, base)
    if schema.family_defaults:
        refuse_given_values(resolved, schema, source)
    resolved = with_family_defaults(resolved, schema, base)
    config = validate_job(resolved, schema, source)
    check_sources(config, source, base, check_data_files)
    job = Job(config, source, entry)
    if runnable_here:
        from .launch import check_runnable_here

        check_runnable_here(config.launch.backend, source)
    job.settings  # noqa: B018  (builds and checks the trainer config: a bad [train] value fails here)
    return job


def with_family_defaults(data: dict[str, Any], schema: type[JobSchema], base: Path) -> dict[str, Any]:
    """`data` with the schema's `family_defaults` for its `[model]` pipeline's class under the keys it leaves out; a
    model that cannot be read gets none here (`check_sources` reports it after validation)."""
    model = data.get("model")
    if (
        not schema.family_defaults
        or not isinstance(model, dict)
        or not isinstance(model.get("name_or_path"), str)
    ):
        return data
    from .model_sources import pipeline_index

    try:
        _, index = pipeline_index(model["name_or_path"], "[model]", base)
    except (SourceError, ConfigError):
        return data
    data = dict(data)
    for key, values in schema.family_defaults.get(index.get("_class_name"), {}).items():
        section = data.get(key)
        # An absent optional section stays absent: a default [lora] must not turn LoRA on.
        if section is None and schema.model_fields[key].default is None:
            continue
        if section is None or isinstance(section, dict):
            data[key] = {**values, **(section or {})}
    return data


# ---------------------------------------------------------------------------------------------------------
# What a job names outside its file


def sections(config: JobSchema) -> list[tuple[str, Any]]:
    """(key, value) of the job's sections and tables, in declaration order."""
    return [(name, getattr(config, name)) for name in type(config).model_fields]


def check_sources(config: JobSchema, source: str, base: Path, check_data_files: bool = True) -> None:
    """What the job names outside its file, checked before anything loads (every command does): its data files
    exist, its rewards are known (built-ins with the parameters they take, `remote:<name>`, or `module:function`),
    each section's model is found as what the job needs (its folder or hub id, never its weights), and its
    `module:function` rewards import (from `sys.path` or `base`, the job file's folder), and its `[train] output_dir` is
    a folder or can be made one."""
    try:
        for key, value in sections(config):
            if check_data_files and isinstance(value, MediaData | PairData | PromptListData):
                check_data_source(value, f"[{key}]")
            if check_data_files and isinstance(value, LeRobotData):
                check_lerobot_data(value, config, f"[{key}]")
            rewards = getattr(value, "rewards", None) if key != "rewards" else value
            if rewards:
                check_reward_names(rewards, "[rewards]" if key == "rewards" else f"[{key}] rewards:", config)
        for key, value in sections(config):
            if isinstance(value, ModelSection):
                from .model_sources import model_file

                model_file(
                    value.name_or_path, "config.json", f"[{key}] name_or_path", "a transformers model", base
                )
            elif isinstance(value, PipelineSection):
                from .diffusion.loading import pipeline_adapter_class

                family = pipeline_adapter_class(value, f"[{key}]", base)
                if config.pipeline_classes and family.pipeline_class not in config.pipeline_classes:
                    raise ConfigError(
                        f"[{key}] name_or_path {value.name_or_path} is a {family.pipeline_class}; this kind trains "
                        f"{' or '.join(config.pipeline_classes)}"
                    )
                check_sample_size(config, family, value, base)
        if config.action_domain() is not None:
            check_action_domain(config.action_domain())
    except (SourceError, ConfigError) as error:
        raise ConfigError(f"{source}: {error}") from None
    for reward in getattr(config, "rewards", None) or {}:
        check_reward_imports(reward, source, base)
    factory = getattr(getattr(config, "env", None), "factory", None)
    if (
        factory is not None and check_data_files
    ):  # an environment, as rewards, must import (estimate-memory skips it)
        check_callable_import(factory, "[env] factory", source, base)
    train = getattr(config, "train", None)
    if getattr(train, "output_dir", None):
        check_output_dir(Path(train.output_dir), f"{source}: [train] output_dir")


def check_sample_size(config: JobSchema, family: type, section: PipelineSection, base: Path) -> None:
    """The size a diffusion job samples or trains at fits its transformer (the family's `configured_size`, read
    from the pipeline's configs alone): a side its positional embedding cannot cover would fail the run after its
    prompts are encoded."""
    sample_size = getattr(config, "sample_size", None)
    if sample_size is None:
        return
    from .diffusion.loading import pipeline_component_configs

    pipeline_size, max_side = family.configured_size(pipeline_component_configs(section, base))
    if max_side is None:
        return
    height, width, _ = sample_size(family, pipeline_size, max_side)
    for key, side in zip(config.size_keys, (height, width), strict=True):
        if side and side > max_side:
            raise ConfigError(
                f"{key} {side} is larger than {section.name_or_path}'s transformer can take ({max_side}: its "
                f"positional embedding x patch x VAE scale); set {key} <= {max_side}"
            )


def check_output_dir(output_dir: Path, key: str) -> None:
    """The run's output folder can be made: it, or the nearest of its parents that exists, is a folder (a file
    there would fail the run at its first write, with a traceback)."""
    for folder in (output_dir, *output_dir.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "is a file" if folder == output_dir else f"is inside {folder}, which is a file"
                raise ConfigError(f"{key} {output_dir} {where}, not a folder")
            return


def check_data_source(section: MediaData | PairData | PromptListData, key: str) -> None:
    """The data's files exist (a hub dataset is looked up when the data is read)."""
    if isinstance(section, MediaData):
        if section.format != "hf" and not Path(section.path).is_file():
            raise ConfigError(f"{key} path {section.path} does not exist")
        if section.media_dir is not None and not Path(section.media_dir).is_dir():
            raise ConfigError(f"{key} media_dir {section.media_dir} does not exist")
    elif isinstance(section, PairData):
        if section.format in ("folder", "cosmos_predict") and not Path(section.path).is_dir():
            raise ConfigError(f"{key} path {section.path} is not a folder")
    else:
        from .data.prompt_lists import resolve_prompt_source
        from .errors import DataError

        try:
            resolve_prompt_source(section.path, section.format, section.split)
        except DataError as error:
            raise ConfigError(f"{key} {error}") from None


def check_lerobot_data(section: LeRobotData, config: JobSchema, key: str) -> None:
    """The dataset holds what the job reads (cameras, columns, stats, whole windows), from its meta alone."""
    from .data.lerobot import ActionSpec, LeRobotFolder
    from .errors import DataError

    try:
        LeRobotFolder(section.path).check(ActionSpec(**config.lerobot_request()))
    except DataError as error:
        raise ConfigError(f"{key} {error}") from None


def check_action_domain(domain: str | int) -> None:
    from diffusers_cosmos3.actions import domain_id

    try:
        domain_id(domain)
    except ValueError as error:
        raise ConfigError(f"[action] domain: {error}") from None


def check_reward_names(table: dict, key: str, config: JobSchema) -> None:
    """Each reward of a `[rewards]` table is known to the rewards registry, with parameters it takes; image/video
    rewards for a diffusion job (one whose `[model]` is a pipeline), text rewards otherwise."""
    from .rewards import check_reward

    media = isinstance(getattr(config, "model", None), PipelineSection)
    for name, entry in table.items():
        try:
            check_reward(name, entry_parameters(entry), media=media)
        except ValueError as error:
            raise ConfigError(f"{key} {error}") from None


def check_reward_imports(reward: str, source: str, base: Path) -> None:
    """A `module:function` reward imports and is a function."""
    from .references import is_reference

    if reward.startswith("remote:") or not is_reference(reward):
        return
    check_callable_import(reward, "[rewards]", source, base, "a function")


def check_callable_import(reference: str, key: str, source: str, base: Path, what: str = "callable") -> None:
    """A `module:attribute` reference imports (from `sys.path` or `base`) and is callable."""
    from .references import load_reference

    try:
        function = load_reference(reference, base)
    except BadReferenceError as error:
        raise ConfigError(f"{source}: {key} {reference}: {error}") from None
    if not callable(function):
        raise ConfigError(f"{source}: {key} {reference} is a {type(function).__name__}, not {what}")


def check_data(job: Job) -> None:
    """Read and validate the job's data as its trainer will (records, media files), loading no model:
    `validate-config` runs it. Raises a one-line `DataError` or `ConfigError`."""
    from .data import read_data_section

    video = None
    model = getattr(job.config, "model", None)
    if isinstance(model, PipelineSection):
        from .diffusion.loading import pipeline_adapter_class

        video = pipeline_adapter_class(model).video
    for _, value in sections(job.config):
        if isinstance(value, MediaData | PairData | PromptListData):
            read_data_section(value, video=video)


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
