"""cosmos-train's layers point one way, read from every module's imports (at any depth, lazy ones included):
`diffusion/` and `rewards/` never import `trainers/`, `data/` never imports `diffusion/`, and no job schema
(`*_config.py`, `config.py`) imports a trainer module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "cosmos-train" / "src" / "cosmos_train"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The cosmos_train modules `path` imports, relative imports resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("cosmos_train")}


MODULES = {module_name(path): imported(path) for path in PACKAGE.rglob("*.py")}


def trainer_modules() -> set[str]:
    return {
        name for name in MODULES if name.startswith("cosmos_train.trainers.") and not name.endswith("_config")
    }


RULES = [
    ("cosmos_train.diffusion", lambda name: name.startswith("cosmos_train.trainers")),
    ("cosmos_train.rewards", lambda name: name.startswith("cosmos_train.trainers")),
    ("cosmos_train.data", lambda name: name.startswith("cosmos_train.diffusion")),
    # GenEval-mini's domain and evaluator; its base model is taught through the CLI, in a child process.
    ("cosmos_train.geneval_mini", lambda name: name.startswith("cosmos_train.trainers")),
]


@pytest.mark.parametrize(("layer", "forbidden"), RULES, ids=[layer for layer, _ in RULES])
def test_lower_layers_do_not_import_upper_ones(layer, forbidden):
    offending = {
        module: sorted(filter(forbidden, imports))
        for module, imports in MODULES.items()
        if module.startswith(layer) and any(map(forbidden, imports))
    }
    assert not offending, offending


def test_no_job_schema_imports_a_trainer():
    schemas = [name for name in MODULES if name.endswith("_config") or name == "cosmos_train.config"]
    assert len(schemas) >= 7, schemas
    trainers = trainer_modules()
    offending = {name: sorted(MODULES[name] & trainers) for name in schemas if MODULES[name] & trainers}
    assert not offending, offending


def test_the_import_reader_sees_what_it_checks():
    """It would catch a violation: the trainers import diffusion/, and relative imports resolve."""
    assert "cosmos_train.diffusion.weights" in MODULES["cosmos_train.trainers.nft_trainer"]
    assert "cosmos_train.trainers.diffusion_rl" in MODULES["cosmos_train.trainers.nft_trainer"]
    assert "cosmos_train.data.loading" in MODULES["cosmos_train.data.pairs"]
