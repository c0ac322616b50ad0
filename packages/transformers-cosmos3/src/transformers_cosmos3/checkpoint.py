"""Reading and writing safetensors checkpoint folders, whatever their layout.

Only safetensors and JSON are read, with one opt-in exception: a torch Distributed Checkpoint (DCP)
folder, as the framework's trainer writes it, has pickled metadata, so it is read only when the
caller passes `trust_dcp_pickle=True` for a checkpoint it trusts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import get_torch_storage_id, save_torch_state_dict
from safetensors import safe_open

from .layouts import FRAMEWORK_PREFIXES, Layout, detect_layout

INDEX_SUFFIX = ".safetensors.index.json"
# Non-diffusers layouts keep the diffusers pipeline parts (model_index.json, transformer/config.json,
# vae/, scheduler/, ...) in this subfolder, so a conversion back restores the same repo.
PIPELINE_FOLDER = "pipeline"
BASE_HINT = "`--base BASE` on the command line, `base=` in Python"


class MissingConfigError(FileNotFoundError):
    """A checkpoint lacks the configs that describe its model; the message says where to get them."""


def resolve_folder(name_or_path: str | os.PathLike, **hub_kwargs) -> Path:
    """A local folder as is; a hub id is downloaded (safetensors, JSON and tokenizer files only)."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists():
        raise NotADirectoryError(f"{path} is a file; a Cosmos3 checkpoint is a folder")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "**/*.json", "**/*.safetensors"]
    return Path(snapshot_download(str(name_or_path), allow_patterns=patterns, **hub_kwargs))


