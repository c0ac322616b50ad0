"""The `cosmos-train` command line: one command per job kind (generated from the registry in `kinds.py`), and
the tools around them: `run`, `validate-config`, `export`, `reward-serve`, `quickstart`, `make-tiny`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE.toml", help="Job file (TOML).", show_default=False)
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="SECTION.KEY=VALUE", help="Override a job value (repeatable).", show_default=False
    ),
]


def _fail(error: Exception | str, code: int = 2):
    # Runtime failures (code 1) may interrupt a progress bar mid-line: start on a fresh one.
    typer.echo(f"{chr(10) if code == 1 else ''}error: {error}", err=True)
    raise typer.Exit(code)


def _read_job(config: Path, overrides: list[str] | None, kind=None):
    from .config import ConfigError
    from .jobs import read_job

    try:
        return read_job(config, overrides, kind)
    except ConfigError as error:
        _fail(error)


def _train(job) -> None:
    """Run a read job with its kind's run function: bad config or data exit 2, a diverged run or a failing
    reward exits 1 (`errors.exit_code`)."""
    from .errors import RunError, UsageError, exit_code

    try:
        job.run()
    except (UsageError, RunError) as error:
        _fail(error, exit_code(error))
    typer.echo(f"trained model saved to {job.args.output_dir}")


def _root(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Debug logging, and the libraries' deprecation warnings."),
    ] = False,
) -> None:
    """Post-training for Cosmos3 and the models around it."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        quiet_libraries()


def quiet_libraries() -> None:
    """Leave out what the libraries say about their own future (torch's, DeepSpeed's, transformers'
    FutureWarnings and DeprecationWarnings: a 2-process ZeRO-3 run printed hundreds, one per collective) and
    torch's CUDA-less extension notices; `--verbose` shows them. Every launched process runs this."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


class _JobCommand(typer.core.TyperCommand):
    """A training command whose help ends with its job file's sections and keys, read from the kind's schema
    when help is asked for (a schema imports TRL: listing the commands should not wait for it)."""

    kind = None

    def format_epilog(self, ctx, formatter) -> None:
        from .config.reference import text

        super().format_epilog(ctx, formatter)
        formatter.write_paragraph()
        formatter.write(
            "\n".join("  " + line if line else "" for line in text(self.kind).splitlines()) + "\n"
        )


def _training_command(kind):
    """The command of one job kind: read a job of that kind, then train."""

    def command(config: ConfigOption, set_: SetOption = None) -> None:
        _train(_read_job(config, set_, kind))

    command.__name__ = kind.name.replace("-", "_")
    return command


def run(config: ConfigOption, set_: SetOption = None) -> None:
    """Run a job of the kind its file names (`kind = ...`), including kinds from other packages
    (`kind = "package.module:KIND"`).

    Example:

      cosmos-train run -c my_algorithm_job.toml
    """
    _train(_read_job(config, set_))


def validate_config(
    config: Annotated[Path, typer.Argument(help="Job file (TOML).")],
    set_: SetOption = None,
    kind: Annotated[
        str | None,
        typer.Option(help="The job's kind, for a file without a `kind` key.", show_default=False),
    ] = None,
) -> None:
    """Check a job file without training: sections, keys, value types and ranges, the trainer config, that its
    model exists (a folder or hub id, without reading weights) and is of the right kind, that its reward
    functions import, and its data (records, media files), as the trainer would read them.

    The job's kind comes from its top-level `kind` key, or --kind.

    Example:

      cosmos-train validate-config examples/sft/tiny_qwen3_lora.toml
    """
    from .errors import UsageError
    from .jobs import check_data

    job = _read_job(config, set_, kind)
    try:
        check_data(job)
    except UsageError as error:
        _fail(error)
    typer.echo(f"{job.source}: ok ({job.kind.name} job)")


def estimate_memory(
    config: Annotated[Path, typer.Argument(help="Job file (TOML).")],
    processes: Annotated[int, typer.Option(help="Processes (devices) the job runs on.")] = 1,
    set_: SetOption = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            metavar="FOLDER",
            help="Estimate with this folder of the model's configuration (no weights) in place of the job's "
            "[model] name_or_path: config.json for a language model, model_index.json and each component's "
            "config.json for a pipeline (examples/model_configs/ has the README table's).",
            show_default=False,
        ),
    ] = None,
    device_memory: Annotated[
        str | None,
        typer.Option(
            help="Memory of one device, e.g. 80GB (80 x 10^9 bytes) or 80GiB (80 x 2^30): says whether the job "
            "fits, in that unit.",
            show_default=False,
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Estimate the memory a job needs on each device, from its model built on the meta device (only the model's
    configuration is read: no weights, no data): trained weights, gradients, optimizer state, EMA / old-policy /
    reference copies, frozen parts (LoRA's base, VAE, text encoders, Cosmos3's reasoner) and activations, for the
    job's kind, LoRA or full fine-tuning and [launch] backend. Sizes in GB (10^9 bytes), or in GiB when
    --device-memory is given in GiB. An estimate: see `cosmos_train.memory` for what it counts.

    Example:

    \b
      cosmos-train estimate-memory examples/sft/qwen3_vl_8b_full.toml --processes 8 --device-memory 80GB

    Offline, with the configuration of SD3.5-Medium shipped in examples/model_configs/ in place of the hub model:

    \b
      cosmos-train estimate-memory examples/diffusion_sft/sd35_medium_lora.toml --processes 8 \\
          --model-config examples/model_configs/sd3.5-medium --device-memory 80GB
    """
    from . import memory
    from .config import ConfigError
    from .errors import first_line

    try:
        size = memory.parse_size(device_memory) if device_memory else None
        job, backend = memory.read_job(config, set_, model_config)
        result = memory.estimate(job, processes, backend)
    except (ConfigError, ValueError) as error:
        _fail(first_line(error))
    except OSError as error:  # a model config that cannot be read
        _fail(f"{config}: {first_line(error)}")
    typer.echo(memory.to_json([result], size) if json_ else result.table(size))


