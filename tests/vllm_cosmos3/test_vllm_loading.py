"""The any-layout class loads every checkpoint layout into exactly what native vLLM loads from the export."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import torch

from transformers_cosmos3.layouts import Layout, canonical_names, is_generator_key
from vllm_cosmos3 import ANY_LAYOUT_ARCH

NATIVE_ARCH = "Cosmos3ForConditionalGeneration"


@pytest.fixture(scope="module")
def native(vllm_state, checkpoints):
    """vLLM's own Cosmos3 class on the one layout it reads (the diffusers export)."""
    return vllm_state(checkpoints["export"], hf_overrides={"architectures": [NATIVE_ARCH]})


def assert_same_parameters(loaded, reference):
    assert loaded.keys() == reference.keys()
    assert all(tensor.numel() for tensor in reference.values())
    different = [name for name in reference if not torch.equal(loaded[name], reference[name])]
    assert not different, f"differs from the native load: {different}"


def test_native_load_has_the_whole_reasoner(native, tiny_reasoner):
    # The reference itself must cover the ViT and the text tower, or the comparisons prove little.
    assert any(name.startswith("visual.blocks.") for name in native)
    assert any(name.startswith("language_model.model.layers.1.") for name in native)
    model, _ = tiny_reasoner
    embed = model.state_dict()["model.language_model.embed_tokens.weight"]
    # vLLM pads the vocabulary rows of its embedding.
    assert torch.equal(native["language_model.model.embed_tokens.weight"][: embed.shape[0]], embed)


def test_checkpoints_hold_generator_weights(checkpoints, generator_tensors):
    from transformers_cosmos3.checkpoint import checkpoint_tensor_files

    assert all(is_generator_key(name) for name in generator_tensors)
    for layout in ("export", "transformers", "flat", "vllm", "framework"):
        _, files = checkpoint_tensor_files(checkpoints[layout])
        canonical = canonical_names(files, Layout.DIFFUSERS if layout == "export" else None)
        assert generator_tensors.keys() <= set(canonical.values()), layout


def test_name_table_drops_generator_other_copy_and_trainer_state(checkpoints, generator_tensors):
    from transformers_cosmos3.checkpoint import checkpoint_tensor_files
    from vllm_cosmos3.model import vllm_names

    _, files = checkpoint_tensor_files(checkpoints["framework"])
    names = vllm_names(files)
    assert names["trainer.step"] is None
    assert all(name is None for stored, name in names.items() if stored.startswith("net."))
    ema = {stored: name for stored, name in names.items() if stored.startswith("net_ema.")}
    dropped = {stored for stored, name in ema.items() if name is None}
    assert len(dropped) == len(generator_tensors)
    assert all(is_generator_key(canonical_names([stored])[stored]) for stored in dropped)
    assert all(name.startswith(("language_model.", "visual.")) for name in ema.values() if name)


@pytest.mark.parametrize("layout", ["export", "transformers", "flat", "vllm", "framework"])
def test_any_layout_matches_native_bit_exactly(layout, vllm_state, checkpoints, native):
    loaded = vllm_state(checkpoints[layout], hf_overrides={"architectures": [ANY_LAYOUT_ARCH]})
    assert_same_parameters(loaded, native)


def test_transformers_save_pretrained_loads_without_overrides(vllm_state, checkpoints, native):
    # config.json names `Cosmos3OmniForConditionalGeneration`, which vLLM lacks and the plugin adds.
    import json

    config = json.loads((checkpoints["save_pretrained"] / "config.json").read_text())
    assert config["architectures"] == ["Cosmos3OmniForConditionalGeneration"]
    assert_same_parameters(vllm_state(checkpoints["save_pretrained"]), native)


def test_framework_net_copy_on_request(vllm_state, checkpoints, native):
    overrides = {"architectures": [ANY_LAYOUT_ARCH], "cosmos3_prefer_ema": False}
    loaded = vllm_state(checkpoints["framework"], hf_overrides=overrides)
    assert loaded.keys() == native.keys()
    # `net.` is the EMA copy plus noise: every checkpoint tensor differs, yet stays close.
    weights = {name: tensor for name, tensor in native.items() if name.endswith((".weight", ".bias"))}
    assert len(weights) > 50
    for name, tensor in weights.items():
        assert not torch.equal(loaded[name], tensor), name
        assert torch.allclose(loaded[name], tensor, atol=0.1), name


def test_native_cannot_read_the_framework_layout(vllm_state, checkpoints):
    # What the plugin is for: native vLLM finds no weights it reads in a raw framework checkpoint.
    with pytest.raises(RuntimeError, match="Cannot find any model weights"):
        vllm_state(checkpoints["framework"], hf_overrides={"architectures": [NATIVE_ARCH]})


@pytest.mark.parametrize("change", ["stray", "missing"])
def test_unknown_or_missing_reasoner_weight_is_the_shared_error(vllm_state, checkpoints, tmp_path, change):
    # Only generator weights are dropped: a stray or a missing reasoner tensor fails the load with the
    # same check (and error) as the transformers and diffusers loaders, before any tensor is read.
    import shutil

    from safetensors.torch import load_file, save_file

    from transformers_cosmos3.layouts import WeightNamesError

    folder = shutil.copytree(checkpoints["transformers"], tmp_path / change)
    tensors = load_file(folder / "model.safetensors")
    name = "model.language_model.layers.0.self_attn."
    if change == "stray":
        tensors[name + "extra_proj.weight"] = torch.zeros(4, 4)
    else:
        del tensors[name + "k_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(WeightNamesError) as raised:
        vllm_state(folder, hf_overrides={"architectures": [ANY_LAYOUT_ARCH]})
    if change == "stray":
        assert (raised.value.unknown, raised.value.missing) == ([name + "extra_proj.weight"], [])
    else:
        assert (raised.value.unknown, raised.value.missing) == ([], [name + "k_proj.weight"])
