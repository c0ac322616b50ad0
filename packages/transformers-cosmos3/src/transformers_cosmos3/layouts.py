"""The one key table for every Cosmos3 checkpoint layout.

Every layout is a bijective renaming of one *canonical* namespace: the flat diffusers names, i.e.
the `Cosmos3OmniTransformer` state dict (reasoner and generator towers) plus the Qwen3-VL ViT
under its own flat roots (`blocks.*`, `merger.*`, ...). transformers-cosmos3, diffusers-cosmos3
and vllm-cosmos3 all translate through this module, so a naming fix lands in one place.

The table itself is plain Python (no torch), and so is the package `__init__` it runs: importing it
loads neither torch nor transformers.

| layout         | reasoner text                    | ViT                       | generator extras        |
|----------------|----------------------------------|---------------------------|-------------------------|
| `flat`         | `layers.N.self_attn.to_q`        | `blocks.N...`             | `proj_in`, `add_q_proj` |
| `diffusers`    | as `flat`, in `transformer/`     | as `flat`, `vision_encoder/` | as `flat`            |
| `transformers` | `model.language_model.*`, q_proj | `model.visual.*`          | as `flat`               |
| `vllm`         | `language_model.model.*`, q_proj | `visual.*`                | as `flat`               |
| `framework`    | `net.language_model.model.*`     | `net.language_model.visual.*` | `vae2llm`, `q_proj_moe_gen` |

The transformers and vLLM layouts keep the generator tower under its diffusers names: upstream
transformers ignores exactly those names when it loads the reasoner, so nothing is lost.

Two reasoner families share the table (`Reasoner`, named by the transformers `model_type`):
- `cosmos3_omni` (Nano, Super): Qwen3-VL text and ViT, as above.
- `cosmos3_edge` (Edge): Nemotron-style text whose MLP has no gate (`mlp.up_proj`/`mlp.down_proj` in
  diffusers, `mlp.fc1`/`mlp.fc2` in transformers: upstream's `cosmos3_edge` conversion mapping), and
  a SigLIP2 ViT with its projector, which upstream's composite checkpoints already keep under their
  transformers names (`model.visual.*`, `model.projector.*`): canonical here too.
Only the transformers names of the Edge MLP depend on the family; every other rename is shared, and
reading names back (`from_layout`) never needs the family.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum


class Layout(StrEnum):
    TRANSFORMERS = "transformers"
    DIFFUSERS = "diffusers"
    FLAT = "flat"
    FRAMEWORK = "framework"
    VLLM = "vllm"


class Reasoner(StrEnum):
    """A reasoner family, named by its transformers `model_type`."""

    OMNI = "cosmos3_omni"  # Nano, Super: Qwen3-VL
    EDGE = "cosmos3_edge"  # Edge: Nemotron-style text, relu2 MLP without a gate, SigLIP2 ViT

    @classmethod
    def of_transformer_config(cls, config: Mapping) -> Reasoner:
        """The family of a diffusers `Cosmos3OmniTransformer` config: Edge's text MLP is relu2."""
        return cls.EDGE if config.get("hidden_act") == "relu2" else cls.OMNI


VISION_ROOTS = ("blocks.", "merger.", "patch_embed.", "pos_embed.", "deepstack_merger_list.")
# Edge's ViT and projector: the same names in the flat, diffusers and transformers layouts.
EDGE_VISION_ROOTS = ("model.visual.", "model.projector.")
TEXT_ROOTS = ("embed_tokens.", "layers.", "norm.", "norm_moe_gen.")
GENERATOR_ROOTS = (
    "proj_in.",
    "proj_out.",
    "time_embedder.",
    "action_proj_in.",
    "action_proj_out.",
    "action_modality_embed",
    "audio_proj_in.",
    "audio_proj_out.",
    "audio_modality_embed",
    "norm_moe_gen.",
)
ACTION_ROOTS = ("action_proj_in.", "action_proj_out.", "action_modality_embed")
SOUND_ROOTS = ("audio_proj_in.", "audio_proj_out.", "audio_modality_embed")

