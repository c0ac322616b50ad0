import subprocess
import sys
import textwrap

import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

import transformers_cosmos3


def test_native_classes_stay_on_a_transformers_that_has_them():
    assert transformers_cosmos3.REGISTERED == []
    assert transformers_cosmos3.register() == []
    config = AutoConfig.for_model("cosmos3_omni")
    assert type(config) is transformers.Cosmos3OmniConfig
    model_class = AutoModelForImageTextToText._model_mapping[type(config)]
    assert model_class is transformers.Cosmos3OmniForConditionalGeneration
    assert type(AutoConfig.for_model("cosmos3_edge")) is transformers.Cosmos3EdgeConfig


def test_registers_where_transformers_lacks_cosmos3(tmp_path):
    """Emulate an older transformers by removing the native entry before the shim is imported."""
    script = textwrap.dedent(
        """
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
        CONFIG_MAPPING._mapping.pop("cosmos3_omni")
        assert "cosmos3_omni" not in CONFIG_MAPPING
        import torch, transformers_cosmos3
        from transformers import AutoConfig, AutoModelForImageTextToText
        from transformers_cosmos3.configuration import Cosmos3OmniConfig
        assert transformers_cosmos3.REGISTERED == ["cosmos3_omni"], transformers_cosmos3.REGISTERED
        config = AutoConfig.for_model("cosmos3_omni", text_config=dict(hidden_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64, vocab_size=64,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 2, 2])),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
            patch_size=8, deepstack_visual_indexes=[0]))
        assert type(config) is Cosmos3OmniConfig
        model = AutoModelForImageTextToText.from_config(config)
        logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
        assert logits.shape == (1, 3, 64)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
