"""Every loader checks tensor names with the one shared check, and fails with the one error.

(The vLLM loader's side is in tests/vllm_cosmos3/test_vllm_loading.py.)
"""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffusers_cosmos3 import convert, load_transformer
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.layouts import WeightNamesError

STRAY = "layers.0.self_attn.mystery_proj.weight"
DROPPED = "layers.1.self_attn.to_v.weight"  # a reasoner weight, which every loader needs

LOADERS = {
    "transformers": lambda folder, tmp: Cosmos3ForConditionalGeneration.from_pretrained(folder),
    "diffusers": lambda folder, tmp: load_transformer(folder),
    "convert": lambda folder, tmp: convert(folder, tmp / "converted", to="diffusers"),
}
# The missing weight, as each loader names it (its own namespace).
MISSING_AS = {
    "transformers": "model.language_model.layers.1.self_attn.v_proj.weight",
    "diffusers": DROPPED,
    "convert": DROPPED,
}


@pytest.fixture(scope="module")
def mismatched(tiny_layouts, tmp_path_factory):
    """The flat checkpoint with one stray tensor and one reasoner weight removed."""
    folder = shutil.copytree(tiny_layouts["flat"], tmp_path_factory.mktemp("mismatched") / "flat")
    tensors = load_file(folder / "model.safetensors")
    tensors[STRAY] = torch.zeros(2, 2)
    del tensors[DROPPED]
    save_file(tensors, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize("loader", LOADERS)
def test_every_loader_names_unknown_and_missing_tensors_the_same_way(mismatched, tmp_path, loader):
    with pytest.raises(WeightNamesError) as raised:
        LOADERS[loader](mismatched, tmp_path)
    error = raised.value
    assert error.unknown == [STRAY]
    assert error.missing == [MISSING_AS[loader]]
    assert str(error) == (
        f"{mismatched}: 1 tensor(s) that map to no weight: ['{STRAY}']; "
        f"1 weight(s) that no tensor provides: ['{MISSING_AS[loader]}']"
    )
    assert not (tmp_path / "converted").exists()


def test_two_tensors_for_one_weight_are_refused(tiny_layouts, tmp_path):
    # The flat name and the transformers name of one weight, side by side: which one would win?
    folder = shutil.copytree(tiny_layouts["transformers"], tmp_path / "doubled")
    tensors = load_file(folder / "model.safetensors")
    q_proj = tensors["model.language_model.layers.0.self_attn.q_proj.weight"]
    tensors["layers.0.self_attn.to_q.weight"] = q_proj.clone()
    save_file(tensors, folder / "model.safetensors")
    for load in LOADERS.values():
        with pytest.raises(WeightNamesError, match="several tensors") as raised:
            load(folder, tmp_path)
        assert list(raised.value.duplicated.values()) == [
            ["layers.0.self_attn.to_q.weight", "model.language_model.layers.0.self_attn.q_proj.weight"]
        ]
