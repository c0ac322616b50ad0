"""The Cosmos3 reasoner from a checkpoint of any layout.

`Cosmos3ForConditionalGeneration` (Nano, Super: `cosmos3_omni`, a Qwen3-VL clone) and
`Cosmos3EdgeForConditionalGeneration` (Edge: `cosmos3_edge`) are the native transformers classes with
a stricter `from_pretrained`: the folder may be a transformers, diffusers-export, flat, raw framework
(`net.`/`net_ema.`) or vLLM checkpoint, and every tensor must be accounted for. Generator-tower
weights are skipped on purpose; an unknown or a missing reasoner weight is an error that names it,
never a silent random init.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from transformers import AutoConfig
from transformers import Cosmos3EdgeForConditionalGeneration as NativeEdgeReasoner
from transformers import Cosmos3OmniForConditionalGeneration as NativeOmniReasoner

from . import layouts
from .checkpoint import (
    BASE_HINT,
    INDEX_SUFFIX,
    MissingConfigError,
    checkpoint_tensor_files,
    load_tensors,
    resolve_folder,
)

HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download")


# The error every Cosmos3 loader raises for unknown, missing or doubled tensors (`layouts.check_names`);
# the old name stays importable.
MissingWeightsError = layouts.WeightNamesError


@contextlib.contextmanager
def _zero3_init_disabled():
    """Build models plainly even inside a DeepSpeed ZeRO-3 run.

    Under ZeRO-3, transformers builds every model inside `deepspeed.zero.Init` and then initializes its
    weights for real, which fails on the meta device ("Cannot copy out of meta tensor"). The weight-name
    listing needs neither: transformers' ZeRO-3 switch is turned off for the block and then restored.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    active = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = active


# The native class of each reasoner family, by `model_type`.
NATIVE_REASONERS = {
    layouts.Reasoner.OMNI: NativeOmniReasoner,
    layouts.Reasoner.EDGE: NativeEdgeReasoner,
}


def reasoner_family(config) -> layouts.Reasoner:
    """The reasoner family of a transformers config; any other model is a one-line error."""
    try:
        return layouts.Reasoner(config.model_type)
    except ValueError:
        known = ", ".join(family.value for family in layouts.Reasoner)
        raise ValueError(f"model_type {config.model_type!r} is not a Cosmos3 reasoner ({known})") from None


def reasoner_weight_names(config) -> set[str]:
    """The transformers names of the reasoner weights a checkpoint must provide for `config`."""
    native = NATIVE_REASONERS[reasoner_family(config)]
    # A weightless meta-device copy lists the names; ZeRO-3 would partition and initialize it.
    with _zero3_init_disabled(), torch.device("meta"):
        return stored_weight_names(native(config))


def stored_weight_names(model) -> set[str]:
    """The names of `model`'s weights that a checkpoint stores (a tied `lm_head` is not stored)."""
    names = set(model.state_dict())
    config = model.config
    text_config = getattr(config, "text_config", config)
    if getattr(config, "tie_word_embeddings", False) or getattr(text_config, "tie_word_embeddings", False):
        names.discard("lm_head.weight")  # tied to the embedding: not stored
    return names


def reasoner_state_dict_names(
    stored_names,
    model_names: set[str] | None,
    layout: layouts.Layout,
    prefer_ema: bool = True,
    source="checkpoint",
    reasoner: layouts.Reasoner = layouts.Reasoner.OMNI,
) -> dict[str, str]:
    """{stored name: transformers name} for the reasoner's tensors; with `model_names`, raise on unknown,
    missing or doubled ones (without, the caller checks them later).

    Generator-tower tensors are left out on purpose (the reasoner does not use them).
    """
    canonical = layouts.canonical_names(stored_names, layout, prefer_ema=prefer_ema)
    wanted = {
        stored: layouts.to_layout(name, layouts.Layout.TRANSFORMERS, reasoner=reasoner)
        for stored, name in canonical.items()
        if not layouts.is_generator_key(name)
    }
    if model_names is not None:
        layouts.check_names(wanted, model_names, source)
    return wanted


