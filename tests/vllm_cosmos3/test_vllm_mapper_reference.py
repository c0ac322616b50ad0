"""The key table against vLLM's own Cosmos3 weight mapper, which this project did not write.

References: `Cosmos3ForConditionalGeneration.hf_to_vllm_mapper` (unified flat names -> vLLM, generator
tower dropped), `Qwen3VLForConditionalGeneration.hf_to_vllm_mapper` (transformers names -> vLLM), and
the flat names transformers' own `save_pretrained` writes for `cosmos3_omni`.
"""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import shutil

import torch
from safetensors import safe_open
from vllm.model_executor.models.cosmos3 import Cosmos3ForConditionalGeneration
from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration

from transformers_cosmos3.layouts import Layout, from_layout, is_generator_key, to_layout

COSMOS3_MAPPER = Cosmos3ForConditionalGeneration.hf_to_vllm_mapper
QWEN3_VL_MAPPER = Qwen3VLForConditionalGeneration.hf_to_vllm_mapper


@pytest.fixture(scope="module")
def native(vllm_state, checkpoints):
    """vLLM's own Cosmos3 class on the diffusers export written through our key table."""
    return vllm_state(
        checkpoints["export"], hf_overrides={"architectures": ["Cosmos3ForConditionalGeneration"]}
    )


@pytest.fixture(scope="module")
def flat_names_written_by_transformers(checkpoints):
    with safe_open(str(checkpoints["save_pretrained"] / "model.safetensors"), "pt") as reader:
        names = sorted(reader.keys())
    assert any(".self_attn.to_k." in name for name in names) and any(
        name.startswith("blocks.") for name in names
    )
    return names


def test_reasoner_names_are_the_ones_vllm_maps_them_to(flat_names_written_by_transformers):
    names = flat_names_written_by_transformers
    upstream = {name: COSMOS3_MAPPER.map_name(name) for name in names}
    assert None not in upstream.values()
    assert {name: to_layout(name, Layout.VLLM) for name in names} == upstream
    assert all(from_layout(vllm_name, Layout.VLLM) == name for name, vllm_name in upstream.items())


def test_generator_split_is_the_one_vllm_drops(flat_names_written_by_transformers, generator_tensors):
    names = [*flat_names_written_by_transformers, *generator_tensors]
    assert [n for n in names if is_generator_key(n) != (COSMOS3_MAPPER.map_name(n) is None)] == []


def test_transformers_names_agree_with_vllm_qwen3_vl_mapper(tiny_reasoner):
    # transformers name -> our canonical name -> vLLM's Cosmos3 mapper must land where vLLM's own
    # Qwen3-VL mapper puts the transformers name directly.
    model, _ = tiny_reasoner
    names = list(model.state_dict())
    ours = {name: COSMOS3_MAPPER.map_name(from_layout(name, Layout.TRANSFORMERS)) for name in names}
    assert ours == {name: QWEN3_VL_MAPPER.map_name(name) for name in names}


def test_export_named_by_transformers_loads_like_ours(vllm_state, checkpoints, native, tmp_path):
    # `native` is vLLM's own class on the export our key table wrote; here the same weights are named
    # by transformers' save_pretrained and read by the same native class: the two must agree.
    folder = shutil.copytree(checkpoints["save_pretrained"], tmp_path / "upstream-export")
    (folder / "transformer").mkdir()
    (folder / "model.safetensors").rename(folder / "transformer" / "model.safetensors")
    loaded = vllm_state(folder, hf_overrides={"architectures": ["Cosmos3ForConditionalGeneration"]})
    assert loaded.keys() == native.keys()
    assert [name for name in native if not torch.equal(loaded[name], native[name])] == []
