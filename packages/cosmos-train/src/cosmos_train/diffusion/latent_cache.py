"""A safetensors cache of the latents and text embeddings of image/video + caption pairs, keyed by what they
depend on: the media bytes, the caption, the transform and the adapter's encoders.

    cached = cache_pairs(dataset, adapter, cache_dir)   # items {"latents", "conditioning", "prompt", ...}
    batch = cached.collate([cached[0], cached[1]])

Diffusion SFT and DDRL train from it when `[data] cache = true` (`training_pairs`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from ..data.media import _reason
from ..data.pairs import PairDataset, collate_pairs

logger = logging.getLogger(__name__)

CACHE_FORMAT = "cosmos-train-pairs-cache-v1"


def _config_dict(module: torch.nn.Module) -> dict[str, Any]:
    config = getattr(module, "config", None)
    if config is None:
        return {}
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    # Paths and library versions do not change what the encoder computes.
    return {k: v for k, v in values.items() if not k.startswith("_") and k != "transformers_version"}


def encoder_fingerprint(adapter) -> str:
    """sha256 of what the cached encodings depend on besides the inputs: the adapter's class and options, and
    the class, config and every parameter and buffer of `adapter.vae_modules()` and `text_encoder_modules()`."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}\n{type(adapter).__qualname__}\n{adapter.options!r}\n".encode())
    for role, modules in (("vae", adapter.vae_modules()), ("text", adapter.text_encoder_modules())):
        for module in modules:
            config = json.dumps(_config_dict(module), sort_keys=True, default=str)
            digest.update(f"{role} {type(module).__qualname__} {config}\n".encode())
            for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
                digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
                flat = tensor.detach().to("cpu").contiguous().reshape(-1)
                digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def encode_seed(digest: str) -> int:
    """The seed an item's encoding runs under (the VAE samples its latent): fixed per cache key."""
    return int(digest[:15], 16)


