"""The key table against transformers' own Cosmos3 names, which this project did not write.

References, for both reasoner families (Nano/Super `cosmos3_omni`, Edge `cosmos3_edge`): the
checkpoint conversion transformers applies when its native class loads a unified (flat-named)
checkpoint (`transformers/conversion_mapping.py`), the list of generator-tower names the native class
drops on load, and the names its `save_pretrained` writes. The canonical names come from upstream
classes too: diffusers' `Cosmos3OmniTransformer` (relu2 for Edge), transformers' Qwen3-VL ViT, and
Edge's SigLIP2 ViT and projector as the native Edge class names them.
"""

import re

import pytest
import torch
from diffusers import Cosmos3OmniTransformer
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from diffusers_cosmos3.testing import build_transformer
from transformers_cosmos3 import reasoner_class, testing
from transformers_cosmos3.layouts import (
    EDGE_VISION_ROOTS,
    Layout,
    Reasoner,
    from_layout,
    is_generator_key,
    to_layout,
)


@pytest.fixture(scope="module", params=list(Reasoner))
def family(request) -> Reasoner:
    return request.param


@pytest.fixture(scope="module")
def native(family):
    """transformers' own Cosmos3 reasoner of `family` for the tiny config, on the meta device (names only)."""
    config = testing.reasoner_config(testing.build_tokenizer(), family=family)
    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(config)


@pytest.fixture(scope="module")
def canonical_names(family, native):
    """Every weight name of the flat (diffusers) namespace, from the upstream classes themselves.

    The diffusers transformer with action and sound heads (both towers), plus the ViT: Qwen3-VL's, or
    Edge's SigLIP2 ViT and projector under the names the native Edge class gives them. Upstream's Edge
    class lists no sound names to drop (transformers 5.23), so Edge is checked without sound heads.
    """
    tokenizer = testing.build_tokenizer()
    sound = family is Reasoner.OMNI
    with torch.device("meta"):
        transformer = build_transformer(tokenizer, action=True, sound=sound, family=family)
        if family is Reasoner.EDGE:
            vision = sorted(k for k in native.state_dict() if k.startswith(EDGE_VISION_ROOTS))
        else:
            vision = sorted(Qwen3VLVisionModel(testing.vision_config()).state_dict())
    assert isinstance(transformer, Cosmos3OmniTransformer)
    return sorted(transformer.state_dict()) + vision


def transformers_load_name(native, key: str) -> str:
    """The name transformers' own loader gives a checkpoint tensor `key` (its conversion mapping)."""
    transforms = get_model_conversion_mapping(native)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamed, _ = rename_source_key(key, renamings, converters, native.base_model_prefix, native.state_dict())
    return renamed


def dropped_by_transformers(native, key: str) -> bool:
    """Whether the native class drops `key` on load (generator tower, sound and action heads)."""
    patterns = type(native)._keys_to_ignore_on_load_unexpected
    return any(re.search(pattern, key) for pattern in patterns)


def test_generator_split_is_the_one_transformers_drops(native, canonical_names):
    assert any(dropped_by_transformers(native, k) for k in canonical_names)  # the list is not empty
    disagree = [k for k in canonical_names if is_generator_key(k) != dropped_by_transformers(native, k)]
    assert not disagree


def test_reasoner_names_are_the_ones_transformers_loads_them_as(family, native, canonical_names):
    reasoner = [k for k in canonical_names if not is_generator_key(k)]
    upstream = {k: transformers_load_name(native, k) for k in reasoner}
    ours = {k: to_layout(k, Layout.TRANSFORMERS, reasoner=family) for k in reasoner}
    assert ours == upstream
    # One to one onto the native reasoner: nothing left over, nothing missing.
    assert sorted(upstream.values()) == sorted(native.state_dict())
    assert all(from_layout(name, Layout.TRANSFORMERS) == k for k, name in ours.items())


@pytest.fixture(scope="module")
def saved_by_transformers(tmp_path_factory, family):
    """(native model with random weights, the folder its own `save_pretrained` wrote)."""
    folder = testing.save_tiny_cosmos3_reasoner(tmp_path_factory.mktemp("native-save"), family=family)
    return AutoModelForImageTextToText.from_pretrained(folder), folder


def test_shim_reads_what_transformers_writes_tensor_for_tensor(saved_by_transformers):
    # transformers writes the unified checkpoint's flat names (`layers.N.self_attn.to_k`, `blocks.N`; for
    # Edge also `to_k` and `up_proj` inside its ViT): our table must put every tensor back where the
    # native class has it, by value.
    model, folder = saved_by_transformers
    written = load_file(folder / "model.safetensors")
    assert any(".self_attn.to_k." in k for k in written)  # flat names, not the native ones
    state = reasoner_class(model.config).from_pretrained(folder).state_dict()
    expected = model.state_dict()
    assert state.keys() == expected.keys()
    assert [k for k in expected if not torch.equal(state[k], expected[k])] == []
