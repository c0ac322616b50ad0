"""A raw framework checkpoint holds two copies: `net_ema.` (the default) and `net.` (on request).

Each loader must return exactly the tensors of the copy asked for, compared tensor by tensor
with the source file as safetensors reads it.
"""

import pytest
import torch
from safetensors.torch import load_file

from diffusers_cosmos3 import convert, load_transformer
from diffusers_cosmos3.convert import open_checkpoint
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import load_tensors
from transformers_cosmos3.layouts import Layout, from_layout, is_generator_key, is_vision_key, to_layout

COPIES = [
    pytest.param(True, "net_ema.", "net.", id="ema"),
    pytest.param(False, "net.", "net_ema.", id="regular"),
]


@pytest.fixture(scope="module")
def source(tiny_layouts):
    """{stored name: tensor} of the framework checkpoint, straight from the file."""
    tensors = load_file(tiny_layouts["framework"] / "model.safetensors")
    assert any(k.startswith("net.") for k in tensors) and any(k.startswith("net_ema.") for k in tensors)
    return tensors


def copy_of(source, prefix):
    """{canonical name: tensor} of one copy (names read by stripping the prefix, not by the loaders)."""
    return {
        from_layout(k[len(prefix) :], Layout.FRAMEWORK): v for k, v in source.items() if k.startswith(prefix)
    }


def assert_is_copy(loaded: dict, chosen: dict, other: dict) -> None:
    assert loaded.keys() == chosen.keys()
    assert [k for k in chosen if not torch.equal(loaded[k], chosen[k])] == []
    # The copies differ in every tensor, so the equality above tells them apart.
    assert [k for k in chosen if torch.equal(chosen[k], other[k])] == []


@pytest.mark.parametrize(("prefer_ema", "prefix", "other_prefix"), COPIES)
def test_transformers_shim_loads_the_chosen_copy(tiny_layouts, source, prefer_ema, prefix, other_prefix):
    model = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["framework"], prefer_ema=prefer_ema)

    def reasoner(copy):
        return {to_layout(k, Layout.TRANSFORMERS): v for k, v in copy.items() if not is_generator_key(k)}

    chosen, other = reasoner(copy_of(source, prefix)), reasoner(copy_of(source, other_prefix))
    assert_is_copy(model.state_dict(), chosen, other)


@pytest.mark.parametrize(("prefer_ema", "prefix", "other_prefix"), COPIES)
def test_diffusers_shim_loads_the_chosen_copy(tiny_layouts, source, prefer_ema, prefix, other_prefix):
    transformer = load_transformer(tiny_layouts["framework"], prefer_ema=prefer_ema)

    def generator(copy):
        return {k: v for k, v in copy.items() if not is_vision_key(k)}

    chosen, other = generator(copy_of(source, prefix)), generator(copy_of(source, other_prefix))
    assert_is_copy(transformer.state_dict(), chosen, other)


@pytest.mark.parametrize(("prefer_ema", "prefix", "other_prefix"), COPIES)
def test_converter_writes_the_chosen_copy(tiny_layouts, source, tmp_path, prefer_ema, prefix, other_prefix):
    out = convert(tiny_layouts["framework"], tmp_path / "out", to="diffusers", prefer_ema=prefer_ema)
    converted = open_checkpoint(out)
    loaded = load_tensors(converted.files, converted.canonical)
    assert_is_copy(loaded, copy_of(source, prefix), copy_of(source, other_prefix))
