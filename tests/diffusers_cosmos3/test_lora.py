import torch
from peft import LoraConfig, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from diffusers_cosmos3 import (
    lora_to_diffusers,
    lora_to_framework,
    target_modules_to_diffusers,
    target_modules_to_framework,
)

TARGETS = ["to_q", "to_v", "add_q_proj", "add_v_proj", "to_add_out"]


def _adapted_transformer(seed):
    from diffusers_cosmos3 import testing as tiny

    transformer = tiny.build_transformer(tiny.build_tokenizer())
    transformer.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS, init_lora_weights=False))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in transformer.named_parameters():
            if "lora_" in name:
                parameter.normal_(0, 0.5)
    return transformer


def test_target_module_names_translate_both_ways():
    framework = target_modules_to_framework(TARGETS)
    assert framework == ["q_proj", "v_proj", "q_proj_moe_gen", "v_proj_moe_gen", "o_proj_moe_gen"]
    assert target_modules_to_diffusers(framework) == TARGETS


def test_peft_adapter_translates_to_framework_modules_and_back(tiny_layouts):
    transformer = _adapted_transformer(seed=1)
    adapter = get_peft_model_state_dict(transformer)
    framework = lora_to_framework(adapter)
    # Every framework LoRA tensor sits on a module the framework checkpoint really has.
    checkpoint_keys = set(load_file(tiny_layouts["framework"] / "model.safetensors"))
    for key in framework:
        module = key.split(".lora_")[0]
        assert module + ".weight" in checkpoint_keys, key
    assert any("q_proj_moe_gen.lora_A" in k for k in framework)
    assert any("o_proj_moe_gen.lora_B" in k for k in framework)
    back = lora_to_diffusers(framework)
    assert back.keys() == adapter.keys()
    assert all(torch.equal(back[k], adapter[k]) for k in adapter)


def test_translated_adapter_reproduces_outputs():
    """A framework-named adapter, brought back, makes a fresh model compute exactly the same."""
    source = _adapted_transformer(seed=2)
    framework = lora_to_framework(get_peft_model_state_dict(source))
    target = _adapted_transformer(seed=3)
    result = set_peft_model_state_dict(target, lora_to_diffusers(framework))
    assert not result.unexpected_keys
    for (name, a), b in zip(source.named_parameters(), target.parameters(), strict=True):
        assert torch.equal(a, b), name
