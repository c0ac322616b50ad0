"""Raw framework names against diffusers' own Cosmos3 converter, which this project did not write.

The reference is the rename data of `scripts/convert_cosmos3_to_diffusers.py` in the public
huggingface/diffusers repository (not shipped in the wheel, and nothing in
`diffusers/loaders/single_file_utils.py` handles Cosmos3), recorded below as data. That script
turns the framework's `net.` modules into `Cosmos3OmniTransformer` names. It covers the text
towers, the vision and sound projections and the time embedder; it drops the action heads and
does not touch the ViT, so those framework names have no upstream reference here.
"""

import json
import shutil

import pytest
import torch
from diffusers import Cosmos3OmniTransformer
from safetensors.torch import load_file, save_file
from transformers import Cosmos3OmniForConditionalGeneration

from diffusers_cosmos3 import convert, load_transformer
from diffusers_cosmos3.convert import open_checkpoint
from diffusers_cosmos3.testing import build_transformer
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import load_tensors
from transformers_cosmos3.layouts import Layout, is_vision_key, to_layout
from transformers_cosmos3.testing import build_tokenizer

# --- Reference data from huggingface/diffusers scripts/convert_cosmos3_to_diffusers.py --------------
# Framework module -> diffusers prefix (the modules are saved under these diffusers prefixes there).
UPSTREAM_MODULES = (
    ("vae2llm.", "proj_in."),
    ("llm2vae.", "proj_out."),
    ("time_embedder.mlp.0.", "time_embedder.linear_1."),
    ("time_embedder.mlp.2.", "time_embedder.linear_2."),
    ("sound2llm.", "audio_proj_in."),
    ("llm2sound.", "audio_proj_out."),
    ("sound_modality_embed", "audio_modality_embed"),
)
# `language_model` keys lose their leading `model.`, then the first matching attention rename applies.
UPSTREAM_LANGUAGE_MODEL = "language_model."
UPSTREAM_ATTENTION = (
    (".q_proj_moe_gen.", ".add_q_proj."),
    (".k_proj_moe_gen.", ".add_k_proj."),
    (".v_proj_moe_gen.", ".add_v_proj."),
    (".o_proj_moe_gen.", ".to_add_out."),
    (".q_norm_moe_gen.", ".norm_added_q."),
    (".k_norm_moe_gen.", ".norm_added_k."),
    (".q_proj.", ".to_q."),
    (".k_proj.", ".to_k."),
    (".v_proj.", ".to_v."),
    (".o_proj.", ".to_out."),
    (".q_norm.", ".norm_q."),
    (".k_norm.", ".norm_k."),
)
# ------------------------------------------------------------------------------------------------------


def upstream_to_diffusers(framework_key: str) -> str | None:
    """Where diffusers' converter puts a framework tensor (`net.` removed); None if it drops it."""
    for module, target in UPSTREAM_MODULES:
        if framework_key.startswith(module):
            return target + framework_key[len(module) :]
    if not framework_key.startswith(UPSTREAM_LANGUAGE_MODEL):
        return None
    key = framework_key[len(UPSTREAM_LANGUAGE_MODEL) :].removeprefix("model.")
    for old, new in UPSTREAM_ATTENTION:
        if old in key:
            return key.replace(old, new)
    return key


def upstream_to_framework(diffusers_key: str) -> str | None:
    """The framework name diffusers' converter reads a transformer tensor from (its renames reversed).

    Inside `language_model`, the Qwen layout nests the decoder under `model.` and keeps `lm_head`
    beside it. None for the action heads, which that converter does not carry.
    """
    if diffusers_key.startswith(("action_proj_in.", "action_proj_out.", "action_modality_embed")):
        return None
    for module, target in UPSTREAM_MODULES:
        if diffusers_key.startswith(target):
            return module + diffusers_key[len(target) :]
    key = diffusers_key
    for old, new in UPSTREAM_ATTENTION:
        if new in key:
            key = key.replace(new, old)
            break
    nesting = "" if key.startswith("lm_head.") else "model."
    framework = UPSTREAM_LANGUAGE_MODEL + nesting + key
    assert upstream_to_diffusers(framework) == diffusers_key  # the reversal is exact
    return framework