def _missing_config_hint(folder, base) -> str:
    """Why `folder` has no reasoner config.json, and what gives one (true for each case)."""
    if (folder / "model_index.json").is_file():
        return (
            f"{folder} is a diffusers repo without the reasoner's config.json (as upstream ships it, with no "
            "vision_encoder/ either), so it cannot give the reasoner: use a Cosmos3 export of the same model, "
            "or copy its config.json and vision_encoder/ into this folder"
        )
    if base is not None:
        return f"base {folder} has no config.json; name a Cosmos3 repo with the reasoner's config.json"
    return (
        f"{folder} has no config.json (a raw trainer checkpoint holds weights only): name a Cosmos3 repo of the "
        f"same architecture that has the reasoner's config.json ({BASE_HINT})"
    )


def _generation_config(folder: Path, config):
    from transformers import GenerationConfig

    if (folder / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(folder)
    return GenerationConfig.from_model_config(config)


def _read_lazily(folder: Path, layout: layouts.Layout, files) -> bool:
    """Whether transformers' loader can read the checkpoint from `folder` itself.

    Not a DCP checkpoint (pickled metadata, read by `torch.distributed.checkpoint`), and not a diffusers
    repo without the root index over `transformer/` and `vision_encoder/` that an export writes.
    """
    if any(not isinstance(where, Path) for where in files.values()):
        return False
    if layout is layouts.Layout.DIFFUSERS:
        return (folder / ("model" + INDEX_SUFFIX)).is_file()
    return True


class _AnyLayoutReasoner:
    """`from_pretrained` from any Cosmos3 layout, and `save_pretrained` in the transformers layout, for a
    native reasoner class (the second base of each subclass below)."""

    family: layouts.Reasoner

    @staticmethod
    def _ignored_on_load(native) -> list[str]:
        """What the loader skips without a warning: upstream's generator-tower names for both families
        (a framework checkpoint's generator keys reach the loader under their framework names, which only
        the Omni list covers), and the unused copy of a raw framework checkpoint, which keeps its
        `net.`/`net_ema.` prefix (no renaming rule matches it). A weight left unloaded is still an error:
        the name check runs first, and `missing_keys` is checked after."""
        lists = [native, *NATIVE_REASONERS.values()]
        patterns = [p for cls in lists for p in (cls._keys_to_ignore_on_load_unexpected or [])]
        return list(dict.fromkeys([*patterns, r"^net(_ema)?\."]))

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """transformers' `save_pretrained`, with `architectures` naming transformers' native class.

        transformers writes the saving class's name. `Cosmos3ForConditionalGeneration` shares its name with
        vLLM's native Cosmos3 class, which reads only the diffusers export layout: a folder saved under it
        would make vLLM pick that class and find no weights. The native transformers name is what upstream
        writes, and what vllm-cosmos3 serves from this (transformers) layout.
        """
        super().save_pretrained(save_directory, *args, **kwargs)
        self.config.architectures = [NATIVE_REASONERS[self.family].__name__]
        if kwargs.get("is_main_process", True) and (Path(save_directory) / "config.json").is_file():
            self.config.save_pretrained(save_directory)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *args,
        prefer_ema: bool = True,
        base: str | os.PathLike | None = None,
        trust_dcp_pickle: bool = False,
        **kwargs,
    ):
        """Load from a hub id or folder in any Cosmos3 layout.

        `prefer_ema` picks the `net_ema.` copy of a raw framework checkpoint (else `net.`). `base`, a
        Cosmos3 repo of the same architecture with the reasoner's `config.json`, supplies the config a raw
        trainer checkpoint lacks. `trust_dcp_pickle` allows reading a torch DCP checkpoint, whose metadata
        is pickled: only for checkpoints you trust. Other keyword arguments (`dtype`, `device_map`, `attn_implementation`,
        ...) go to transformers' `from_pretrained` unchanged.
        """
        hub_kwargs = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
        folder = resolve_folder(pretrained_model_name_or_path, **hub_kwargs)
        config = kwargs.pop("config", None)
        if config is None:
            config_dir = resolve_folder(base, **hub_kwargs) if base is not None else folder
            if not (config_dir / "config.json").is_file():
                raise MissingConfigError(_missing_config_hint(config_dir, base))
            config = AutoConfig.from_pretrained(config_dir)
            if config_dir != folder and "generation_config" not in kwargs:
                # transformers would look for the generation config beside the weights; the base has it.
                kwargs["generation_config"] = _generation_config(config_dir, config)
        if reasoner_class(config) is not cls:
            raise ValueError(
                f"{pretrained_model_name_or_path} holds a {config.model_type} reasoner: load it with "
                f"transformers_cosmos3.{reasoner_class(config).__name__}"
            )
        layout, files = checkpoint_tensor_files(folder, trust_dcp_pickle)
        lazily = _read_lazily(folder, layout, files)
        # That every weight comes from exactly one tensor is checked before any tensor is read when a state
        # dict is built, and against the loaded model after a lazy load (a second, meta-device model only to
        # list the names would cost a third of a native load).
        expected = None if lazily else reasoner_weight_names(config)
        names = reasoner_state_dict_names(files, expected, layout, prefer_ema, folder, reasoner=cls.family)
        for key in HUB_KWARGS:
            kwargs.pop(key, None)
        wants_loading_info = kwargs.pop("output_loading_info", False)
        if lazily:
            # transformers' own loader reads the folder tensor by tensor, renamed on the fly (as upstream
            # reads its own checkpoints): no state dict in memory, and the other framework copy and the
            # generator tower are never read.
            prefix = (
                layouts.split_framework_keys(files, prefer_ema)[0]
                if layout is layouts.Layout.FRAMEWORK
                else ""
            )
            model, info = super().from_pretrained(
                folder,
                *args,
                config=config,
                key_mapping=layouts.canonical_key_mapping(layout, prefix) or None,
                output_loading_info=True,
                **kwargs,
            )
            # The folder's own names (its index, if any) against the loaded model's weights.
            layouts.check_names(names, stored_weight_names(model), folder)
            if info["missing_keys"]:  # our table and transformers' renaming disagree: a bug, never silent
                raise layouts.WeightNamesError(str(folder), missing=info["missing_keys"])
        else:
            state_dict = load_tensors(files, names)
            model, info = super().from_pretrained(
                None, *args, config=config, state_dict=state_dict, output_loading_info=True, **kwargs
            )
        # `save_pretrained` reverts the renaming rules recorded at load time. The shim always saves the
        # transformers layout, whatever it read: nothing to revert.
        model._weight_conversions = []
        # Record where the weights came from, as a path load would (PEFT adapters save it as their base).
        model.config._name_or_path = model.name_or_path = str(pretrained_model_name_or_path)
        return (model, info) if wants_loading_info else model


class Cosmos3ForConditionalGeneration(_AnyLayoutReasoner, NativeOmniReasoner):
    """Cosmos3 Nano / Super reasoner (`cosmos3_omni`) from a checkpoint of any layout."""

    family = layouts.Reasoner.OMNI
    _keys_to_ignore_on_load_unexpected = _AnyLayoutReasoner._ignored_on_load(NativeOmniReasoner)


class Cosmos3EdgeForConditionalGeneration(_AnyLayoutReasoner, NativeEdgeReasoner):
    """Cosmos3 Edge reasoner (`cosmos3_edge`) from a checkpoint of any layout."""

    family = layouts.Reasoner.EDGE
    _keys_to_ignore_on_load_unexpected = _AnyLayoutReasoner._ignored_on_load(NativeEdgeReasoner)


def reasoner_class(config) -> type:
    """The any-layout class for a reasoner config (`cosmos3_omni` or `cosmos3_edge`)."""
    family = reasoner_family(config)
    return next(
        cls
        for cls in (Cosmos3ForConditionalGeneration, Cosmos3EdgeForConditionalGeneration)
        if cls.family is family
    )
