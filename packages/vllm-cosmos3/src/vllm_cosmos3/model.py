"""vLLM's native Cosmos3 reasoner, reading every checkpoint layout.

vLLM's `Cosmos3ForConditionalGeneration` reads only the diffusers export (flat keys under
`transformer/` and `vision_encoder/`). This subclass also reads the transformers, flat, vLLM and
raw framework (`net.` / `net_ema.`) layouts at the folder root: it renames each stored tensor into
vLLM's namespace through the shared key table (`transformers_cosmos3.layouts`), drops the
generator tower, and hands the stream to the native loader.
"""

from collections.abc import Iterable

import torch
from vllm.config import VllmConfig
from vllm.model_executor.models.cosmos3 import Cosmos3ForConditionalGeneration

from transformers_cosmos3 import layouts
from transformers_cosmos3.checkpoint import checkpoint_tensor_files, resolve_folder
from transformers_cosmos3.modeling import reasoner_state_dict_names, reasoner_weight_names


def vllm_names(stored_names: Iterable[str], layout: layouts.Layout | None = None, prefer_ema: bool = True):
    """{stored name: vLLM parameter name, or None for a tensor the reasoner does not use}.

    None covers the generator tower, the other copy of a framework checkpoint (`net.` vs
    `net_ema.`) and trainer state outside both copies.
    """
    stored_names = list(stored_names)
    canonical = layouts.canonical_names(stored_names, layout, prefer_ema=prefer_ema)
    return {
        name: None
        if name not in canonical or layouts.is_generator_key(canonical[name])
        else layouts.to_layout(canonical[name], layouts.Layout.VLLM)
        for name in stored_names
    }


class Cosmos3AnyLayoutForConditionalGeneration(Cosmos3ForConditionalGeneration):
    # A diffusers export as natively; failing that, the safetensors at the folder root.
    allow_patterns_overrides = [*Cosmos3ForConditionalGeneration.allow_patterns_overrides, "*.safetensors"]

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        # The stream vLLM hands to load_weights carries no layout; the folder's full list of names
        # decides it (and which framework copy to take) before the first tensor arrives.
        model_config = vllm_config.model_config
        self._checkpoint = model_config.model
        self._hub_kwargs = {"revision": model_config.revision}
        if vllm_config.load_config.download_dir:
            self._hub_kwargs["cache_dir"] = vllm_config.load_config.download_dir
        # `hf_overrides={"cosmos3_prefer_ema": False}` loads the `net.` copy of a framework checkpoint.
        self._prefer_ema = bool(getattr(self.config, "cosmos3_prefer_ema", True))

    def checkpoint_names(self) -> dict[str, str | None]:
        """vllm_names() of the checkpoint this model was created for (reads names only, no tensors).

        Checked first with the same name check as the transformers and diffusers loaders: an unknown
        or missing reasoner tensor is a `WeightNamesError` naming it, before any tensor is read.
        """
        folder = resolve_folder(self._checkpoint, **self._hub_kwargs)
        layout, files = checkpoint_tensor_files(folder)
        expected = reasoner_weight_names(self.config)
        reasoner_state_dict_names(files, expected, layout, prefer_ema=self._prefer_ema, source=folder)
        return vllm_names(files, layout, prefer_ema=self._prefer_ema)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        names = self.checkpoint_names()
        # A name the folder does not hold (e.g. a runtime weight update) goes to the native mapper as is.
        renamed = ((names.get(name, name), tensor) for name, tensor in weights)
        return super().load_weights((name, tensor) for name, tensor in renamed if name is not None)
