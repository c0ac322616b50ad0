"""A diffusers Cosmos3 repo as upstream ships it: no `vision_encoder/` sidecar, no root `config.json`.

Each conversion either writes a folder its target loads or fails naming what is missing, and each
hint, followed, works.
"""

import shutil

import pytest
import torch
from transformers import Cosmos3OmniForConditionalGeneration
from typer.testing import CliRunner

import diffusers_cosmos3
from diffusers_cosmos3.convert import app
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import MissingConfigError, load_tensors, tensor_files

EXPORT_ONLY = ("vision_encoder", "config.json", "model.safetensors.index.json")


@pytest.fixture
def upstream_repo(tiny_layouts, tmp_path):
    repo = shutil.copytree(tiny_layouts["diffusers"], tmp_path / "upstream-repo")
    for name in EXPORT_ONLY:
        path = repo / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return repo


def _convert(src, dst, to):
    return CliRunner().invoke(app, [str(src), str(dst), "--to", to])


@pytest.mark.parametrize("to", ["transformers", "vllm"])
def test_reasoner_layouts_refuse_and_say_what_is_missing(upstream_repo, tmp_path, to):
    result = _convert(upstream_repo, tmp_path / "out", to)
    assert result.exit_code == 2
    message = result.output.strip()
    assert "\n" not in message
    assert "vision encoder" in message and "vision_encoder/" in message and "config.json" in message
    assert not (tmp_path / "out").exists()


def test_following_the_hint_gives_a_loadable_transformers_folder(upstream_repo, tiny_layouts, tmp_path):
    # The hint: copy vision_encoder/ and config.json from a Cosmos3 export of the same model.
    shutil.copytree(tiny_layouts["diffusers"] / "vision_encoder", upstream_repo / "vision_encoder")
    shutil.copy(tiny_layouts["diffusers"] / "config.json", upstream_repo / "config.json")
    result = _convert(upstream_repo, tmp_path / "out", "transformers")
    assert result.exit_code == 0, result.output
    # Upstream's own class reads the folder, with the weights of the native transformers layout.
    loaded = Cosmos3OmniForConditionalGeneration.from_pretrained(tmp_path / "out")
    reference = Cosmos3OmniForConditionalGeneration.from_pretrained(tiny_layouts["transformers"])
    assert loaded.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in reference.state_dict().items())


@pytest.mark.parametrize("to", ["framework", "flat"])
def test_generator_layouts_convert_and_come_back_bit_exact(upstream_repo, tmp_path, to):
    there = diffusers_cosmos3.convert(upstream_repo, tmp_path / to, to=to)
    back = diffusers_cosmos3.convert(there, tmp_path / "back", to="diffusers")
    assert not (back / "vision_encoder").exists() and not (back / "config.json").exists()
    before = load_tensors(tensor_files(upstream_repo / "transformer"))
    after = load_tensors(tensor_files(back / "transformer"))
    assert before.keys() == after.keys()
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())


def test_transformers_shim_error_is_true_for_an_upstream_repo(upstream_repo, tiny_layouts):
    with pytest.raises(
        MissingConfigError, match=r"diffusers repo without the reasoner's config\.json"
    ) as error:
        Cosmos3ForConditionalGeneration.from_pretrained(upstream_repo)
    assert "--to diffusers" not in str(error.value)
    # Its advice, followed: copy config.json and vision_encoder/ from an export of the same model.
    shutil.copytree(tiny_layouts["diffusers"] / "vision_encoder", upstream_repo / "vision_encoder")
    shutil.copy(tiny_layouts["diffusers"] / "config.json", upstream_repo / "config.json")
    Cosmos3ForConditionalGeneration.from_pretrained(upstream_repo)


def test_pipeline_loads_as_upstream_ships_it(upstream_repo):
    pipeline = diffusers_cosmos3.load_pipeline(upstream_repo)
    assert type(pipeline).__name__ == "Cosmos3OmniPipeline"