# Raw framework checkpoints keep the trained weights under `net.` and the EMA copy under `net_ema.`.
FRAMEWORK_PREFIXES = ("net.", "net_ema.")

# Per-layer renames, canonical (diffusers) -> Qwen names used by transformers, vLLM and the framework.
_REASONER_ATTENTION = (
    (".self_attn.to_q.", ".self_attn.q_proj."),
    (".self_attn.to_k.", ".self_attn.k_proj."),
    (".self_attn.to_v.", ".self_attn.v_proj."),
    (".self_attn.to_out.", ".self_attn.o_proj."),
    (".self_attn.norm_q.", ".self_attn.q_norm."),
    (".self_attn.norm_k.", ".self_attn.k_norm."),
)
_GENERATOR_ATTENTION = (
    (".self_attn.add_q_proj.", ".self_attn.q_proj_moe_gen."),
    (".self_attn.add_k_proj.", ".self_attn.k_proj_moe_gen."),
    (".self_attn.add_v_proj.", ".self_attn.v_proj_moe_gen."),
    (".self_attn.to_add_out.", ".self_attn.o_proj_moe_gen."),
    (".self_attn.norm_added_q.", ".self_attn.q_norm_moe_gen."),
    (".self_attn.norm_added_k.", ".self_attn.k_norm_moe_gen."),
)


# Edge's text MLP (no gate), canonical (diffusers) -> transformers.
_EDGE_MLP = (
    (".mlp.up_proj.", ".mlp.fc1."),
    (".mlp.down_proj.", ".mlp.fc2."),
)
# transformers' `cosmos3_edge` renames are unanchored, so its save_pretrained also turns the ViT's
# `q_proj`/`k_proj`/`v_proj`/`fc1`/`fc2` into `to_q`/.../`up_proj`/`down_proj`; its loader reads them back.
# So does this table (canonical keeps the native ViT names, as upstream's composite checkpoints do).
_EDGE_VIT_AS_SAVED_BY_TRANSFORMERS = (
    *((f".self_attn.to_{x}.", f".self_attn.{x}_proj.") for x in "qkv"),
    *_EDGE_MLP,
)
TEXT_LAYERS = "layers."  # per-layer renames apply to the text tower only (Edge's ViT has q_proj and fc1 too)


def _roots(roots: Iterable[str], target: str) -> list[tuple[str, str]]:
    return [(root, target + root) for root in roots]


# Whole-key prefix renames, canonical -> layout. A key matches at most one row.
_PREFIXES: dict[Layout, list[tuple[str, str]]] = {
    Layout.FLAT: [],
    Layout.DIFFUSERS: [],
    Layout.TRANSFORMERS: _roots(TEXT_ROOTS, "model.language_model.") + _roots(VISION_ROOTS, "model.visual."),
    Layout.VLLM: [
        *_roots(TEXT_ROOTS, "language_model.model."),
        *_roots(VISION_ROOTS, "visual."),
        ("lm_head.", "language_model.lm_head."),
    ],
    Layout.FRAMEWORK: [
        *_roots(TEXT_ROOTS, "language_model.model."),
        *_roots(VISION_ROOTS, "language_model.visual."),
        *[(root, "language_model." + root.removeprefix("model.")) for root in EDGE_VISION_ROOTS],
        ("lm_head.", "language_model.lm_head."),
        ("proj_in.", "vae2llm."),
        ("proj_out.", "llm2vae."),
        ("time_embedder.linear_1.", "time_embedder.mlp.0."),
        ("time_embedder.linear_2.", "time_embedder.mlp.2."),
        ("action_proj_in.", "action2llm."),
        ("action_proj_out.", "llm2action."),
        ("audio_proj_in.", "sound2llm."),
        ("audio_proj_out.", "llm2sound."),
        ("audio_modality_embed", "sound_modality_embed"),
    ],
}
_SEGMENTS: dict[Layout, tuple[tuple[str, str], ...]] = {
    Layout.FLAT: (),
    Layout.DIFFUSERS: (),
    Layout.TRANSFORMERS: _REASONER_ATTENTION,
    Layout.VLLM: _REASONER_ATTENTION,
    Layout.FRAMEWORK: _REASONER_ATTENTION + _GENERATOR_ATTENTION,
}


