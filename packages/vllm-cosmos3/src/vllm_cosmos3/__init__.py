"""vLLM general plugin: serve the Cosmos3 reasoner from a checkpoint of any layout.

vLLM calls `register()` (entry point group `vllm.general_plugins`) in every process it starts. It
adds model architectures to vLLM's registry and nothing else: the native `Cosmos3ForConditionalGeneration`
stays as it is, and transformers' registries (`cosmos3_omni`) are never touched, since replacing
the native config breaks vLLM's own loader.
"""

__version__ = "0.1.0"

# Selected with `hf_overrides={"architectures": [ANY_LAYOUT_ARCH]}`.
ANY_LAYOUT_ARCH = "Cosmos3AnyLayoutForConditionalGeneration"
# The name transformers' `save_pretrained` writes into config.json; vLLM does not know it.
TRANSFORMERS_ARCH = "Cosmos3OmniForConditionalGeneration"
# Imported lazily by vLLM (a string, not the class), so registering stays cheap in every process.
MODEL_CLASS = "vllm_cosmos3.model:Cosmos3AnyLayoutForConditionalGeneration"


def register() -> list[str]:
    """Register the architectures the installed vLLM lacks; returns those added (none the second time)."""
    from vllm import ModelRegistry

    missing = [
        arch
        for arch in (ANY_LAYOUT_ARCH, TRANSFORMERS_ARCH)
        if arch not in ModelRegistry.get_supported_archs()
    ]
    for arch in missing:
        ModelRegistry.register_model(arch, MODEL_CLASS)
    return missing
