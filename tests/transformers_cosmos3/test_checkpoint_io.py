"""Sharded safetensors writing (huggingface_hub's writer) and the atomic output folder."""

import json

import pytest
import torch

from transformers_cosmos3.checkpoint import atomic_directory, load_tensors, save_sharded, tensor_files


def random_tensors(count=6, numel=4096):
    generator = torch.Generator().manual_seed(0)
    tensors = {f"layers.{i}.weight": torch.randn(numel, generator=generator) for i in range(count)}
    tensors["layers.0.scale"] = torch.arange(5, dtype=torch.bfloat16)
    return tensors


def test_one_file_when_it_fits(tmp_path):
    tensors = random_tensors()
    save_sharded(tensors, tmp_path, "diffusion_pytorch_model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diffusion_pytorch_model.safetensors"]
    loaded = load_tensors(tensor_files(tmp_path))
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in tensors.items())


def test_shards_and_index_when_it_does_not(tmp_path):
    tensors = random_tensors()
    save_sharded(tensors, tmp_path, "model", max_shard_bytes=3 * 4096 * 4)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    assert set(index["weight_map"]) == set(tensors)
    loaded = load_tensors(tensor_files(tmp_path))
    assert all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in tensors.items())


def test_tensors_sharing_memory_are_refused_not_dropped(tmp_path):
    # The hub writer would keep one name of the pair; a checkpoint must hold every name it was given.
    weight = torch.randn(4, 4)
    with pytest.raises(ValueError, match="share memory"):
        save_sharded({"embed_tokens.weight": weight, "lm_head.weight": weight}, tmp_path)


def test_atomic_directory_error_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "out") as scratch:
        (scratch / "half.safetensors").write_bytes(b"x")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_error_keeps_previous_output(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.safetensors").write_bytes(b"previous")
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "out", overwrite=True) as scratch:
        (scratch / "model.safetensors").write_bytes(b"new")
        raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == b"previous"


def test_atomic_directory_replaces_on_success(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.json").write_text("{}")
    with pytest.raises(FileExistsError), atomic_directory(tmp_path / "out"):
        pass
    with atomic_directory(tmp_path / "out", overwrite=True) as scratch:
        (scratch / "model.safetensors").write_bytes(b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["model.safetensors"]
