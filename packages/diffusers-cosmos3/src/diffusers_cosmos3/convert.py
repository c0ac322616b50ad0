"""`cosmos3-convert`: rewrite a Cosmos3 checkpoint from any layout into any other.

The source layout is detected. Every tensor goes through the one key table in
`transformers_cosmos3.layouts`; action and sound heads are kept. A checkpoint that does not map
fully is refused with the list of offending keys, and nothing is written. Output folders appear
atomically.

Non-diffusers layouts keep the weights at the root (`model.safetensors`, sharded with an index
when large), the reasoner `config.json` and tokenizer/processor files at the root, and the rest
of the diffusers repo (model_index.json, the transformer and ViT configs, vae/, scheduler/,
text_tokenizer/, ...) under `pipeline/`, so converting back gives the same repo.

A raw trainer checkpoint (`net.`/`net_ema.` tensors only, no configs) takes them from `--base`, a
Cosmos3 repo of the same architecture, as diffusers' own `convert_cosmos_to_diffusers.py` does:
weights from SRC, everything else from BASE.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated

import typer

from transformers_cosmos3.layouts import (
    Layout,
    Reasoner,
    canonical_names,
    check_names,
    from_layout,
    is_vision_key,
    to_layout,
)

# torch, diffusers and the checkpoint IO (which imports torch) are imported where they are used, so
# `cosmos3-convert --help` and `import diffusers_cosmos3` stay fast.

PIPELINE_FOLDER = "pipeline"  # transformers_cosmos3.checkpoint.PIPELINE_FOLDER (that module imports torch)


class ConversionError(ValueError):
    """The checkpoint cannot be converted as asked; the message says why."""


@dataclass
class SourceCheckpoint:
    """A Cosmos3 checkpoint: where its tensors are, what they are called canonically, and where the
    files that describe them are (the checkpoint itself, or a base repo)."""

    folder: Path
    layout: Layout
    files: dict[str, Path]  # stored tensor name -> file
    canonical: dict[str, str]  # stored tensor name -> canonical name
    root_dir: Path  # the reasoner's config.json and processor files (and any other root file)
    pipeline_dir: Path  # model_index.json, transformer/config.json, vae/, ...

    @property
    def pipeline_at_root(self) -> bool:
        """A diffusers repo: pipeline parts and root files share one folder."""
        return self.root_dir == self.pipeline_dir

    @property
    def transformer_config(self) -> dict:
        return _read_json(self.pipeline_dir / "transformer" / "config.json")

    @property
    def vision_config_path(self) -> Path:
        return self.pipeline_dir / "vision_encoder" / "config.json"

    @cached_property
    def reasoner(self) -> Reasoner:
        return Reasoner.of_transformer_config(self.transformer_config)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ConversionError(
            f"{path} is missing; it is needed to check the tensors against the architecture"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConversionError(f"{path}: invalid JSON at line {error.lineno}: {error.msg}") from error


def open_checkpoint(
    folder: str | Path,
    prefer_ema: bool = True,
    base: str | Path | None = None,
    trust_dcp_pickle: bool = False,
) -> SourceCheckpoint:
    """The checkpoint at `folder`; `base` (a Cosmos3 repo) supplies every non-weight file instead."""
    from transformers_cosmos3.checkpoint import checkpoint_tensor_files, config_folders

    folder = Path(folder)
    if not folder.is_dir():
        raise ConversionError(f"{folder} is not a folder")
    layout, files = checkpoint_tensor_files(folder, trust_dcp_pickle)
    root_dir, pipeline_dir = config_folders(folder, layout, base)
    canonical = canonical_names(files, layout, prefer_ema=prefer_ema)
    return SourceCheckpoint(folder, layout, files, canonical, root_dir, pipeline_dir)


def expected_tensors(source: SourceCheckpoint) -> set[str]:
    """Canonical tensor names of the architecture the configs describe (built on the meta device)."""
    import torch
    from diffusers import Cosmos3OmniTransformer
    from transformers import AutoConfig

    with torch.device("meta"):
        transformer = Cosmos3OmniTransformer.from_config(source.transformer_config)
        names = set(transformer.state_dict())
        reasoner_config = source.root_dir / "config.json"
        if source.reasoner is Reasoner.EDGE and reasoner_config.is_file():
            # Edge's ViT and projector sit inside the native reasoner; its own names are canonical.
            from transformers import Cosmos3EdgeForConditionalGeneration

            reasoner = Cosmos3EdgeForConditionalGeneration(AutoConfig.from_pretrained(reasoner_config.parent))
            canonical = (from_layout(name, Layout.TRANSFORMERS) for name in reasoner.state_dict())
            names |= {name for name in canonical if is_vision_key(name)}
        elif source.vision_config_path.is_file():
            from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

            vision = Qwen3VLVisionModel(AutoConfig.from_pretrained(source.vision_config_path.parent))
            names |= set(vision.state_dict())
    return names


def check_complete(source: SourceCheckpoint) -> None:
    """Refuse a checkpoint with tensors the architecture lacks, without ones it needs, or doubled ones."""
    check_names(source.canonical, expected_tensors(source), source.folder)


def check_target(source: SourceCheckpoint, to: Layout) -> None:
    """Refuse a conversion whose output the target layout could not load.

    The transformers and vLLM layouts are the reasoner: they need its `config.json` and its ViT. A
    diffusers repo as upstream ships it has neither (no root `config.json`, no `vision_encoder/`).
    """
    if to not in (Layout.TRANSFORMERS, Layout.VLLM):
        return
    if to is Layout.VLLM and source.reasoner is Reasoner.EDGE:
        raise ConversionError(
            f"{source.folder} is Cosmos3 Edge: vLLM's Cosmos3EdgeForConditionalGeneration reads the diffusers "
            "export (transformer/ + vision_encoder/), and there is no separate vLLM layout for it: use --to diffusers"
        )
    has_config = (source.root_dir / "config.json").is_file()
    has_vision = any(is_vision_key(name) for name in source.canonical.values())
    if not has_vision:
        lacks = "the vision encoder (no vision_encoder/)" + (
            "" if has_config else " and the reasoner's config.json"
        )
        raise ConversionError(
            f"{source.folder} lacks {lacks}, which --to {to.value} needs for a loadable reasoner (a diffusers "
            f"repo as upstream ships it has neither): copy vision_encoder/ and config.json from a Cosmos3 "
            f"export of the same model into {source.folder}, then convert again"
        )
    if not has_config:
        raise ConversionError(
            f"{source.root_dir} has no config.json (the reasoner's), which --to {to.value} needs: copy it from a "
            f"Cosmos3 export of the same model, or name such an export with --base"
        )


def _copy(item: Path, target: Path) -> None:
    if item.is_dir():
        shutil.copytree(item, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(item, target)


def _is_weight_file(path: Path) -> bool:
    from transformers_cosmos3.checkpoint import INDEX_SUFFIX

    return path.name.endswith((".safetensors", INDEX_SUFFIX))


def _copy_metadata(source: SourceCheckpoint, scratch: Path, to: Layout) -> None:
    """Carry every non-weight file across, moving pipeline parts between root and `pipeline/`."""
    from transformers_cosmos3.checkpoint import DIFFUSERS_WEIGHT_FOLDERS

    pipeline_target = scratch if to is Layout.DIFFUSERS else scratch / PIPELINE_FOLDER
    root_items = [p for p in source.root_dir.iterdir() if not _is_weight_file(p)]
    if source.pipeline_at_root:
        pipeline_items = [p for p in root_items if p.is_dir() or p.name == "model_index.json"]
        root_items = [p for p in root_items if p not in pipeline_items]
    else:
        pipeline_items = list(source.pipeline_dir.iterdir())
        root_items = [p for p in root_items if p.name != PIPELINE_FOLDER]
    for item in root_items:
        _copy(item, scratch / item.name)
    for item in pipeline_items:
        if item.name in DIFFUSERS_WEIGHT_FOLDERS:
            # Weight folders: only their configs travel; the tensors are rewritten below.
            for file in item.iterdir():
                if not _is_weight_file(file):
                    _copy(file, pipeline_target / item.name / file.name)
        else:
            _copy(item, pipeline_target / item.name)


def convert(
    src: str | Path,
    dst: str | Path,
    to: Layout | str = Layout.DIFFUSERS,
    overwrite: bool = False,
    prefer_ema: bool = True,
    max_shard_bytes: int = 5 * 1024**3,
    base: str | Path | None = None,
    trust_dcp_pickle: bool = False,
) -> Path:
    """Convert the checkpoint at `src` into layout `to` at `dst`; returns `dst`.

    `base` (a Cosmos3 repo of the same architecture, folder or hub id) supplies every non-weight file:
    the configs, VAE, tokenizers and scheduler that a raw trainer checkpoint lacks. `trust_dcp_pickle`
    allows reading a torch DCP checkpoint, whose metadata is pickled: only for checkpoints you trust.
    """
    from transformers_cosmos3.checkpoint import atomic_directory, load_tensors, save_sharded

    from .export import write_root_index

    to = Layout(to)
    source = open_checkpoint(src, prefer_ema=prefer_ema, base=base, trust_dcp_pickle=trust_dcp_pickle)
    check_complete(source)
    check_target(source, to)
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise ConversionError(f"{dst} already exists (use --overwrite to replace it)")
    tensors = load_tensors(source.files, source.canonical)
    with atomic_directory(dst, overwrite=overwrite) as scratch:
        _copy_metadata(source, scratch, to)
        if to is Layout.DIFFUSERS:
            vision = {k: v for k, v in tensors.items() if is_vision_key(k)}
            generator = {k: v for k, v in tensors.items() if not is_vision_key(k)}
            save_sharded(generator, scratch / "transformer", "diffusion_pytorch_model", max_shard_bytes)
            if vision:
                save_sharded(vision, scratch / "vision_encoder", "model", max_shard_bytes)
            if (scratch / "config.json").is_file():
                write_root_index(scratch)
        else:
            renamed = {to_layout(k, to, reasoner=source.reasoner): v for k, v in tensors.items()}
            save_sharded(renamed, scratch, "model", max_shard_bytes)
    return dst


app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)


@app.command()
def cli(
    src: Annotated[Path, typer.Argument(help="Checkpoint folder in any Cosmos3 layout (detected).")],
    dst: Annotated[Path, typer.Argument(help="Output folder; must not exist unless --overwrite.")],
    to: Annotated[Layout, typer.Option(help="Target layout.")] = Layout.DIFFUSERS,
    overwrite: Annotated[bool, typer.Option(help="Replace DST if it exists.")] = False,
    weights: Annotated[
        str,
        typer.Option(help="Raw framework checkpoints: take the 'ema' (net_ema.) or 'regular' (net.) copy."),
    ] = "ema",
    base: Annotated[
        str | None,
        typer.Option(
            help="A Cosmos3 repo of the same architecture (folder or hub id) that supplies the configs, VAE, "
            "tokenizers and scheduler; needed for a raw trainer checkpoint, which holds weights only."
        ),
    ] = None,
    trust_dcp_pickle: Annotated[
        bool,
        typer.Option(
            help="Read SRC as a torch DCP checkpoint (.metadata + *.distcp, as the framework's trainer writes "
            "it). Its metadata is pickled, and unpickling can run arbitrary code: only for checkpoints you trust."
        ),
    ] = False,
) -> None:
    """Convert SRC into layout --to at DST.

    Examples:

      cosmos3-convert ./iter_000010000 ./Cosmos3-Nano-sft --to diffusers --base nvidia/Cosmos3-Nano

      cosmos3-convert ./Cosmos3-Nano ./Cosmos3-Nano-framework --to framework

      cosmos3-convert ./Cosmos3-Nano-framework ./Cosmos3-Nano-hf --to transformers

      cosmos3-convert ./iter_000010000/model ./Cosmos3-Nano-sft --base nvidia/Cosmos3-Nano --trust-dcp-pickle
    """
    if weights not in ("ema", "regular"):
        typer.echo(f"error: --weights must be 'ema' or 'regular', not {weights!r}", err=True)
        raise typer.Exit(2)
    try:
        out = convert(
            src,
            dst,
            to=to,
            overwrite=overwrite,
            prefer_ema=weights == "ema",
            base=base,
            trust_dcp_pickle=trust_dcp_pickle,
        )
    except (ConversionError, FileNotFoundError, FileExistsError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {to.value} layout to {out}")


def main() -> None:
    sys.exit(app())
