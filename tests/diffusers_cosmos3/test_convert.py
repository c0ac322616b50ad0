import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from diffusers_cosmos3 import ConversionError, convert
from diffusers_cosmos3.convert import app as convert_cli
from diffusers_cosmos3.convert import open_checkpoint
from transformers_cosmos3.checkpoint import load_tensors
from transformers_cosmos3.layouts import WeightNamesError


def _tensors(folder):
    source = open_checkpoint(folder)
    return load_tensors(source.files, source.canonical)


@pytest.mark.parametrize(
    ("family", "layout"),
    [
        *(("cosmos3_omni", layout) for layout in ("framework", "transformers", "flat", "vllm")),
        *(("cosmos3_edge", layout) for layout in ("framework", "transformers", "flat")),
    ],
)
def test_round_trip_is_bit_exact(family_layouts, tmp_path, family, layout):
    original = family_layouts[family]["diffusers"]
    there = convert(original, tmp_path / layout, to=layout)
    back = convert(there, tmp_path / "back", to="diffusers")
    before, after = _tensors(original), _tensors(back)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) and before[k].dtype == after[k].dtype for k in before)
    # Configs, tokenizer, VAE and scheduler files come back byte for byte.
    for sub in (
        "model_index.json",
        "config.json",
        "transformer/config.json",
        "vision_encoder/config.json",
        "vae/diffusion_pytorch_model.safetensors",
        "scheduler/scheduler_config.json",
        "text_tokenizer/tokenizer.json",
        "tokenizer.json",
    ):
        assert (back / sub).read_bytes() == (original / sub).read_bytes(), sub
    index = json.loads((back / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(before)


def test_edge_has_no_vllm_layout_and_says_what_vllm_reads(edge_layouts, tmp_path):
    with pytest.raises(ConversionError, match=r"diffusers export .*--to diffusers"):
        convert(edge_layouts["diffusers"], tmp_path / "vllm", to="vllm")
    assert not (tmp_path / "vllm").exists()


def test_edge_transformers_layout_uses_transformers_names(edge_layouts):
    keys = set(load_file(edge_layouts["transformers"] / "model.safetensors"))
    assert "model.language_model.layers.0.mlp.fc1.weight" in keys  # relu2 MLP, no gate
    assert "model.visual.encoder.layers.0.self_attn.q_proj.weight" in keys  # the ViT keeps its own names
    assert not any(".mlp.up_proj." in k or ".self_attn.to_q." in k for k in keys)


def test_framework_output_keeps_action_heads_under_framework_names(tiny_layouts, tmp_path):
    out = convert(tiny_layouts["diffusers"], tmp_path / "fw", to="framework")
    keys = set(load_file(out / "model.safetensors"))
    assert {"net.action2llm.fc.weight", "net.llm2action.bias.weight", "net.action_modality_embed"} <= keys
    assert "net.language_model.model.layers.0.self_attn.q_proj_moe_gen.weight" in keys
    assert "net.vae2llm.weight" in keys and "net.time_embedder.mlp.0.weight" in keys


def _with_extra_tensor(tiny_layouts, tmp_path):
    import shutil

    folder = tmp_path / "bad"
    shutil.copytree(tiny_layouts["flat"], folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["layers.0.self_attn.rotary_gate.weight"] = torch.ones(3)
    tensors["unrelated_head.weight"] = torch.ones(3)
    save_file(tensors, folder / "model.safetensors")
    return folder


def test_refuses_unmapped_keys_and_writes_nothing(tiny_layouts, tmp_path):
    bad = _with_extra_tensor(tiny_layouts, tmp_path)
    out_root = tmp_path / "outputs"
    out_root.mkdir()
    with pytest.raises(WeightNamesError, match=r"rotary_gate.*unrelated_head|unrelated_head.*rotary_gate"):
        convert(bad, out_root / "converted", to="diffusers")
    assert list(out_root.iterdir()) == []


def test_refuses_missing_weights(tiny_layouts, tmp_path):
    import shutil

    folder = tmp_path / "incomplete"
    shutil.copytree(tiny_layouts["flat"], folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["layers.1.self_attn.add_k_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(WeightNamesError, match=r"layers\.1\.self_attn\.add_k_proj\.weight"):
        convert(folder, tmp_path / "out", to="framework")
    assert not (tmp_path / "out").exists()


def test_cli_converts_and_reports_errors_in_one_line(tiny_layouts, tmp_path):
    # The console script once (it is what users type); the error and --help in process, through the same app.
    exe = Path(sys.executable).with_name("cosmos3-convert")
    ok = subprocess.run(
        [exe, tiny_layouts["diffusers"], tmp_path / "fw", "--to", "framework"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "fw" / "model.safetensors").is_file()
    runner = CliRunner()
    bad = _with_extra_tensor(tiny_layouts, tmp_path)
    failed = runner.invoke(convert_cli, [str(bad), str(tmp_path / "x")])
    assert failed.exit_code == 2
    assert failed.stderr.startswith("error: ") and failed.stderr.count("\n") == 1
    assert "unrelated_head.weight" in failed.stderr and "Traceback" not in failed.stderr
    assert not (tmp_path / "x").exists()
    help_text = runner.invoke(convert_cli, ["--help"]).stdout
    assert "--to" in help_text and "framework" in help_text
