"""Packaging hygiene: the dependency graph points one way, and the packages declare what they import.

cosmos-train sits on top of the shims, so nothing below it (the shims, their `testing` modules and
their tests) may need it; the vLLM env does not even install it.
"""

import ast
import importlib.metadata
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["transformers-cosmos3", "diffusers-cosmos3", "vllm-cosmos3", "cosmos-train"]
SHIM_TEST_FILES = [
    ROOT / "tests" / "conftest.py",
    *sorted((ROOT / "tests" / "transformers_cosmos3").rglob("*.py")),
    *sorted((ROOT / "tests" / "diffusers_cosmos3").rglob("*.py")),
    *sorted((ROOT / "tests" / "vllm_cosmos3").rglob("*.py")),
]

# Declared but not imported by the package's own code, on purpose: {package: {distribution: why}}.
RUNTIME_ONLY = {
    "cosmos-train": {
        "torchvision": "transformers' Qwen-VL image/video processors import it",
        "accelerate": "`accelerate launch` is the documented launcher; the Trainer runs on it",
    },
}


def _imported_modules(files) -> dict[str, set[str]]:
    """{top-level module: files importing it}, for every absolute import, function-local ones included."""
    found: dict[str, set[str]] = {}
    for file in files:
        for node in ast.walk(ast.parse(Path(file).read_text(), filename=str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(Path(file).name)
    return found


def _run(script: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout
    )


def test_shim_tests_never_import_cosmos_train():
    importers = _imported_modules(SHIM_TEST_FILES).get("cosmos_train", set())
    assert not importers, f"shim tests import cosmos_train: {sorted(importers)}"


def test_shim_testing_modules_build_save_and_load_without_cosmos_train(tmp_path):
    script = f"""
        import sys
        from pathlib import Path

        sys.modules["cosmos_train"] = None  # any import of it now raises ImportError
        from diffusers_cosmos3.testing import save_tiny_cosmos3
        from transformers_cosmos3.testing import build_tokenizer, save_tiny_cosmos3_reasoner

        import diffusers_cosmos3
        from transformers_cosmos3 import Cosmos3ForConditionalGeneration

        root = Path({str(tmp_path)!r})
        reasoner = Cosmos3ForConditionalGeneration.from_pretrained(save_tiny_cosmos3_reasoner(root / "reasoner"))
        repo = save_tiny_cosmos3(root / "export")
        pipeline = diffusers_cosmos3.load_pipeline(repo)
        from_export = Cosmos3ForConditionalGeneration.from_pretrained(repo)
        ids = build_tokenizer()("a red cube", return_tensors="pt").input_ids
        print(tuple(reasoner(input_ids=ids).logits.shape), tuple(from_export(input_ids=ids).logits.shape),
              type(pipeline).__name__)
    """
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "Cosmos3OmniPipeline"


def test_importing_a_shim_does_not_import_its_testing_module():
    result = _run(
        """
        import sys
        import diffusers_cosmos3, transformers_cosmos3
        print(sorted(m for m in sys.modules if m.endswith(".testing")))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


def test_convert_help_imports_neither_torch_nor_diffusers():
    """`cosmos3-convert --help` must not pay for torch/diffusers/transformers (it took 14 s when it did)."""
    result = _run(
        """
        import json, sys
        sys.argv = ["cosmos3-convert", "--help"]
        from diffusers_cosmos3.convert import main
        try:
            main()
        except SystemExit as exit:
            assert exit.code == 0, exit.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "diffusers", "transformers"))
        print(json.dumps(heavy))
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Usage: cosmos3-convert" in result.stdout
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_lazy_package_names_resolve_to_upstream_and_convert_stays_the_function():
    import diffusers

    import diffusers_cosmos3
    import diffusers_cosmos3.loading  # imports the `convert` submodule, which must not shadow the function

    assert diffusers_cosmos3.Cosmos3OmniPipeline is diffusers.Cosmos3OmniPipeline
    assert diffusers_cosmos3.load_pipeline is diffusers_cosmos3.loading.load_pipeline
    assert callable(diffusers_cosmos3.convert) and diffusers_cosmos3.convert.__name__ == "convert"
    assert set(diffusers_cosmos3.__all__) <= set(dir(diffusers_cosmos3)) | set(diffusers_cosmos3._LAZY)
    with pytest.raises(AttributeError):
        diffusers_cosmos3.not_a_name  # noqa: B018


def _requirement_names(specs) -> set[str]:
    return {_normalize(Requirement(spec).name) for spec in specs}


def _normalize(distribution: str) -> str:
    return distribution.lower().replace("_", "-")


@pytest.mark.parametrize("package", PACKAGES)
def test_declared_dependencies_match_imports(package):
    folder = ROOT / "packages" / package
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    extras = _requirement_names(
        spec for specs in project.get("optional-dependencies", {}).values() for spec in specs
    )
    own = {path.name for path in (folder / "src").iterdir()}
    module_to_distributions = importlib.metadata.packages_distributions()
    importers: dict[str, set[str]] = {}  # {distribution: files importing it}
    for module, files in _imported_modules(sorted((folder / "src").rglob("*.py"))).items():
        if module in sys.stdlib_module_names or module in own:
            continue
        for distribution in module_to_distributions.get(module, [module]):
            importers.setdefault(_normalize(distribution), set()).update(files)
    undeclared = {name: sorted(files) for name, files in importers.items() if name not in declared | extras}
    assert not undeclared, f"{package} imports but does not declare: {undeclared}"
    unused = declared - set(importers) - set(RUNTIME_ONLY.get(package, {}))
    assert not unused, f"{package} declares but never imports: {sorted(unused)}"
