"""cosmos-train's layers point one way, read from every module's imports (at any depth, lazy ones included):

- the schema layer (`config/` and every algorithm's `schema.py`) imports no `diffusion/`, `data/`, `rewards/`
  module, and no trainer;
- `diffusion/`, `data/` and `rewards/` never import `algorithms/`; `data/` never imports `diffusion/`;
- no `rewards/` module imports a benchmark domain (they live under benchmarks/, outside the package);
- no module outside `algorithms/` and the registry (`kinds.py`) names a kind: the rest of the toolkit asks the
  kind (its schema's `weight_copies`, `activation_batch`, ...), never matches its name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "cosmos-train" / "src" / "cosmos_train"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The modules `path` imports (cosmos_train's and the benchmark domains'), relative imports resolved."""
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
    return {
        name for name in found if name.startswith(("cosmos_train", "domains", "geneval_mini", "arithmetic"))
    }


MODULES = {module_name(path): imported(path) for path in PACKAGE.rglob("*.py")}


def is_schema(name: str) -> bool:
    return (
        name == "cosmos_train.config" or name.startswith("cosmos_train.config.") or name.endswith(".schema")
    )


def under(*layers: str):
    return lambda name: any(name == layer or name.startswith(layer + ".") for layer in layers)


def is_trainer(name: str) -> bool:
    """A module (or a name in it) of an algorithm's trainer side: not its schema or its plain math."""
    parts = name.split(".")
    return name.startswith("cosmos_train.algorithms.") and not {"schema", "loss", "advantages"} & set(parts)


RULES = [
    (
        "schemas",
        is_schema,
        lambda name: (
            under("cosmos_train.diffusion", "cosmos_train.data", "cosmos_train.rewards")(name)
            or is_trainer(name)
        ),
    ),
    ("diffusion", under("cosmos_train.diffusion"), under("cosmos_train.algorithms")),
    ("data", under("cosmos_train.data"), under("cosmos_train.algorithms", "cosmos_train.diffusion")),
    ("rewards", under("cosmos_train.rewards"), under("cosmos_train.algorithms")),
    ("rewards-no-domains", under("cosmos_train.rewards"), lambda name: not name.startswith("cosmos_train")),
]


@pytest.mark.parametrize(("layer", "members", "forbidden"), RULES, ids=[rule[0] for rule in RULES])
def test_lower_layers_do_not_import_upper_ones(layer, members, forbidden):
    offending = {
        module: sorted(filter(forbidden, imports))
        for module, imports in MODULES.items()
        if members(module) and any(map(forbidden, imports))
    }
    assert not offending, offending


def test_the_schema_layer_is_found():
    schemas = [name for name in MODULES if is_schema(name)]
    assert len(schemas) >= 12, schemas  # config/*, and the schema of each of the 8 algorithm folders


KIND_NAMES = ("sft", "grpo", "diffusion-sft", "nft", "flow-grpo", "ddrl")


def string_constants(path: Path) -> list[str]:
    """Every string constant of a module but its docstrings and f-string text (what it compares or looks up)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    formatted = {
        id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and id(node) not in formatted
    ]


def test_only_the_algorithms_and_the_registry_name_a_kind():
    """A module that matched a kind's name (`kind.name == "nft"`, `getattr(config, kind.name)`) would miss kinds
    added later, or from another package; the algorithms answer instead."""
    allowed = under("cosmos_train.algorithms", "cosmos_train.kinds")
    offending = {}
    for path in PACKAGE.rglob("*.py"):
        if allowed(module_name(path)):
            continue
        named = [text for text in string_constants(path) if text in KIND_NAMES]
        source = path.read_text()
        named += re.findall(r"\bkind\.name\s*[!=]=|getattr\([^)]*kind\.name", source)
        if named:
            offending[module_name(path)] = named
    assert not offending, offending


def test_the_readers_see_what_they_check():
    """They would catch a violation: the trainers import diffusion/ and schemas, relative imports resolve, and a
    module comparing a kind's name is found."""
    assert "cosmos_train.diffusion.weights" in MODULES["cosmos_train.algorithms.nft.trainer"]
    assert "cosmos_train.algorithms.diffusion_rl.trainer" in MODULES["cosmos_train.algorithms.nft.trainer"]
    assert "cosmos_train.data.records" in MODULES["cosmos_train.data.pairs"]
    assert "cosmos_train.config" in MODULES["cosmos_train.algorithms.nft.schema"] or any(
        name.startswith("cosmos_train.config") for name in MODULES["cosmos_train.algorithms.nft.schema"]
    )
    kinds = PACKAGE / "kinds.py"
    assert "nft" in string_constants(kinds)  # the registry names them: the reader sees string constants