def tensor_files(folder: Path) -> dict[str, Path]:
    """{tensor name: file holding it} for a folder of safetensors shards.

    Follows a `*.safetensors.index.json` when there is one (its paths may point into subfolders,
    as a Cosmos3 export's root index does), else reads the names from every `*.safetensors` file.
    """
    folder = Path(folder)
    indexes = sorted(folder.glob("*" + INDEX_SUFFIX))
    if len(indexes) > 1:
        raise ValueError(f"{folder} has {len(indexes)} safetensors indexes; expected at most one")
    if indexes:
        try:
            weight_map = json.loads(indexes[0].read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as error:
            raise ValueError(f"{indexes[0]}: not a safetensors index ({error})") from error
        files = {name: folder / rel for name, rel in weight_map.items()}
        for missing in sorted({f for f in files.values() if not f.is_file()}):
            raise FileNotFoundError(f"{indexes[0]} names {missing}, which does not exist")
        return files
    files: dict[str, Path] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as reader:
            files.update(dict.fromkeys(reader.keys(), shard))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    return files


DCP_METADATA = ".metadata"
DCP_TRUST_HINT = "`--trust-dcp-pickle` on the command line, `trust_dcp_pickle=True` in Python"


class UntrustedCheckpointError(ValueError):
    """A checkpoint can only be read by unpickling, and the caller did not opt in."""


@dataclass(frozen=True)
class DcpTensor:
    """Where a tensor of a torch DCP checkpoint is: its folder (read by `load_tensors`)."""

    folder: Path
    shape: tuple[int, ...]
    dtype: torch.dtype


def dcp_folder(folder: Path) -> Path | None:
    """The DCP folder of a framework checkpoint: `folder` itself, or its `model/` (the framework saves the
    model, optimizer, scheduler and trainer state as sibling DCP folders)."""
    for candidate in (folder, folder / "model"):
        if (candidate / DCP_METADATA).is_file() and any(candidate.glob("*.distcp")):
            return candidate
    return None


def dcp_tensors(folder: Path, trust_dcp_pickle: bool = False) -> dict[str, DcpTensor]:
    """{name: DcpTensor} of the `net.` / `net_ema.` tensors of a DCP checkpoint (other state is skipped)."""
    if not trust_dcp_pickle:
        raise UntrustedCheckpointError(
            f"{folder} is a torch DCP checkpoint, whose {DCP_METADATA} is pickled (unpickling can run code): "
            f"read it only if you trust it, with {DCP_TRUST_HINT}"
        )
    from torch.distributed.checkpoint import FileSystemReader, TensorStorageMetadata

    try:
        metadata = FileSystemReader(str(folder)).read_metadata()
    except Exception as error:  # a truncated or foreign .metadata fails inside pickle, with any error type
        raise ValueError(f"{folder / DCP_METADATA}: not a readable DCP metadata file ({error})") from error
    return {
        name: DcpTensor(folder, tuple(item.size), item.properties.dtype)
        for name, item in metadata.state_dict_metadata.items()
        if isinstance(item, TensorStorageMetadata) and name.startswith(FRAMEWORK_PREFIXES)
    }


def _load_dcp(folder: Path, entries: Mapping[str, DcpTensor]) -> dict[str, torch.Tensor]:
    """Read the named tensors, and only those, from a DCP folder in this one process."""
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint import load as dcp_load

    state = {name: torch.empty(entry.shape, dtype=entry.dtype) for name, entry in entries.items()}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
        dcp_load(
            state,
            storage_reader=FileSystemReader(str(folder)),
            planner=DefaultLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    return state


def load_tensors(
    files: Mapping[str, Path | DcpTensor], names: Mapping[str, str] | None = None
) -> dict[str, torch.Tensor]:
    """Load tensors; `names` maps stored name -> returned name and selects which to load."""
    names = names if names is not None else {name: name for name in files}
    by_file: dict[Path, list[str]] = {}
    by_dcp: dict[Path, dict[str, DcpTensor]] = {}
    for stored in names:
        where = files[stored]
        if isinstance(where, DcpTensor):
            by_dcp.setdefault(where.folder, {})[stored] = where
        else:
            by_file.setdefault(where, []).append(stored)
    tensors = {}
    for folder, entries in by_dcp.items():
        tensors.update({names[stored]: tensor for stored, tensor in _load_dcp(folder, entries).items()})
    for shard, stored_names in by_file.items():
        with safe_open(str(shard), framework="pt") as reader:
            for stored in stored_names:
                # Memory-mapped, as upstream's loaders read: pages are read on first use, not here.
                tensors[names[stored]] = reader.get_tensor(stored)
    return tensors


def save_sharded(
    tensors: Mapping[str, torch.Tensor],
    folder: Path,
    base_name: str = "model",
    max_shard_bytes: int = 5 * 1024**3,
) -> None:
    """Write tensors as `base_name.safetensors`, or `base_name-0000i-of-0000n.safetensors` shards plus
    `base_name.safetensors.index.json` when they do not fit one file (huggingface_hub's writer).

    Every name is written: tensors sharing memory are refused rather than deduplicated (the hub
    writer would keep one name of a tied pair, and the checkpoint would then lack the other).
    """
    storages: dict[tuple, str] = {}
    for name, tensor in tensors.items():
        storage = get_torch_storage_id(tensor)
        other = storages.setdefault(storage, name) if storage is not None else name
        if other != name:
            raise ValueError(f"tensors {other} and {name} share memory; pass independent copies")
    folder.mkdir(parents=True, exist_ok=True)
    # Sorted, so the same tensors always land in the same shards.
    save_torch_state_dict(
        dict(sorted(tensors.items())),
        folder,
        filename_pattern=base_name + "{suffix}.safetensors",
        max_shard_size=max_shard_bytes,
    )


@contextlib.contextmanager
def atomic_directory(destination: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a scratch folder that becomes `destination` only if the block finishes.

    A crash or an error leaves no partial `destination` behind.
    """
    destination = Path(destination)
    if destination.exists() and not overwrite:
        raise FileExistsError(f"{destination} already exists (pass overwrite to replace it)")
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{destination.name}.partial-", dir=destination.parent))
    try:
        yield scratch
        if destination.exists():
            # Moved aside, not deleted, until the new folder is in place: a failure here keeps it.
            previous = Path(tempfile.mkdtemp(prefix=f".{destination.name}.previous-", dir=destination.parent))
            os.replace(destination, previous / destination.name)
            try:
                os.replace(scratch, destination)
            except BaseException:
                os.replace(previous / destination.name, destination)
                previous.rmdir()
                raise
            shutil.rmtree(previous, ignore_errors=True)
        else:
            os.replace(scratch, destination)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# Subfolders of a diffusers-layout repo that hold model weights (the rest are pipeline parts).
DIFFUSERS_WEIGHT_FOLDERS = ("transformer", "vision_encoder")


def checkpoint_tensor_files(
    folder: Path, trust_dcp_pickle: bool = False
) -> tuple[Layout, dict[str, Path | DcpTensor]]:
    """Layout and {tensor name: file} of a Cosmos3 checkpoint folder in any layout.

    A torch DCP folder (raw framework layout) is read only with `trust_dcp_pickle`; see `dcp_tensors`.
    """
    folder = Path(folder)
    dcp = dcp_folder(folder)
    if dcp is not None:
        tensors = dcp_tensors(dcp, trust_dcp_pickle)
        if not tensors:
            raise ValueError(f"{dcp}: a DCP checkpoint without `net.` or `net_ema.` tensors")
        return Layout.FRAMEWORK, tensors
    if (folder / "transformer").is_dir():
        files: dict[str, Path] = {}
        for sub in DIFFUSERS_WEIGHT_FOLDERS:
            if (folder / sub).is_dir():
                files.update(tensor_files(folder / sub))
        return Layout.DIFFUSERS, files
    files = tensor_files(folder)
    return detect_layout(files), files


def config_folders(folder: Path, layout: Layout, base: str | os.PathLike | None = None, **hub_kwargs):
    """(root, pipeline): where a checkpoint's reasoner config and its diffusers pipeline parts are.

    A diffusers repo holds both; other layouts keep the pipeline parts under `pipeline/`. A raw trainer
    checkpoint has neither: `base`, a Cosmos3 repo of the same architecture (diffusers repo or any
    layout with `pipeline/`), supplies them, and only its non-weight files are used.
    """
    if base is not None:
        base_folder = resolve_folder(base, **hub_kwargs)
        if (base_folder / "model_index.json").is_file():
            return base_folder, base_folder
        if (base_folder / PIPELINE_FOLDER / "model_index.json").is_file():
            return base_folder, base_folder / PIPELINE_FOLDER
        raise MissingConfigError(
            f"base {base}: not a Cosmos3 repo (neither model_index.json nor {PIPELINE_FOLDER}/model_index.json)"
        )
    if layout is Layout.DIFFUSERS:
        return folder, folder
    pipeline = folder / PIPELINE_FOLDER
    if not (pipeline / "transformer" / "config.json").is_file():
        raise MissingConfigError(
            f"{folder} holds {layout.value}-layout weights but no {PIPELINE_FOLDER}/ configs (a raw trainer "
            f"checkpoint): name a Cosmos3 repo of the same architecture to take the configs, VAE, tokenizer "
            f"and scheduler from ({BASE_HINT})"
        )
    return folder, pipeline
