"""`cosmos-train export` refuses a bad request with one line (exit 2) before it loads any model.

Trained exports (adapter and merged) are checked end to end in test_sft.py.
"""

from __future__ import annotations

import json

import pytest
from sft_helpers import cli
from typer.testing import CliRunner

from cosmos_train.cli import app


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("export loaded a model before refusing")

    monkeypatch.setattr("cosmos_train.export.load_model", refuse)


def _adapter_checkpoint(folder):
    """Looks like a LoRA checkpoint to every check before loading (its contents are never read)."""
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(folder)}))
    (folder / "adapter_model.safetensors").write_bytes(b"not read")
    return folder


def _full_checkpoint(folder):
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"not read")
    return folder


def _refused(*args) -> str:
    """Run `cosmos-train export ARGS` in this process; return its one error line."""
    result = CliRunner().invoke(app, ["export", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("make_checkpoint", [_adapter_checkpoint, _full_checkpoint])
@pytest.mark.parametrize("merge", [[], ["--merge-lora"]])
def test_existing_out_is_refused_before_loading(tmp_path, no_model_loading, make_checkpoint, merge):
    checkpoint = make_checkpoint(tmp_path / "checkpoint")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    line = _refused(checkpoint, out, *merge)
    assert str(out) in line and "--overwrite" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "precious"


def test_checkpoint_without_weights_is_refused(tmp_path, no_model_loading):
    full = _full_checkpoint(tmp_path / "full")
    (full / "model.safetensors").unlink()
    assert "has no weights" in _refused(full, tmp_path / "out1")
    adapter = _adapter_checkpoint(tmp_path / "adapter")
    (adapter / "adapter_model.safetensors").unlink()
    assert "has no weights" in _refused(adapter, tmp_path / "out2")
    (tmp_path / "empty").mkdir()
    assert "neither adapter_config.json nor config.json" in _refused(tmp_path / "empty", tmp_path / "out3")
    assert not any((tmp_path / f"out{i}").exists() for i in (1, 2, 3))


def test_merging_a_full_model_is_refused(tmp_path, no_model_loading):
    assert "drop --merge-lora" in _refused(
        _full_checkpoint(tmp_path / "full"), tmp_path / "out", "--merge-lora"
    )


def test_missing_checkpoint_is_refused_by_the_console_script(tmp_path):
    """As a user runs it: a separate process, logging configured, nothing else on stderr."""
    missing = tmp_path / "no-such-run" / "checkpoint-8"
    result = cli("export", missing, tmp_path / "out", timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [f"error: checkpoint {missing} does not exist"]
    assert not (tmp_path / "out").exists()
