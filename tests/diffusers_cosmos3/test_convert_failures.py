"""A conversion that fails while writing leaves nothing behind, and never costs an existing output."""

import pytest
import safetensors.torch

from diffusers_cosmos3 import convert


def fail_after_first_file(monkeypatch, error: BaseException):
    """Make the safetensors writer write one file, then raise `error` (a full disk, a Ctrl-C)."""
    real_save_file = safetensors.torch.save_file
    written = []

    def save_file(tensors, filename, *args, **kwargs):
        if written:
            raise error
        real_save_file(tensors, filename, *args, **kwargs)
        written.append(filename)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    return written


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
@pytest.mark.parametrize("to", ["diffusers", "framework"])
def test_failure_mid_write_leaves_no_output_and_no_scratch(tiny_layouts, tmp_path, monkeypatch, error, to):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    written = fail_after_first_file(monkeypatch, error)
    with pytest.raises(type(error)):
        # Small shards, so the framework layout's one folder gets several files too.
        convert(tiny_layouts["diffusers"], outputs / "converted", to=to, max_shard_bytes=64 * 1024)
    assert len(written) == 1  # the failure came after a shard was on disk
    assert list(outputs.iterdir()) == []  # neither the destination nor a scratch folder beside it


def test_failure_mid_write_keeps_the_existing_destination(tiny_layouts, tmp_path, monkeypatch):
    outputs = tmp_path / "outputs"
    previous = convert(tiny_layouts["diffusers"], outputs / "converted", to="flat")
    before = snapshot(previous)
    written = fail_after_first_file(monkeypatch, OSError(28, "No space left on device"))
    with pytest.raises(OSError):
        convert(
            tiny_layouts["diffusers"], previous, to="diffusers", overwrite=True, max_shard_bytes=64 * 1024
        )
    assert len(written) == 1
    assert snapshot(previous) == before
    assert [p.name for p in outputs.iterdir()] == ["converted"]


def test_overwrite_replaces_the_destination_and_leaves_no_scratch(tiny_layouts, tmp_path):
    outputs = tmp_path / "outputs"
    previous = convert(tiny_layouts["diffusers"], outputs / "converted", to="flat")
    convert(tiny_layouts["diffusers"], previous, to="framework", overwrite=True)
    assert [p.name for p in outputs.iterdir()] == ["converted"]
    assert all(
        name.startswith("net.") for name in safetensors.torch.load_file(previous / "model.safetensors")
    )