def export(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint-N folder or a run's output_dir.")],
    out: Annotated[Path, typer.Argument(help="Folder to write (must not exist unless --overwrite).")],
    merge_lora: Annotated[bool, typer.Option(help="Merge a LoRA adapter into the full weights.")] = False,
    ema: Annotated[
        bool | None,
        typer.Option(
            "--ema/--no-ema",
            help="Diffusion runs: export the EMA weights (default: when the checkpoint has them).",
            show_default=False,
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    """Write a trained checkpoint as what its library loads, for every job kind: for LMs and VLMs a
    save_pretrained folder (adapter or merged model) with its tokenizer/processor; for diffusion runs OUT/lora/
    for pipe.load_lora_weights, or with --merge-lora (and for full fine-tunes) a whole pipeline for
    DiffusionPipeline.from_pretrained. Each gets a model card.

    Examples:

      cosmos-train export runs/sft/checkpoint-200 exported/adapter

      cosmos-train export runs/sft exported/full --merge-lora

      cosmos-train export runs/sd3-lora/checkpoint-500 exported/sd3 --merge-lora --no-ema
    """
    from .config import ConfigError
    from .jobs import run_record
    from .kinds import kind_named

    try:
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
        found = run_record(checkpoint)
        if found is None:  # a checkpoint without its run: exported as a transformers / PEFT folder
            from .export import export_run as exporter

            kind, record = None, None
        else:
            record_file, record = found
            entry = kind_named(str(record.get("kind")), str(record_file), record_file.parent)
            exporter, kind = entry.exporter(), entry.name
        written = exporter(
            checkpoint, out, kind=kind, record=record, merge_lora=merge_lora, ema=ema, overwrite=overwrite
        )
    except (FileNotFoundError, FileExistsError, ValueError, ConfigError) as error:
        _fail(error)
    typer.echo(f"exported to {written}")


# --- reward-serve -------------------------------------------------------------------------------------------

_DEFAULT_SERVED = "jpeg_compressibility,jpeg_incompressibility,brightness,color_target"


def reward_serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    token_env: Annotated[
        str, typer.Option(help="Environment variable holding the bearer token.")
    ] = "REMOTE_REWARD_TOKEN",
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Accept requests without a token (trusted networks only).")
    ] = False,
    rewards: Annotated[
        str, typer.Option(help="Comma-separated image/video rewards to host, with default parameters.")
    ] = _DEFAULT_SERVED,
    rewards_config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.toml",
            help="A [rewards] table (name = { parameter = value, ... }, as in a job) of further rewards to host.",
            show_default=False,
        ),
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest enqueue body, in MiB.")] = 256.0,
    max_batch: Annotated[int, typer.Option(help="Most samples in one batch.")] = 256,
    max_queue: Annotated[int, typer.Option(help="Most batches waiting to be scored.")] = 64,
    result_ttl: Annotated[float, typer.Option(help="Seconds a scored result stays pullable.")] = 600.0,
    workers: Annotated[int, typer.Option(help="Scoring threads.")] = 1,
    latent_vae: Annotated[
        str | None,
        typer.Option(
            metavar="FOLDER_OR_HUB_ID",
            help="A diffusers VAE (or a pipeline folder with vae/) that decodes latents clients send, e.g. the "
            "Wan2.1 VAE for cosmos-rl's video trainers. Without it, latent batches are refused.",
            show_default=False,
        ),
    ] = None,
    latent_vae_subfolder: Annotated[
        str | None,
        typer.Option(help="The VAE's subfolder of a hub id (e.g. vae).", show_default=False),
    ] = None,
    latent_device: Annotated[
        str, typer.Option(help="Where the VAE decodes: auto (cuda when present), cpu, cuda:N.")
    ] = "auto",
    store: Annotated[
        str,
        typer.Option(
            metavar="memory|redis://HOST:PORT/DB",
            help="Where the queue and results live: this process's memory, or a Redis that several replicas "
            "share (any replica answers any pull; needs pip install 'cosmos-train[redis]').",
        ),
    ] = "memory",
    lease_seconds: Annotated[
        float,
        typer.Option(help="Redis store: seconds without a heartbeat before a replica's job is taken over."),
    ] = 10.0,
    replica_id: Annotated[
        str | None,
        typer.Option(
            help="Redis store: this replica's name (default: host, pid, random).", show_default=False
        ),
    ] = None,
) -> None:
    """Serve image and video rewards over HTTP (the reward-service contract): JPEG compressibility,
    brightness, colour, OCR and CLIP scorers (PickScore, HPS, aesthetic) for diffusion RL trainers.

    Clients send `Authorization: Bearer $REMOTE_REWARD_TOKEN` (--token-env names another variable); the
    service refuses to start without a token unless --no-auth. Request logs are JSON lines on stderr.
    Needs `pip install 'cosmos-train[serve]'`.

    Example (a batch of one 64 x 64 image, scored for brightness):

    \b
      REMOTE_REWARD_TOKEN=s3cret cosmos-train reward-serve --port 8080 &
      python -c "import io, json, numpy as np; b = io.BytesIO(); np.save(b, np.zeros((1, 64, 64, 3), np.uint8)); open('req.bin', 'wb').write(json.dumps({'prompts': ['a cat'], 'reward_fn': {'brightness': 1.0}, 'media_type': 'image'}).encode() + b'\\n' + b.getvalue())"
      curl -s -H "Authorization: Bearer s3cret" --data-binary @req.bin http://127.0.0.1:8080/api/reward/enqueue
      # {"uuid":"<UUID>"}
      curl -s -H "Authorization: Bearer s3cret" -d uuid=<UUID> -d type=brightness http://127.0.0.1:8080/api/reward/pull
      # {"scores":{"brightness":[0.0]},"input_info":{...},"duration":...,"type":"brightness"}
    """
    import os

    from .service import SERVE_EXTRA_HINT, SERVE_MODULES

    try:
        from .service.app import ServiceSettings, run
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in SERVE_MODULES:
            raise
        _fail(f"reward-serve needs FastAPI and uvicorn ({error.name} is missing): {SERVE_EXTRA_HINT}")
    from .rewards import RewardError, RewardSpec, build_media_rewards

    token = os.environ.get(token_env) or None
    if token is None and not no_auth:
        _fail(f"no token: set {token_env} (or name another variable with --token-env), or pass --no-auth")
    specs = [RewardSpec(name, 1.0, {}) for name in (n.strip() for n in rewards.split(",")) if name]
    if rewards_config is not None:
        specs += _served_reward_specs(rewards_config)
    served = [spec.name for spec in specs]
    if len(set(served)) != len(served):
        _fail(f"a reward is named twice: {', '.join(served)} (--rewards and --rewards-config)")
    if any(name.startswith("remote:") for name in served):
        _fail("the service hosts rewards itself; 'remote:' names are for clients")
    try:
        hosted = {reward.name: reward for reward in build_media_rewards(specs)}
    except RewardError as error:
        _fail(error)
    settings = ServiceSettings(
        token=token,
        max_body_bytes=int(max_body_mb * (1 << 20)),
        max_batch=max_batch,
        max_queue=max_queue,
        result_ttl=result_ttl,
        workers=workers,
        store=store,
        lease=lease_seconds,
        replica=replica_id,
    )
    if store != "memory":
        if not store.startswith(("redis://", "rediss://", "unix://")):
            _fail(f"--store must be memory or redis://host:port/db, got {store!r}")
        try:
            import redis  # noqa: F401
        except ModuleNotFoundError:
            _fail("--store redis://... needs the Redis client: pip install 'cosmos-train[redis]'")
        if lease_seconds <= 0:
            _fail(f"--lease-seconds must be > 0, got {lease_seconds}")
    decoder = None
    if latent_vae is not None:
        from .service.latents import LatentDecoder

        try:
            decoder = LatentDecoder.load(latent_vae, latent_vae_subfolder, latent_device)
        except Exception as error:  # a missing folder, an offline hub id, not a VAE: one line
            from .errors import first_line

            _fail(f"--latent-vae {latent_vae}: {first_line(error)}")
    typer.echo(
        f"reward service on http://{host}:{port} (rewards: {', '.join(hosted)}; "
        f"latents: {type(decoder.vae).__name__ if decoder else 'refused (no --latent-vae)'}; "
        f"auth: {'bearer token from ' + token_env if token else 'OFF (--no-auth)'})",
        err=True,
    )
    try:
        run(settings, hosted, host, port, decoder)
    except ConnectionError as error:  # the Redis store is not reachable
        _fail(error)