def _rename_prefix(key: str, prefixes: Iterable[tuple[str, str]]) -> str:
    for old, new in prefixes:
        if key == old or (old.endswith(".") and key.startswith(old)):
            return new + key[len(old) :]
    return key


def _rename_segment(key: str, segments: Iterable[tuple[str, str]]) -> str:
    for old, new in segments:
        if old in key:
            return key.replace(old, new)
    return key


def _segments(layout: Layout, reasoner: Reasoner) -> tuple[tuple[str, str], ...]:
    edge_mlp = reasoner is Reasoner.EDGE and layout in (Layout.TRANSFORMERS, Layout.VLLM)
    return _SEGMENTS[layout] + (_EDGE_MLP if edge_mlp else ())


def to_layout(
    canonical_key: str,
    layout: Layout | str,
    framework_prefix: str = "net.",
    reasoner: Reasoner | str = Reasoner.OMNI,
) -> str:
    """Name of a canonical key in `layout`; `reasoner` matters only for Edge's transformers MLP names."""
    layout = Layout(layout)
    key = _rename_segment(
        _rename_prefix(canonical_key, _PREFIXES[layout]), _segments(layout, Reasoner(reasoner))
    )
    return framework_prefix + key if layout is Layout.FRAMEWORK else key


def from_layout(key: str, layout: Layout | str) -> str:
    """Canonical name of a key stored in `layout` (framework keys must already have `net.` removed)."""
    layout = Layout(layout)
    swapped = [(new, old) for old, new in _PREFIXES[layout]]
    # Longest layout prefix first, so `language_model.model.` wins over `language_model.`.
    swapped.sort(key=lambda pair: len(pair[0]), reverse=True)
    key = _rename_prefix(key, swapped)
    if key.startswith(TEXT_LAYERS):
        # Both families' segments: `mlp.fc1` is Edge's transformers name and no Omni name.
        key = _rename_segment(key, [(new, old) for old, new in _segments(layout, Reasoner.EDGE)])
    elif key.startswith(EDGE_VISION_ROOTS):
        key = _rename_segment(key, _EDGE_VIT_AS_SAVED_BY_TRANSFORMERS)
    return key


def canonical_key_mapping(layout: Layout | str, framework_prefix: str = "net.") -> dict[str, str]:
    """transformers `key_mapping` ({regex: replacement}) from `layout`'s names to canonical (flat) names.

    transformers' own `cosmos3_omni` conversion mapping takes flat names the rest of the way, so with
    this a transformers `from_pretrained` reads any single-folder layout lazily, as it reads its own.
    Prefix rows only: the Qwen attention names of the reasoner are already the transformers names.
    A framework checkpoint's other copy keeps its prefix, matches nothing, and is never read.
    """
    layout = Layout(layout)
    mapping = {f"^{re.escape(framework_prefix)}": ""} if layout is Layout.FRAMEWORK else {}
    for canonical, stored in sorted(_PREFIXES[layout], key=lambda pair: len(pair[1]), reverse=True):
        anchor = "^" + re.escape(stored) + ("" if stored.endswith(".") else "$")
        mapping[anchor] = canonical
    return mapping


def is_vision_key(canonical_key: str) -> bool:
    return canonical_key.startswith(VISION_ROOTS + EDGE_VISION_ROOTS)


def is_generator_key(canonical_key: str) -> bool:
    """True for weights of the generator tower and its modality heads (not used by the reasoner)."""
    if canonical_key.startswith(GENERATOR_ROOTS) or canonical_key in GENERATOR_ROOTS:
        return True
    generator_parts = [old for old, _ in _GENERATOR_ATTENTION] + ["_moe_gen.", ".k_norm_und_for_gen."]
    return any(part in canonical_key for part in generator_parts)


