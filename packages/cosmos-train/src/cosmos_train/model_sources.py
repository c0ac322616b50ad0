"""Where a job's model lives, found without loading its weights: a local folder, or a hub id (downloaded into the
cache, or found there when offline). Every command checks this before loading anything, so a missing folder or
an unreachable hub id is one line naming the job's key and what was looked for, not a library's traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import SourceError, first_line


def model_file(name_or_path: str, filename: str, key: str, what: str, base: Path | None = None) -> Path:
    """`filename` of the model `name_or_path` names (a folder, else a hub repo), for the job's `key` (e.g.
    "[model] name_or_path"); `what` says what the model must be ("a diffusers pipeline"), `base` is the job file's
    folder, which relative folders were looked for in."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / filename).is_file():
            raise SourceError(f"{key} {name_or_path} has no {filename}: it is not {what}")
        return path / filename
    if path.exists():
        raise SourceError(f"{key} {name_or_path} is a file, not a folder: it should be {what}")
    looked = [str(path.resolve())]
    if base is not None and not path.is_absolute():
        looked.insert(0, str((base / path).resolve()))
    missing_folder = f"no folder {' or '.join(dict.fromkeys(looked))}"
    if not _is_hub_id(name_or_path):
        raise SourceError(f"{key} {name_or_path}: {missing_folder}")
    return _hub_file(name_or_path, filename, key, what, missing_folder)


def pipeline_index(name_or_path: str, key: str, base: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """A diffusers pipeline's `model_index.json` (folder or hub id; no weights): its path and its contents, for the
    job's `key` ("[model] name_or_path")."""
    path = model_file(name_or_path, "model_index.json", key, "a diffusers pipeline", base)
    return path, read_json(path, key)


def read_json(path: Path, key: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SourceError(f"{key}: cannot read {path} ({first_line(error)})") from None
    if not isinstance(value, dict):
        raise SourceError(f"{key}: {path} is not a JSON object")
    return value


def _is_hub_id(name: str) -> bool:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _hub_file(repo: str, filename: str, key: str, what: str, missing_folder: str) -> Path:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        return Path(hf_hub_download(repo, filename))
    except LocalEntryNotFoundError:
        reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub is unreachable"
        raise SourceError(
            f"{key} {repo}: {missing_folder}, and hub model '{repo}' is not in the local cache ({reason})"
        ) from None
    except GatedRepoError:
        raise SourceError(f"{key} {repo}: hub model '{repo}' is gated: accept its terms and log in") from None
    except RepositoryNotFoundError:
        raise SourceError(f"{key} {repo}: {missing_folder}, and there is no hub model '{repo}'") from None
    except EntryNotFoundError:
        raise SourceError(f"{key} {repo}: hub model '{repo}' has no {filename}: it is not {what}") from None
    except Exception as error:  # network and HTTP errors: one line
        raise SourceError(f"{key} {repo}: cannot reach hub model '{repo}' ({first_line(error)})") from None


def custom_code_files(folder: Path, model_index: dict[str, Any]) -> list[str]:
    """Component code a local pipeline ships (`<component>/<module>.py`, diffusers' custom components)."""
    found = []
    for name, entry in model_index.items():
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
            module = folder / name / f"{entry[0]}.py"
            if module.is_file():
                found.append(f"{name}/{module.name}")
    return found
