"""The reasoner loads through transformers' own lazy loader: no state dict is built in memory.

Outputs equal to the native class are tested in test_loading.py; here, how the weights travel.
"""

import pytest

import transformers_cosmos3.modeling as modeling
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.layouts import WeightNamesError

SINGLE_FOLDER_LAYOUTS = ["transformers", "flat", "framework", "vllm", "diffusers"]


@pytest.fixture
def no_state_dict(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the shim materialised a state dict")

    monkeypatch.setattr(modeling, "load_tensors", refuse)


@pytest.mark.parametrize("layout", SINGLE_FOLDER_LAYOUTS)
def test_every_layout_loads_without_a_state_dict(tiny_layouts, no_state_dict, layout):
    _, info = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts[layout], output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_a_rename_the_loader_misses_is_an_error_not_a_random_init(tiny_layouts, monkeypatch):
    # The name check passes (it reads the key table); transformers then renames nothing and finds the
    # weights missing: that must raise, never leave randomly initialised weights behind.
    monkeypatch.setattr(modeling.layouts, "canonical_key_mapping", lambda layout, prefix="": {})
    with pytest.raises(WeightNamesError, match="no tensor provides"):
        Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["vllm"])


def test_saving_writes_transformers_names_whatever_was_read(tiny_layouts, tmp_path):
    from safetensors import safe_open
    from transformers import Cosmos3OmniForConditionalGeneration

    Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["framework"]).save_pretrained(tmp_path / "a")
    Cosmos3OmniForConditionalGeneration.from_pretrained(tiny_layouts["transformers"]).save_pretrained(
        tmp_path / "b"
    )
    names = {}
    for side in ("a", "b"):
        with safe_open(str(tmp_path / side / "model.safetensors"), "pt") as saved:
            names[side] = set(saved.keys())
    assert names["a"] == names["b"]
