"""The `cosmos-train` command line: one subcommand per job, each mapped to a trainer."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="cosmos-train",
    help="Post-training for Cosmos3 and the models around it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

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


def _read_job(config: Path, overrides: list[str] | None, kind: str | None = None):
    from .config import ConfigError
    from .jobs import read_job

    try:
        return read_job(config, overrides, kind)
    except ConfigError as error:
        _fail(error)


def _train(run, job) -> None:
    """Run a trainer on a read job: bad config or data exit 2, a diverged run exits 1."""
    from .config import ConfigError
    from .data import DataError
    from .rewards import RemoteRewardError, RewardError
    from .trainers.common import NonFiniteLossError

    try:
        run(job)
    except (ConfigError, DataError) as error:
        _fail(error)
    except (NonFiniteLossError, RewardError, RemoteRewardError) as error:
        _fail(error, code=1)
    typer.echo(f"trained model saved to {job.args.output_dir}")


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    """Post-training for Cosmos3 and the models around it."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def sft(config: ConfigOption, set_: SetOption = None) -> None:
    """Supervised fine-tuning (TRL SFTTrainer) of the Cosmos3 reasoner, a VLM or a text LM.

    Examples:

      cosmos-train sft --config examples/sft/tiny_qwen3_lora.toml

      cosmos-train sft -c job.toml --set train.max_steps=100 --set lora.r=32

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train sft -c job.toml
    """
    from .trainers.sft_trainer import run_sft

    _train(run_sft, _read_job(config, set_, kind="sft"))


@app.command()
def grpo(config: ConfigOption, set_: SetOption = None) -> None:
    """GRPO (TRL GRPOTrainer) of the Cosmos3 reasoner, a VLM or a text LM, on prompts with images or
    video, with built-in, Python or remote rewards.

    Variants come from TRL's options in [train]: loss_type = "grpo" | "dr_grpo" | "dapo" | ...,
    importance_sampling_level = "sequence" (GSPO), epsilon_high (clip-higher), beta (KL). [rollout]
    dynamic_sampling adds DAPO's group filter. Remote rewards read REMOTE_REWARD_ENQUEUE_URL,
    REMOTE_REWARD_FETCH_URL and REMOTE_REWARD_TOKEN.

    Examples:

      cosmos-train grpo --config examples/grpo/tiny_qwen3.toml

      cosmos-train grpo -c job.toml --set train.num_generations=16 --set rollout.dynamic_sampling=true

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train grpo -c job.toml
    """
    from .trainers.grpo_trainer import run_grpo

    _train(run_grpo, _read_job(config, set_, kind="grpo"))


# --- reward-serve -------------------------------------------------------------------------------------------

_DEFAULT_SERVED = "jpeg_compressibility,jpeg_incompressibility,brightness,color_target"


@app.command("reward-serve")
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
    )
    typer.echo(
        f"reward service on http://{host}:{port} (rewards: {', '.join(hosted)}; "
        f"auth: {'bearer token from ' + token_env if token else 'OFF (--no-auth)'})",
        err=True,
    )
    run(settings, hosted, host, port)


def _served_reward_specs(path: Path):
    import tomllib

    from .rewards import RewardSpec

    try:
        table = tomllib.loads(path.read_text()).get("rewards")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        _fail(f"{path}: {error}")
    if not isinstance(table, dict) or not table:
        _fail(f"{path}: needs a [rewards] table of name = {{ parameter = value, ... }}")
    specs = []
    for name, entry in table.items():
        if not isinstance(entry, dict | int | float):
            _fail(f"{path}: [rewards] {name} must be a table of parameters (or a weight)")
        parameters = {k: v for k, v in entry.items() if k != "weight"} if isinstance(entry, dict) else {}
        specs.append(RewardSpec(name, 1.0, parameters))
    return specs


@app.command("diffusion-sft")
def diffusion_sft(config: ConfigOption, set_: SetOption = None) -> None:
    """Flow-matching SFT of a diffusers pipeline's transformer (SD3, SANA, SANA-Video,
    Cosmos-Predict2.5, Cosmos3) on image or video + caption pairs, with LoRA or full fine-tuning.

    The pipeline's class picks the model adapter. [train] takes transformers TrainingArguments
    names; [diffusion] sets the timestep density, loss weighting, EMA, text dropout and validation.
    Exports land in output_dir/safetensors/step_N/: a full pipeline for
    DiffusionPipeline.from_pretrained, or lora/ for pipe.load_lora_weights.

    Examples:

      cosmos-train diffusion-sft --config examples/diffusion_sft/tiny_sd3_lora.toml

      cosmos-train diffusion-sft -c job.toml --set diffusion.ema_decay=0.999

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train diffusion-sft -c job.toml
    """
    from .trainers.diffusion_sft_trainer import run_diffusion_sft

    _train(run_diffusion_sft, _read_job(config, set_, kind="diffusion-sft"))


