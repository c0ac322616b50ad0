"""Objects named by a dotted path, `package.module:attribute`: job kinds, model adapters and reward functions that
live outside cosmos-train, so a user extends the toolkit without a fork (as TRL's reward functions allow)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

from .errors import BadReferenceError

_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_reference(name: str) -> bool:
    """Whether `name` has the form `package.module:attribute`."""
    return bool(_REFERENCE.match(name))


def load_reference(reference: str, search_path: str | Path | None = None) -> Any:
    """The object `reference` names. Its module is imported from `sys.path` or, failing that, from `search_path`
    (a job file's folder, so a module beside the job file works), which then stays on `sys.path`: libraries
    that pickle the object by reference (TRL's reward functions) must find it again."""
    if not is_reference(reference):
        raise BadReferenceError(f"'{reference}' is not 'package.module:attribute'")
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if search_path is None or error.name != module_name.split(".")[0]:
            raise BadReferenceError(f"cannot import {module_name} ({error})") from None
        if str(search_path) not in sys.path:
            sys.path.append(str(search_path))
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise BadReferenceError(
                f"cannot import {module_name} from sys.path or {search_path} ({error})"
            ) from None
    except Exception as error:  # the module itself raised while importing
        raise BadReferenceError(f"cannot import {module_name} ({type(error).__name__}: {error})") from None
    if not hasattr(module, attribute):
        raise BadReferenceError(f"{module_name} has no '{attribute}'")
    return getattr(module, attribute)
