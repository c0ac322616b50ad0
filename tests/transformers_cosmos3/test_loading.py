import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    AutoProcessor,
    Cosmos3EdgeForConditionalGeneration,
    Cosmos3OmniForConditionalGeneration,
)

import transformers_cosmos3
from transformers_cosmos3 import Cosmos3ForConditionalGeneration, MissingWeightsError

# (reasoner family, layout): every layout of each family (vLLM reads Edge from the diffusers export).
CASES = [
    *[("cosmos3_omni", layout) for layout in ("transformers", "diffusers", "flat", "framework", "vllm")],
    *[("cosmos3_edge", layout) for layout in ("transformers", "diffusers", "flat", "framework")],
]
NATIVE = {
    "cosmos3_omni": Cosmos3OmniForConditionalGeneration,
    "cosmos3_edge": Cosmos3EdgeForConditionalGeneration,
}
SHIM = {
    "cosmos3_omni": Cosmos3ForConditionalGeneration,
    "cosmos3_edge": transformers_cosmos3.Cosmos3EdgeForConditionalGeneration,
}


@pytest.fixture(scope="module")
def inputs(family_layouts):
    """{family: a chat turn with an image}, so the ViT and the text tower both shape the logits."""
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}]
    batches = {}
    for family, layouts in family_layouts.items():
        processor = AutoProcessor.from_pretrained(layouts["transformers"])
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        batches[family] = processor(
            text=[text], images=[image], return_tensors="pt", return_mm_token_type_ids=True
        )
    return batches


@pytest.fixture(scope="module")
def native_logits(family_layouts, inputs):
    """{family: logits of upstream's own class loading the transformers layout}."""
    logits = {}
    for family, layouts in family_layouts.items():
        model = NATIVE[family].from_pretrained(layouts["transformers"])
        with torch.no_grad():
            logits[family] = model(**inputs[family]).logits
    return logits


@pytest.mark.parametrize(("family", "layout"), CASES)
def test_shim_loads_every_layout_bit_equal_to_native(family_layouts, inputs, native_logits, family, layout):
    model = SHIM[family].from_pretrained(family_layouts[family][layout])
    assert isinstance(model, NATIVE[family])
    with torch.no_grad():
        logits = model(**inputs[family]).logits
    assert torch.equal(logits, native_logits[family])


@pytest.mark.parametrize("family", list(NATIVE))
def test_auto_class_loads_a_diffusers_export(family_layouts, inputs, native_logits, family):
    model = AutoModelForImageTextToText.from_pretrained(family_layouts[family]["diffusers"])
    with torch.no_grad():
        assert torch.equal(model(**inputs[family]).logits, native_logits[family])


def test_each_family_names_the_other_class(family_layouts):
    with pytest.raises(
        ValueError, match=r"cosmos3_edge reasoner: load it with .*Cosmos3EdgeForConditionalGeneration"
    ):
        Cosmos3ForConditionalGeneration.from_pretrained(family_layouts["cosmos3_edge"]["flat"])
    assert transformers_cosmos3.reasoner_class(AutoConfig.for_model("cosmos3_edge")) is SHIM["cosmos3_edge"]


def _copy_flat(tiny_layouts, tmp_path):
    folder = tmp_path / "flat"
    shutil.copytree(tiny_layouts["flat"], folder)
    return folder, load_file(folder / "model.safetensors")


def test_unknown_reasoner_weight_is_named(tiny_layouts, tmp_path):
    folder, tensors = _copy_flat(tiny_layouts, tmp_path)
    tensors["layers.0.self_attn.mystery_proj.weight"] = torch.zeros(2, 2)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(MissingWeightsError, match=r"layers\.0\.self_attn\.mystery_proj\.weight"):
        Cosmos3ForConditionalGeneration.from_pretrained(folder)


def test_missing_reasoner_weight_is_named(tiny_layouts, tmp_path):
    folder, tensors = _copy_flat(tiny_layouts, tmp_path)
    del tensors["blocks.1.attn.qkv.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(MissingWeightsError, match=r"model\.visual\.blocks\.1\.attn\.qkv\.weight"):
        Cosmos3ForConditionalGeneration.from_pretrained(folder)


def test_missing_config_is_explained(tiny_layouts, tmp_path):
    folder, _ = _copy_flat(tiny_layouts, tmp_path)
    (folder / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        Cosmos3ForConditionalGeneration.from_pretrained(folder)
