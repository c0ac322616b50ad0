"""The plugin loads through vLLM's entry point and only adds what vLLM lacks."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import json
import subprocess
import sys
from pathlib import Path

import vllm_cosmos3
from vllm_cosmos3 import ANY_LAYOUT_ARCH, TRANSFORMERS_ARCH


@pytest.fixture(scope="module")
def probe():
    """What loading the plugin changed, seen from a fresh interpreter (plugins load once per process)."""
    script = Path(__file__).with_name("plugin_probe.py")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_entry_point_is_declared(probe):
    assert probe["entry_points"]["cosmos3"] == "vllm_cosmos3:register"


def test_vllm_plugin_loader_registers_the_architectures(probe):
    assert not probe["plugin_imported_early"]
    assert probe["added"] == sorted([ANY_LAYOUT_ARCH, TRANSFORMERS_ARCH])
    assert probe["any_layout"] == "vllm_cosmos3.model.Cosmos3AnyLayoutForConditionalGeneration"
    assert probe["alias_is_any_layout"]
    assert probe["any_layout_subclasses_native"]


def test_registering_twice_is_harmless(probe):
    assert probe["second_register"] == []
    assert probe["entries_unchanged"]


def test_native_vllm_and_transformers_classes_untouched(probe):
    assert probe["native_entry_unchanged"]
    assert probe["native_is_vllms_class"]
    assert probe["transformers_cosmos3_imported"]
    assert probe["config_unchanged"]
    assert probe["model_unchanged"]


def test_registers_only_what_vllm_lacks(monkeypatch):
    from vllm import ModelRegistry

    # A vLLM that already knows the transformers architecture name keeps its own entry.
    models = dict(ModelRegistry.models)
    models.pop(ANY_LAYOUT_ARCH, None)
    own_entry = models[TRANSFORMERS_ARCH] = models["Cosmos3ForConditionalGeneration"]
    monkeypatch.setattr(ModelRegistry, "models", models)
    assert vllm_cosmos3.register() == [ANY_LAYOUT_ARCH]
    assert ModelRegistry.models[TRANSFORMERS_ARCH] is own_entry
    assert vllm_cosmos3.register() == []