def _served_reward_specs(path: Path):
    """The rewards of a `[rewards]` table file, each with its parameters (weights do not apply to a service)."""
    from pydantic import TypeAdapter, ValidationError

    from .config import ConfigError, read_toml
    from .errors import first_line
    from .rewards import RewardSpec, RewardTable, reward_specs

    try:
        table = read_toml(path).get("rewards")
    except ConfigError as error:
        _fail(error)
    if not isinstance(table, dict) or not table:
        _fail(f"{path}: needs a [rewards] table of name = {{ parameter = value, ... }}")
    try:
        specs = reward_specs(TypeAdapter(RewardTable).validate_python(table))
    except ValidationError as error:
        where = ".".join(str(part) for part in error.errors()[0]["loc"][:1])
        _fail(f"{path}: [rewards] {where}: must be a table of parameters (or a weight) ({first_line(error)})")
    return [RewardSpec(spec.name, 1.0, spec.parameters) for spec in specs]


def quickstart(
    output_dir: Annotated[
        Path, typer.Option(help="Where to write checkpoints and outputs (replaced on each run).")
    ] = Path("quickstart-output"),
) -> None:
    """Build a tiny Cosmos3 offline, convert it to every layout, load it through the shims, and
    generate an image and a text reply.

    Example:

      cosmos-train quickstart --output-dir /tmp/qs
    """
    from .quickstart import OutputDirError, run

    try:
        run(output_dir, log=typer.echo)
    except OutputDirError as error:
        _fail(error)


