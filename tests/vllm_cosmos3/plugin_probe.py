"""Run by test_vllm_plugin.py in a fresh interpreter: load the plugin as vLLM does, print what changed."""

import importlib.metadata
import json
import sys

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING
from vllm import ModelRegistry
from vllm.plugins import load_general_plugins

NATIVE = "Cosmos3ForConditionalGeneration"


def transformers_cosmos3_classes():
    config = CONFIG_MAPPING["cosmos3_omni"]
    return config, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING[config]


archs_before = set(ModelRegistry.get_supported_archs())
native_entry = ModelRegistry.models[NATIVE]
transformers_before = transformers_cosmos3_classes()
plugin_imported_early = "vllm_cosmos3" in sys.modules

load_general_plugins()  # vLLM's own loader: every entry point of `vllm.general_plugins`

import vllm_cosmos3  # noqa: E402

added = sorted(set(ModelRegistry.get_supported_archs()) - archs_before)
entries = {arch: ModelRegistry.models[arch] for arch in added}
second = vllm_cosmos3.register()
# Resolving the classes imports vllm_cosmos3.model and with it transformers_cosmos3.
any_layout = ModelRegistry.models[vllm_cosmos3.ANY_LAYOUT_ARCH].load_model_cls()
alias = ModelRegistry.models[vllm_cosmos3.TRANSFORMERS_ARCH].load_model_cls()
native = ModelRegistry.models[NATIVE].load_model_cls()
from vllm.model_executor.models.cosmos3 import Cosmos3ForConditionalGeneration  # noqa: E402

transformers_after = transformers_cosmos3_classes()
print(
    json.dumps(
        {
            "entry_points": {
                ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")
            },
            "plugin_imported_early": plugin_imported_early,
            "added": added,
            "second_register": second,
            "entries_unchanged": all(ModelRegistry.models[arch] is entry for arch, entry in entries.items()),
            "native_entry_unchanged": ModelRegistry.models[NATIVE] is native_entry,
            "native_is_vllms_class": native is Cosmos3ForConditionalGeneration,
            "any_layout": f"{any_layout.__module__}.{any_layout.__qualname__}",
            "alias_is_any_layout": alias is any_layout,
            "any_layout_subclasses_native": issubclass(any_layout, Cosmos3ForConditionalGeneration),
            "transformers_cosmos3_imported": "transformers_cosmos3" in sys.modules,
            "config_unchanged": transformers_after[0]
            is transformers_before[0]
            is transformers.Cosmos3OmniConfig,
            "model_unchanged": transformers_after[1]
            is transformers_before[1]
            is transformers.Cosmos3OmniForConditionalGeneration,
        }
    )
)