@app.command()
def nft(config: ConfigOption, set_: SetOption = None) -> None:
    """DiffusionNFT: online RL of a diffusers pipeline's transformer through the forward process. A lagged
    old policy samples K images/videos per prompt (no CFG), rewards rank them, and the model learns from
    implicit positive and negative policies on re-noised samples. [rewards] maps image/video rewards
    (built-ins, module:function or remote:<name>) to weights.

    Examples:

      cosmos-train nft --config examples/diffusion_rl/tiny_sd3_nft.toml

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train nft -c job.toml
    """
    from .trainers.nft_trainer import run_nft

    _train(run_nft, _read_job(config, set_, kind="nft"))


@app.command("flow-grpo")
def flow_grpo(config: ConfigOption, set_: SetOption = None) -> None:
    """FlowGRPO: online RL of a diffusers pipeline's transformer over the steps of an SDE sampler. The
    current policy samples K images/videos per prompt (CFG as [rollout] guidance_scale), storing each step's
    log-prob; rewards rank them, and the model trains GRPO's clipped ratio objective on a subset of the steps,
    plus a KL to the frozen base. [rewards] maps image/video rewards (built-ins, module:function or
    remote:<name>) to weights.

    Examples:

      cosmos-train flow-grpo --config examples/diffusion_rl/tiny_sana_flow_grpo.toml

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train flow-grpo -c job.toml
    """
    from .trainers.flow_grpo_trainer import run_flow_grpo

    _train(run_flow_grpo, _read_job(config, set_, kind="flow-grpo"))


@app.command()
def ddrl(config: ConfigOption, set_: SetOption = None) -> None:
    """DDRL: FlowGRPO's rollouts and clipped-ratio reward term, with the KL to a reference replaced by
    [ddrl] data_beta times the flow-matching loss on [real_data] (pairs, or the Cosmos-Predict2.5 videos/ +
    metas/ layout); for video families the data term mixes t2v and i2v by the number of conditional frames.

    Examples:

      cosmos-train ddrl --config examples/diffusion_rl/tiny_sana_ddrl.toml

      accelerate launch --multi_gpu --num_processes 8 -m cosmos_train ddrl -c job.toml
    """
    from .trainers.ddrl_trainer import run_ddrl

    _train(run_ddrl, _read_job(config, set_, kind="ddrl"))


@app.command("validate-config")
def validate_config(
    config: Annotated[Path, typer.Argument(help="Job file (TOML).")], set_: SetOption = None
) -> None:
    """Check a job file of any kind without training: sections, keys, value types and ranges, the
    trainer config, and that local files exist.

    The top-level `kind` key names the trainer (`sft` when absent).

    Example:

      cosmos-train validate-config examples/sft/tiny_qwen3_lora.toml
    """
    job = _read_job(config, set_)
    typer.echo(f"{job.source}: ok ({job.kind} job)")


@app.command()
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
    """Write a trained checkpoint as what its library loads: for LMs and VLMs a save_pretrained folder
    (adapter or merged model) with its tokenizer/processor; for diffusion runs OUT/lora/ for
    pipe.load_lora_weights, or with --merge-lora (and for full fine-tunes) a whole pipeline for
    DiffusionPipeline.from_pretrained. Each gets a model card.

    Examples:

      cosmos-train export runs/sft/checkpoint-200 exported/adapter

      cosmos-train export runs/sft exported/full --merge-lora

      cosmos-train export runs/sd3-lora/checkpoint-500 exported/sd3 --merge-lora --no-ema
    """
    from .diffusion.export import export_diffusion, is_diffusion_run
    from .export import export as export_checkpoint

    try:
        if is_diffusion_run(checkpoint):
            written = export_diffusion(checkpoint, out, merge_lora=merge_lora, ema=ema, overwrite=overwrite)
        elif ema is not None:
            _fail(f"{checkpoint}: --ema/--no-ema applies to diffusion runs only")
        else:
            written = export_checkpoint(checkpoint, out, merge_lora=merge_lora, overwrite=overwrite)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        _fail(error)
    typer.echo(f"exported to {written}")


@app.command()
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
    from .quickstart import run

    try:
        run(output_dir, log=typer.echo)
    except FileExistsError as error:
        _fail(error)


@app.command("make-tiny")
def make_tiny(
    kind: Annotated[
        str, typer.Argument(help="qwen3 | qwen3_vl | qwen2_5_vl | cosmos3 | cosmos3_edge", show_default=False)
    ],
    out: Annotated[Path, typer.Argument(help="Folder to write (must not exist).", show_default=False)],
) -> None:
    """Save a tiny random model with its tokenizer/processor, built offline, for smoke-testing a job
    (the `examples/sft/tiny_*.toml` recipes) before pointing it at a real checkpoint.

    Example:

      cosmos-train make-tiny qwen3 examples/sft/tiny-models/qwen3
    """
    from .testing import KINDS, save_tiny_model

    if kind not in KINDS:
        _fail(f"unknown tiny model {kind!r}; expected one of {', '.join(KINDS)}")
    if out.exists():
        _fail(f"{out} already exists")
    typer.echo(f"wrote a tiny {KINDS[kind]} to {save_tiny_model(kind, out)}")


def main() -> None:
    app()
