"""A raw trainer checkpoint (weights only, no configs) loads and converts with a base repo beside it.

The result must be what upstream's own pipeline gives with the base repo's components and the raw
checkpoint's weights.
"""

import pytest
import torch
from diffusers import Cosmos3OmniPipeline, Cosmos3OmniTransformer, DiffusionPipeline
from safetensors.torch import load_file
from typer.testing import CliRunner

import diffusers_cosmos3
from diffusers_cosmos3 import testing as tiny
from diffusers_cosmos3.convert import app
from transformers_cosmos3 import Cosmos3ForConditionalGeneration
from transformers_cosmos3.checkpoint import MissingConfigError, save_sharded
from transformers_cosmos3.layouts import WeightNamesError

PROMPT = dict(prompt="a red cube", num_frames=1, height=32, width=32, guidance_scale=4.0)


def _generate(pipeline):
    for component in (pipeline.transformer, pipeline.vae):  # allocator-aligned, as upstream's reference
        for parameter in component.parameters():
            parameter.data = parameter.data.clone()
    pipeline.set_progress_bar_config(disable=True)
    return pipeline(
        **PROMPT, num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="pt"
    ).video


@pytest.fixture(scope="module")
def raw(tiny_layouts, tmp_path_factory):
    """The framework checkpoint's tensors alone (net. and net_ema.), in several shards: no pipeline/."""
    folder = tmp_path_factory.mktemp("raw") / "iter_000001000"
    save_sharded(
        load_file(tiny_layouts["framework"] / "model.safetensors"), folder, max_shard_bytes=64 * 1024
    )
    assert len(list(folder.glob("*.safetensors"))) > 1
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Same architecture (with action heads), other random weights in every component."""
    return tiny.save_tiny_cosmos3(tmp_path_factory.mktemp("base") / "repo", action=True, seed=1)


@pytest.fixture(scope="module")
def expected(tiny_layouts, base):
    """Upstream's pipeline from the base repo, with the raw checkpoint's EMA transformer put in."""
    transformer = Cosmos3OmniTransformer.from_pretrained(tiny_layouts["diffusers"], subfolder="transformer")
    return _generate(Cosmos3OmniPipeline.from_pretrained(base, transformer=transformer))


def test_base_repo_alone_generates_something_else(base, expected):
    assert not torch.equal(_generate(Cosmos3OmniPipeline.from_pretrained(base)), expected)


def test_load_pipeline_with_base(raw, base, expected):
    assert torch.equal(_generate(diffusers_cosmos3.load_pipeline(raw, base=base)), expected)


def test_convert_with_base_writes_a_repo_that_upstream_loads(raw, base, expected, tiny_layouts, tmp_path):
    out = diffusers_cosmos3.convert(raw, tmp_path / "converted", to="diffusers", base=base)
    assert torch.equal(_generate(DiffusionPipeline.from_pretrained(out)), expected)
    # The base's root config.json and vision_encoder/ config came along: the reasoner loads from it too.
    reasoner = Cosmos3ForConditionalGeneration.from_pretrained(out).state_dict()
    reference = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["transformers"]).state_dict()
    assert reasoner.keys() == reference.keys()
    assert all(torch.equal(reasoner[name], tensor) for name, tensor in reference.items())


def test_reasoner_from_raw_with_base(raw, base, tiny_layouts):
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    reference = Cosmos3ForConditionalGeneration.from_pretrained(tiny_layouts["transformers"])
    loaded = Cosmos3ForConditionalGeneration.from_pretrained(raw, base=base)
    regular = Cosmos3ForConditionalGeneration.from_pretrained(raw, base=base, prefer_ema=False)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, reference(input_ids=ids).logits)
        assert not torch.equal(regular(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_without_base_every_entry_point_names_the_option(raw, tmp_path):
    for load in (diffusers_cosmos3.load_pipeline, Cosmos3ForConditionalGeneration.from_pretrained):
        with pytest.raises(MissingConfigError, match="base="):
            load(raw)
    result = CliRunner().invoke(app, [str(raw), str(tmp_path / "out"), "--to", "diffusers"])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "--base BASE" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_cli_with_base(raw, base, tmp_path):
    result = CliRunner().invoke(
        app, [str(raw), str(tmp_path / "out"), "--to", "diffusers", "--base", str(base)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "transformer" / "config.json").is_file()


def test_base_of_another_architecture_is_refused_by_name(raw, tmp_path):
    other = tiny.save_tiny_cosmos3(tmp_path / "no-action-heads", action=False, seed=1)
    with pytest.raises(WeightNamesError, match=r"net_ema\.action2llm"):
        diffusers_cosmos3.convert(raw, tmp_path / "out", to="diffusers", base=other)
    assert not (tmp_path / "out").exists()


def test_base_that_is_not_a_repo_is_refused(raw, tiny_layouts, tmp_path):
    with pytest.raises(MissingConfigError, match="not a Cosmos3 repo"):
        diffusers_cosmos3.load_pipeline(raw, base=tmp_path)