def make_tiny(
    kind: Annotated[str, typer.Argument(help="One of the kinds listed above.", show_default=False)],
    out: Annotated[Path, typer.Argument(help="Folder to write (must not exist).", show_default=False)],
) -> None:
    from .tiny_models import KINDS, save_tiny_model

    if kind not in KINDS:
        _fail(f"unknown tiny model {kind!r}; expected one of {', '.join(KINDS)}")
    if out.exists():
        _fail(f"{out} already exists")
    typer.echo(f"wrote a tiny {KINDS[kind]} to {save_tiny_model(kind, out)}")


def _make_tiny_help() -> str:
    from .tiny_models import KINDS

    listing = "\n".join(f"  {kind:<18} {description}" for kind, description in KINDS.items())
    return (
        "Save a tiny random model or diffusers pipeline, built offline, for smoke-testing a job (the tiny_* "
        "recipes under examples/) before pointing it at a real checkpoint.\n\nKinds:\n\n\b\n"
        f"{listing}\n\nExample:\n\n  cosmos-train make-tiny qwen3 examples/sft/tiny-models/qwen3"
    )


def build_app() -> typer.Typer:
    """The CLI: a command per registered job kind (`kinds.job_kinds()`), then the tools."""
    from .kinds import job_kinds

    app = typer.Typer(
        name="cosmos-train",
        help="Post-training for Cosmos3 and the models around it.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    for kind in job_kinds().values():
        command_class = type(f"{kind.name}-command", (_JobCommand,), {"kind": kind})
        app.command(kind.name, help=kind.help, short_help=kind.summary, cls=command_class)(
            _training_command(kind)
        )
    app.command("run")(run)
    app.command("validate-config")(validate_config)
    app.command("export")(export)
    app.command("estimate-memory")(estimate_memory)
    app.command("reward-serve")(reward_serve)
    app.command("quickstart")(quickstart)
    app.command("make-tiny", help=_make_tiny_help())(make_tiny)
    return app


app = build_app()


def main() -> None:
    app()