@pytest.fixture(scope="module")
def transformer_names():
    """Every `Cosmos3OmniTransformer` weight name, with action and sound heads (upstream's class)."""
    with torch.device("meta"):
        return sorted(build_transformer(build_tokenizer(), action=True, sound=True).state_dict())


def test_framework_names_are_the_ones_diffusers_converter_reads(transformer_names):
    covered = {k: upstream_to_framework(k) for k in transformer_names}
    assert {k for k, framework in covered.items() if framework is None} == {
        k for k in transformer_names if k.startswith("action_")
    }
    covered = {k: framework for k, framework in covered.items() if framework is not None}
    ours = {k: to_layout(k, Layout.FRAMEWORK).removeprefix("net.") for k in covered}
    assert ours == covered
    assert all(upstream_to_diffusers(name) == k for k, name in ours.items())


@pytest.fixture(scope="module")
def upstream_framework(tiny_layouts, tmp_path_factory):
    """A raw framework checkpoint named by diffusers' converter, from the diffusers export's tensors.

    The export's names are upstream's own (written by `save_pretrained`). Action heads and ViT have no
    upstream framework name, so only those go through our table; the check below says which.
    """
    export = tiny_layouts["diffusers"]
    folder = tmp_path_factory.mktemp("upstream-framework")
    transformer = load_file(export / "transformer" / "diffusion_pytorch_model.safetensors")
    vision = load_file(export / "vision_encoder" / "model.safetensors")
    tensors, ours_only = {}, []
    for name, tensor in transformer.items():
        framework = upstream_to_framework(name)
        if framework is None:
            framework = to_layout(name, Layout.FRAMEWORK).removeprefix("net.")
            ours_only.append(name)
        tensors["net." + framework] = tensor
    for name, tensor in vision.items():
        tensors[to_layout(name, Layout.FRAMEWORK)] = tensor
    assert all(name.startswith("action_") for name in ours_only)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    # The configs a converted framework folder carries: the reasoner's at the root, the pipeline's below.
    shutil.copy(export / "config.json", folder / "config.json")
    for sub in ("transformer", "vision_encoder"):
        (folder / "pipeline" / sub).mkdir(parents=True)
        shutil.copy(export / sub / "config.json", folder / "pipeline" / sub / "config.json")
    (folder / "pipeline" / "model_index.json").write_text(json.dumps({"_class_name": "Cosmos3OmniPipeline"}))
    return folder


def assert_equal_states(loaded: dict, reference: dict) -> None:
    assert loaded.keys() == reference.keys()
    assert [name for name in reference if not torch.equal(loaded[name], reference[name])] == []


def test_diffusers_shim_loads_upstream_framework_names_as_upstream_does(tiny_layouts, upstream_framework):
    reference = Cosmos3OmniTransformer.from_pretrained(tiny_layouts["diffusers"], subfolder="transformer")
    assert_equal_states(load_transformer(upstream_framework).state_dict(), reference.state_dict())


def test_transformers_shim_loads_upstream_framework_names_as_upstream_does(tiny_layouts, upstream_framework):
    # Reference: transformers' native class on the diffusers export, through its own conversion mapping.
    reference = Cosmos3OmniForConditionalGeneration.from_pretrained(tiny_layouts["diffusers"])
    loaded = Cosmos3ForConditionalGeneration.from_pretrained(upstream_framework)
    assert_equal_states(loaded.state_dict(), reference.state_dict())


def test_converter_turns_upstream_framework_names_into_the_export(tiny_layouts, upstream_framework, tmp_path):
    converted = convert(upstream_framework, tmp_path / "diffusers", to="diffusers")
    source = open_checkpoint(converted)
    tensors = load_tensors(source.files, source.canonical)
    export = load_file(tiny_layouts["diffusers"] / "transformer" / "diffusion_pytorch_model.safetensors")
    export |= load_file(tiny_layouts["diffusers"] / "vision_encoder" / "model.safetensors")
    assert_equal_states(tensors, export)
    assert any(is_vision_key(name) for name in tensors)
