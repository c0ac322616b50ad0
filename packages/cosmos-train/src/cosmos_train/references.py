"""Objects named by a dotted path, `package.module:attribute`: job kinds, model adapters and reward functions that
live outside cosmos-train, so a user extends the toolkit without a fork (as TRL's reward functions allow)."""

from __future__ import annotations

import importlib
import re
import sys
import traceback
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
    top = module_name.split(".")[0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if search_path is None or error.name != top:
            raise BadReferenceError(_import_failure(module_name, error)) from None
        if str(search_path) not in sys.path:
            sys.path.append(str(search_path))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != top:
                raise BadReferenceError(_import_failure(module_name, error)) from None
            raise BadReferenceError(
                f"cannot import {module_name} from sys.path or {search_path} ({error})"
            ) from None
        except Exception as error:  # the module itself failed while importing
            raise BadReferenceError(_import_failure(module_name, error)) from None
    except Exception as error:  # the module itself failed while importing
        raise BadReferenceError(_import_failure(module_name, error)) from None
    if not hasattr(module, attribute):
        raise BadReferenceError(f"{module_name} has no '{attribute}'")
    return getattr(module, attribute)


def _import_failure(module_name: str, error: BaseException) -> str:
    """One line for a module that failed to import: the error, and the file and line where it happened (a syntax
    error's own place; else the line of the user's module that raised, or imported what raised)."""
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{error.filename}, line {error.lineno}"
        reason = f"{type(error).__name__}: {error.msg}"
    else:
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if not frame.filename.startswith("<")
            and Path(frame.filename).parent != _IMPORTLIB
            and frame.filename != __file__
        ]
        where = f"{frames[0].filename}, line {frames[0].lineno}" if frames else ""
        reason = f"{type(error).__name__}: {error}"
        if isinstance(error, ModuleNotFoundError) and not frames:  # the module itself was not found
            reason = str(error)
    return f"cannot import {module_name} ({reason})" + (f" at {where}" if where else "")


_IMPORTLIB = Path(importlib.__file__).parent
