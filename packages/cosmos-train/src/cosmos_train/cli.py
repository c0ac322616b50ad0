"""The `cosmos-train` command line: one subcommand per job."""

from __future__ import annotations

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


@app.callback()
def _root() -> None:
    """Post-training for Cosmos3 and the models around it."""


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
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()
