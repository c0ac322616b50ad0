"""Sharded checkpoints (a safetensors index over several files) in every layout load like unsharded ones.

References are upstream's own loaders on the unsharded tiny repo: diffusers' transformer and
transformers' `Cosmos3OmniForConditionalGeneration`.
"""

import json
import shutil

import pytest
import torch
from diffusers import Cosmos3OmniTransformer
from transformers import Cosmos3OmniForConditionalGeneration

import diffusers_cosmos3
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import INDEX_SUFFIX, load_tensors, tensor_files
from transformers_cosmos3.layouts import WeightNamesError

LAYOUTS = ["diffusers", "transformers", "flat", "framework", "vllm"]
SHARD_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def sharded(tiny_layouts, tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    return {
        layout: diffusers_cosmos3.convert(
            tiny_layouts["diffusers"], root / layout, to=layout, max_shard_bytes=SHARD_BYTES
        )
        for layout in LAYOUTS
    }


@pytest.fixture(scope="module")
def upstream_transformer(tiny_layouts):
    return Cosmos3OmniTransformer.from_pretrained(
        tiny_layouts["diffusers"], subfolder="transformer"
    ).state_dict()


@pytest.fixture(scope="module")
def upstream_reasoner(tiny_layouts):
    return Cosmos3OmniForConditionalGeneration.from_pretrained(tiny_layouts["transformers"]).state_dict()


def assert_equal_states(loaded, reference):
    assert loaded.keys() == reference.keys()
    assert all(torch.equal(loaded[name], tensor) for name, tensor in reference.items())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_is_really_sharded(sharded, layout):
    folders = ["transformer", "vision_encoder"] if layout == "diffusers" else [""]
    for sub in folders:
        assert len(list((sharded[layout] / sub).glob("*" + INDEX_SUFFIX))) == 1
        assert len(list((sharded[layout] / sub).glob("*.safetensors"))) > 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pipeline_transformer_loads(sharded, upstream_transformer, layout):
    assert_equal_states(
        diffusers_cosmos3.load_transformer(sharded[layout]).state_dict(), upstream_transformer
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reasoner_loads(sharded, upstream_reasoner, layout):
    assert_equal_states(
        Cosmos3ForConditionalGeneration.from_pretrained(sharded[layout]).state_dict(), upstream_reasoner
    )


def test_native_transformers_reads_the_sharded_export_root_index(sharded, upstream_reasoner):
    loaded = Cosmos3OmniForConditionalGeneration.from_pretrained(sharded["diffusers"]).state_dict()
    assert_equal_states(loaded, upstream_reasoner)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_converts_back_bit_exact(sharded, tiny_layouts, tmp_path, layout):
    back = diffusers_cosmos3.convert(sharded[layout], tmp_path / "back", to="diffusers")
    for sub in ("transformer", "vision_encoder"):
        assert_equal_states(
            load_tensors(tensor_files(back / sub)),
            load_tensors(tensor_files(tiny_layouts["diffusers"] / sub)),
        )


def test_missing_shard_file_is_named(sharded, tmp_path):
    broken = shutil.copytree(sharded["flat"], tmp_path / "broken")
    shard = sorted(broken.glob("*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        Cosmos3ForConditionalGeneration.from_pretrained(broken)


def test_index_missing_a_tensor_is_named(sharded, tmp_path):
    broken = shutil.copytree(sharded["transformers"], tmp_path / "broken")
    index_file = next(broken.glob("*" + INDEX_SUFFIX))
    index = json.loads(index_file.read_text())
    dropped = "model.language_model.layers.0.mlp.down_proj.weight"
    del index["weight_map"][dropped]
    index_file.write_text(json.dumps(index))
    with pytest.raises(WeightNamesError, match=dropped):
        Cosmos3ForConditionalGeneration.from_pretrained(broken)