def detect_layout(keys: Iterable[str]) -> Layout:
    """Guess the layout of a checkpoint from its tensor names (a diffusers repo is told by its folder)."""
    keys = list(keys)
    if any(key.startswith(FRAMEWORK_PREFIXES) for key in keys):
        return Layout.FRAMEWORK
    # Not `model.visual.` alone: Edge's flat and diffusers layouts keep its ViT under that name too.
    if any(key.startswith("model.language_model.") for key in keys):
        return Layout.TRANSFORMERS
    if any(key.startswith(("language_model.model.", "visual.")) for key in keys):
        return Layout.VLLM
    if any(key.startswith(TEXT_ROOTS + VISION_ROOTS + EDGE_VISION_ROOTS) for key in keys):
        return Layout.FLAT
    sample = ", ".join(sorted(keys)[:5]) or "no tensors"
    raise ValueError(f"not a Cosmos3 checkpoint: no known key prefix among {sample}")


def split_framework_keys(keys: Iterable[str], prefer_ema: bool = True) -> tuple[str, dict[str, str]]:
    """Pick the `net_ema.` or `net.` copy of a raw framework checkpoint.

    Returns the chosen prefix and {stored key: key without prefix}. Keys outside both copies
    (optimizer or trainer state) are left out on purpose; they are not weights.
    """
    keys = list(keys)
    available = [p for p in ("net_ema.", "net.") if any(k.startswith(p) for k in keys)]
    if not available:
        raise ValueError("framework checkpoint has neither `net.` nor `net_ema.` keys")
    prefix = available[0] if prefer_ema else available[-1]
    return prefix, {k: k[len(prefix) :] for k in keys if k.startswith(prefix)}


def canonical_names(
    keys: Iterable[str], layout: Layout | str | None = None, prefer_ema: bool = True
) -> dict[str, str]:
    """{stored key: canonical key} for a checkpoint in any layout (detected when not given)."""
    keys = list(keys)
    layout = Layout(layout) if layout else detect_layout(keys)
    if layout is Layout.FRAMEWORK:
        _, stripped = split_framework_keys(keys, prefer_ema)
        return {stored: from_layout(short, layout) for stored, short in stripped.items()}
    return {key: from_layout(key, layout) for key in keys}


class WeightNamesError(ValueError):
    """A checkpoint's tensors do not match a model's weights one to one.

    Raised by every Cosmos3 loader and the converter (through `check_names`), so the message always
    has one shape: the stored names that map to no weight, the weights no tensor provides, and the
    weights that several tensors claim.
    """

    def __init__(
        self, source: str, unknown=(), missing=(), duplicated: Mapping[str, list[str]] | None = None
    ):
        self.unknown = sorted(unknown)
        self.missing = sorted(missing)
        self.duplicated = dict(sorted((duplicated or {}).items()))
        problems = []
        if self.unknown:
            problems.append(f"{len(self.unknown)} tensor(s) that map to no weight: {self.unknown}")
        if self.missing:
            problems.append(f"{len(self.missing)} weight(s) that no tensor provides: {self.missing}")
        if self.duplicated:
            problems.append(f"weights that several tensors map to: {self.duplicated}")
        super().__init__(f"{source}: " + "; ".join(problems))


def check_names(names: Mapping[str, str], expected: Iterable[str], source: object = "checkpoint") -> None:
    """Raise `WeightNamesError` unless `names` ({stored name: model weight name}) covers `expected` one to one.

    Names the caller leaves out of `names` on purpose (generator weights for the reasoner, the other
    copy of a framework checkpoint) are not checked.
    """
    expected = set(expected)
    unknown = [stored for stored, name in names.items() if name not in expected]
    missing = expected - set(names.values())
    claims: dict[str, list[str]] = {}
    for stored, name in names.items():
        claims.setdefault(name, []).append(stored)
    duplicated = {name: sorted(stored) for name, stored in claims.items() if len(stored) > 1}
    if unknown or missing or duplicated:
        raise WeightNamesError(str(source), unknown, missing, duplicated)
