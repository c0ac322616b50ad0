"""Torch DCP checkpoints, as the framework's trainer writes them: read only on explicit opt-in.

The checkpoint is written by `torch.distributed.checkpoint.save` from the tiny framework state dict
(`net.` and `net_ema.` copies) plus optimizer and trainer state that must be skipped.
"""

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from typer.testing import CliRunner

import diffusers_cosmos3
from diffusers_cosmos3.convert import app
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import UntrustedCheckpointError, dcp_tensors, load_tensors, tensor_files


@pytest.fixture(scope="module")
def dcp_checkpoint(tiny_layouts, tmp_path_factory):
    """iter_000001000/model/ holds the DCP files, beside the framework's other state folders."""
    tensors = load_file(tiny_layouts["framework"] / "model.safetensors")
    state = dict(tensors)
    state["optim.state.0.exp_avg"] = torch.ones(3)
    state["trainer.iteration"] = 1000  # not a tensor: stored pickled, never read back
    root = tmp_path_factory.mktemp("dcp") / "iter_000001000"
    dcp.save(state, checkpoint_id=root / "model", no_dist=True)
    return root


def test_reading_needs_the_opt_in_everywhere(dcp_checkpoint, tiny_layouts, tmp_path):
    base = tiny_layouts["diffusers"]
    for load in (diffusers_cosmos3.load_pipeline, Cosmos3ForConditionalGeneration.from_pretrained):
        with pytest.raises(UntrustedCheckpointError, match="trust_dcp_pickle=True"):
            load(dcp_checkpoint, base=base)
    result = CliRunner().invoke(app, [str(dcp_checkpoint), str(tmp_path / "out"), "--base", str(base)])
    assert result.exit_code == 2
    assert "--trust-dcp-pickle" in result.output and "pickled" in result.output
    assert "\n" not in result.output.strip()
    assert not (tmp_path / "out").exists()


def test_only_the_weight_copies_are_listed(dcp_checkpoint, tiny_layouts):
    entries = dcp_tensors(dcp_checkpoint / "model", trust_dcp_pickle=True)
    expected = load_file(tiny_layouts["framework"] / "model.safetensors")
    assert entries.keys() == expected.keys()
    loaded = load_tensors(entries)
    assert all(torch.equal(loaded[name], tensor) for name, tensor in expected.items())


@pytest.mark.parametrize("prefer_ema", [True, False])
def test_transformer_equals_the_safetensors_framework_load(dcp_checkpoint, tiny_layouts, prefer_ema):
    from_dcp = diffusers_cosmos3.load_transformer(
        dcp_checkpoint, prefer_ema=prefer_ema, base=tiny_layouts["diffusers"], trust_dcp_pickle=True
    ).state_dict()
    reference = diffusers_cosmos3.load_transformer(
        tiny_layouts["framework"], prefer_ema=prefer_ema
    ).state_dict()
    assert from_dcp.keys() == reference.keys()
    assert all(torch.equal(from_dcp[name], tensor) for name, tensor in reference.items())


def test_reasoner_from_dcp(dcp_checkpoint, tiny_layouts):
    model = Cosmos3ForConditionalGeneration.from_pretrained(
        dcp_checkpoint, base=tiny_layouts["diffusers"], trust_dcp_pickle=True
    ).state_dict()
    reference = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["transformers"]).state_dict()
    assert model.keys() == reference.keys()
    assert all(torch.equal(model[name], tensor) for name, tensor in reference.items())


def test_cli_converts_a_trusted_dcp_checkpoint(dcp_checkpoint, tiny_layouts, tmp_path):
    out = tmp_path / "out"
    args = [str(dcp_checkpoint), str(out), "--base", str(tiny_layouts["diffusers"]), "--trust-dcp-pickle"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for sub in ("transformer", "vision_encoder"):
        converted = load_tensors(tensor_files(out / sub))
        original = load_tensors(tensor_files(tiny_layouts["diffusers"] / sub))
        assert converted.keys() == original.keys()
        assert all(torch.equal(converted[name], tensor) for name, tensor in original.items())


def test_unreadable_metadata_is_one_clear_error(dcp_checkpoint, tmp_path):
    import shutil

    broken = shutil.copytree(dcp_checkpoint, tmp_path / "broken")
    (broken / "model" / ".metadata").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a readable DCP metadata file"):
        dcp_tensors(broken / "model", trust_dcp_pickle=True)
