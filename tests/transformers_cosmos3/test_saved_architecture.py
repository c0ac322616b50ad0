"""A reasoner saved through the shim names transformers' native class, as upstream's own save does."""

import json

from transformers import AutoModelForImageTextToText, Cosmos3OmniForConditionalGeneration

from transformers_cosmos3 import Cosmos3ForConditionalGeneration


def test_save_pretrained_writes_the_native_architecture(tiny_layouts, tmp_path):
    model = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["framework"])
    model.save_pretrained(tmp_path / "saved")
    # vLLM's native class of the shim's name reads only the diffusers export: the shim's own name here
    # would send vLLM to it (see tests/vllm_cosmos3/test_vllm_export.py).
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["architectures"] == [Cosmos3OmniForConditionalGeneration.__name__]
    reloaded = AutoModelForImageTextToText.from_pretrained(tmp_path / "saved")
    assert type(reloaded) is Cosmos3OmniForConditionalGeneration
    assert reloaded.state_dict().keys() == model.state_dict().keys()
