"""Write a Cosmos3 repo that diffusers, transformers and vLLM can all load from one folder.

Layout (the framework's export layout):

    model_index.json, transformer/, vae/, scheduler/, text_tokenizer/, [sound_tokenizer/]   diffusers
    vision_encoder/                       the reasoner's ViT (not a pipeline component)
    config.json                           transformers `cosmos3_omni` / `cosmos3_edge` config of the reasoner
    model.safetensors.index.json          one weight map over transformer/ and vision_encoder/
    tokenizer + processor files           so AutoProcessor works on the root too
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from transformers_cosmos3.checkpoint import (
    DIFFUSERS_WEIGHT_FOLDERS,
    INDEX_SUFFIX,
    atomic_directory,
    save_sharded,
    tensor_files,
)

ROOT_INDEX = "model" + INDEX_SUFFIX


def write_root_index(folder: Path) -> None:
    """Index every tensor of transformer/ and vision_encoder/ from the repo root."""
    weight_map: dict[str, str] = {}
    total = 0
    for sub in DIFFUSERS_WEIGHT_FOLDERS:
        if not (folder / sub).is_dir():
            continue
        for name, file in tensor_files(folder / sub).items():
            if name in weight_map:
                raise ValueError(f"tensor {name} is in both {weight_map[name]} and {file}")
            weight_map[name] = file.relative_to(folder).as_posix()
        total += sum(f.stat().st_size for f in (folder / sub).glob("*.safetensors"))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / ROOT_INDEX).write_text(json.dumps(index, indent=2) + "\n")


def save_export(
    pipeline,
    path: Path,
    vision_encoder=None,
    reasoner_config=None,
    processor=None,
    overwrite: bool = False,
) -> Path:
    """Save `pipeline` plus the sidecars that let transformers and vLLM read the same folder.

    `vision_encoder` is the reasoner's ViT: a model with `save_pretrained` (Nano's Qwen3-VL ViT), or
    {canonical name: tensor} (Edge's ViT and projector, `model.visual.*` and `model.projector.*`, which
    no upstream model class holds alone), written beside `reasoner_config`'s vision config.
    Written atomically: the folder appears complete or not at all.
    """
    with atomic_directory(Path(path), overwrite=overwrite) as scratch:
        pipeline.save_pretrained(scratch, safe_serialization=True)
        if isinstance(vision_encoder, Mapping):
            save_sharded(vision_encoder, scratch / "vision_encoder", "model")
            reasoner_config.vision_config.save_pretrained(scratch / "vision_encoder")
        elif vision_encoder is not None:
            vision_encoder.save_pretrained(scratch / "vision_encoder", safe_serialization=True)
        if reasoner_config is not None:
            reasoner_config.save_pretrained(scratch)
        if processor is not None:
            processor.save_pretrained(scratch)
        write_root_index(scratch)
    return Path(path)