class LatentCache:
    """One safetensors file per item under `cache_dir/<digest[:2]>/<digest>.safetensors`, keyed by sha256 digests
    that include `encoder_fingerprint(adapter)`, so a changed encoder never reads stale entries.

    Files are written to a temporary name and renamed (`os.replace`), so a killed run leaves no entry that a
    later run could trust; an unreadable entry counts as a miss and is rewritten."""

    def __init__(self, adapter, cache_dir: str | Path):
        self.adapter, self.dir = adapter, Path(cache_dir)
        self.fingerprint = encoder_fingerprint(adapter)
        self.hits = self.misses = 0

    def path(self, digest: str) -> Path:
        return self.dir / digest[:2] / f"{digest}.safetensors"

    def digest(self, *parts: Any) -> str:
        text = json.dumps([CACHE_FORMAT, self.fingerprint, *parts], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def load(self, digest: str) -> dict[str, torch.Tensor] | None:
        from safetensors import safe_open

        path = self.path(digest)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="pt") as file:
                if (file.metadata() or {}).get("digest") != digest:
                    raise ValueError("digest mismatch")
                return {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (safe_open is not iterable)
        except Exception as error:  # truncated or foreign file: encode again and overwrite
            logger.warning("ignoring unreadable cache entry %s (%s)", path, _reason(error))
            return None

    def store(self, digest: str, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        path = self.path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        header = {"digest": digest, "format": CACHE_FORMAT, "info": json.dumps(metadata, default=str)}
        try:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(temporary), header)
            os.replace(temporary, path)  # atomic: readers see the old state or the whole file
        finally:
            temporary.unlink(missing_ok=True)

    def fetch(self, digest: str, encode, metadata: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The entry `digest`, computing it with `encode()` (seeded by the digest) on a miss."""
        tensors = self.load(digest)
        if tensors is not None:
            self.hits += 1
            return tensors
        self.misses += 1
        device = self.adapter.device
        # A private RNG stream: the VAE sample is reproducible, and caching leaves the training RNG untouched.
        with (
            torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []),
            torch.no_grad(),
        ):
            torch.manual_seed(encode_seed(digest))
            tensors = encode()
        self.store(digest, tensors, metadata)
        return tensors

    def unconditional(self) -> dict[str, torch.Tensor]:
        """The empty prompt's conditioning (batch dim removed), which the trainer swaps in for text dropout."""
        tensors = self.fetch(
            self.digest("unconditional"), lambda: _conditioning(self.adapter, ""), {"prompt": ""}
        )
        return {k.removeprefix("cond."): v for k, v in tensors.items()}


def _conditioning(adapter, prompt: str) -> dict[str, torch.Tensor]:
    return {f"cond.{k}": v[0] for k, v in adapter.encode_prompts([prompt]).items()}


def cache_window_start(media_digest: str, frames: int, num_frames: int) -> int:
    """The cached video window's first frame: fixed per file (drawn from its content hash) so reruns hit."""
    return int(media_digest[:15], 16) % (frames - num_frames + 1)


def cache_pairs(dataset: PairDataset, adapter, cache_dir: str | Path) -> CachedPairs:
    """Encode every item once with `adapter.encode_pixels` and `adapter.encode_prompts` into `cache_dir`, reusing
    entries from earlier runs; returns the cached dataset.

    An item's key is sha256 of the media bytes, the caption, the transform (height, width, num_frames, window
    start) and the encoder fingerprint. Caching fixes what is random on the fly: each video trains on one window
    (`cache_window_start`) and each item on one VAE latent sample (seeded by its key, `encode_seed`)."""
    from tqdm.auto import tqdm

    cache = LatentCache(adapter, cache_dir)
    digests = []
    for index in tqdm(range(len(dataset)), desc="caching latents and text embeddings", unit="item"):
        row = dataset.rows[index]
        media = hashlib.sha256(dataset.media_bytes(index)).hexdigest()
        start = None
        if dataset.video:
            start = cache_window_start(media, dataset.frame_count(index), dataset.num_frames)
        transform = {"height": dataset.height, "width": dataset.width, "num_frames": dataset.num_frames}
        digest = cache.digest("item", media, row["prompt"], transform, start)

        def encode(index=index, start=start) -> dict[str, torch.Tensor]:
            item = dataset.get(index, start=start)
            latents = adapter.encode_pixels(item["pixels"][None].to(adapter.device))
            return {"latents": latents[0], **_conditioning(adapter, item["prompt"])}

        info = {"key": row["key"], "media": dataset.name(index), "prompt": row["prompt"], "start": start}
        cache.fetch(digest, encode, info)
        digests.append(digest)
    logger.info("latent cache %s: %d hits, %d encoded", cache.dir, cache.hits, cache.misses)
    return CachedPairs(cache, digests, dataset.rows, cache.unconditional(), adapter.ragged_conditioning)


class CachedPairs(torch.utils.data.Dataset):
    """Items of a `PairDataset` as cached encodings: `{"latents", "conditioning", "prompt", "metadata", "key"}`
    (batch dims removed). Prompt and metadata come from the current data, not the cache."""

    def __init__(self, cache: LatentCache, digests, rows, unconditional, ragged: tuple[str, ...] = ()):
        self.cache, self.digests, self.rows = cache, list(digests), rows
        self._unconditional, self.ragged = unconditional, tuple(ragged)

    def __len__(self) -> int:
        return len(self.digests)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from safetensors.torch import load_file

        tensors = load_file(str(self.cache.path(self.digests[index])))
        row = self.rows[index]
        return {
            "latents": tensors.pop("latents"),
            "conditioning": {k.removeprefix("cond."): v for k, v in tensors.items()},
            "prompt": row["prompt"],
            "metadata": dict(row["metadata"]),
            "key": row["key"],
        }

    def unconditional(self) -> dict[str, torch.Tensor]:
        """The empty prompt's conditioning (batch dim removed), for text dropout."""
        return dict(self._unconditional)

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """`collate_pairs` with this adapter's ragged conditioning keys: the trainer's `data_collator`."""
        return collate_pairs(items, self.ragged)


def training_pairs(section, adapter, args) -> tuple[Any, Any]:
    """A job's `[data]` pairs and their collator for training: cached (latents and text embeddings, written by the
    main process first, read by the others) when the section asks."""
    from ..data.pairs import load_pairs

    dataset, report = load_pairs(section, video=adapter.video)
    logger.info("training on %d pairs (%d skipped)", report.kept, report.skipped)
    if not section.cache:
        return dataset, collate_pairs
    cache_dir = Path(section.cache_dir or Path(args.output_dir) / "cache")
    with args.main_process_first(desc="caching latents and text embeddings"):
        cached = cache_pairs(dataset, adapter, cache_dir)
    return cached, cached.collate


__all__ = ["CachedPairs", "LatentCache", "cache_pairs", "encoder_fingerprint", "training_pairs"]
