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
    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    """Write a trained checkpoint as a save_pretrained folder (adapter or merged model) with its
    tokenizer/processor and a model card.

    Examples:

      cosmos-train export runs/sft/checkpoint-200 exported/adapter

      cosmos-train export runs/sft exported/full --merge-lora
    """
    from .export import export as export_checkpoint

    try:
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
