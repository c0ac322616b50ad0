import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoModelForImageTextToText, AutoProcessor, Cosmos3OmniForConditionalGeneration

from transformers_cosmos3 import Cosmos3ForConditionalGeneration, MissingWeightsError

LAYOUTS = ["transformers", "diffusers", "flat", "framework", "vllm"]


@pytest.fixture(scope="module")
def inputs(tiny_layouts):
    """A chat turn with an image, so the ViT and the text tower both shape the logits."""
    processor = AutoProcessor.from_pretrained(tiny_layouts["transformers"])
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    return processor(text=[text], images=[image], return_tensors="pt")


@pytest.fixture(scope="module")
def native_logits(tiny_layouts, inputs):
    model = Cosmos3OmniForConditionalGeneration.from_pretrained(tiny_layouts["transformers"])
    with torch.no_grad():
        return model(**inputs).logits


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shim_loads_every_layout_bit_equal_to_native(tiny_layouts, inputs, native_logits, layout):
    model = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts[layout])
    assert isinstance(model, Cosmos3OmniForConditionalGeneration)
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.equal(logits, native_logits)


def test_auto_class_loads_a_diffusers_export(tiny_layouts, inputs, native_logits):
    model = AutoModelForImageTextToText.from_pretrained(tiny_layouts["diffusers"])
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, native_logits)


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
