"""`cosmos-train export` works the same for every diffusion kind and family: a DiffusionNFT LoRA run (whose
checkpoints also hold the old policy and the EMA) on SD3, SANA-Video and Cosmos-Predict2.5 exports from the run's
folder or a `checkpoint-N`, as a LoRA, merged (`--merge-lora`), or without the EMA (`--no-ema`). What plain
diffusers loads from each predicts what the trained transformer predicts. The LoRA is trained with alpha 4 x r,
so an export that wrote another scale would predict otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from diffusion_rl_helpers import write_rl_job
from typer.testing import CliRunner

from cosmos_train.cli import app
from cosmos_train.diffusion.adapter import AdapterOptions, adapter_class_for
from cosmos_train.jobs import read_job

FAMILIES = ["sd3", "sana_video", "cosmos_predict2_5"]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def predict(adapter, transformer) -> torch.Tensor:
    """The velocity at fixed latents, noise level and prompt."""
    height, width, frames = 32, 32, 5 if adapter.video else None
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(2, *adapter.latent_shape(height, width, frames), generator=generator)
    with torch.no_grad():
        conditioning = adapter.encode_prompts(["a red square", "a blue circle"])
        return adapter.predict_velocity(transformer, latents, torch.tensor([0.7, 0.3]), conditioning).float()


@pytest.fixture(scope="module")
def trained(tiny_pipeline, tmp_path_factory):
    """{family: (run folder, the pipeline folder, predictions with the EMA weights and with the raw ones)}."""
    runs = {}
    for family in FAMILIES:
        folder = tmp_path_factory.mktemp(f"export-{family}")
        model = tiny_pipeline(family)
        rollout = {"samples_per_prompt": 2, "height": 32, "width": 32} | (
            {"num_frames": 5} if family != "sd3" else {}
        )
        job = write_rl_job(
            folder,
            model,
            kind="nft",
            rollout=rollout,
            algorithm={"ema_decay": 0.5},
            train={"max_steps": 2, "save_steps": 2, "per_device_train_batch_size": 2},
        )
        job.write_text(job.read_text().replace("r = 16\nalpha = 32", "r = 4\nalpha = 16"))
        trainer = read_job(job).run()
        adapter = trainer.adapter
        with trainer.weights_for_export():
            ema = predict(adapter, adapter.transformer)
        runs[family] = (folder / "run", model, ema, predict(adapter, adapter.transformer))
    return runs


def loaded_adapter(model: Path, folder: Path, lora: bool):
    from diffusers import DiffusionPipeline

    source = model if lora else folder
    pipeline = DiffusionPipeline.from_pretrained(source, trust_remote_code=True)
    if lora:
        pipeline.load_lora_weights(folder / "lora")
    return adapter_class_for(type(pipeline).__name__)(pipeline, AdapterOptions(max_sequence_length=16))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    ("where", "flags", "weights"),
    [
        ("run", [], "ema"),
        ("run", ["--merge-lora"], "ema"),
        ("checkpoint-2", ["--no-ema"], "raw"),
        ("checkpoint-2", ["--merge-lora", "--no-ema"], "raw"),
    ],
    ids=["lora", "merged", "checkpoint-no-ema", "checkpoint-merged-no-ema"],
)
def test_export_of_an_nft_lora_run_predicts_as_trained(tmp_path, trained, family, where, flags, weights):
    run, model, ema, raw = trained[family]
    source = run if where == "run" else run / where
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(source), str(out), *flags])
    assert result.exit_code == 0, result.output
    adapter = loaded_adapter(model, out, lora="--merge-lora" not in flags)
    expected = ema if weights == "ema" else raw
    assert (ema - raw).abs().max() > 1e-6  # the EMA and the raw weights predict differently
    torch.testing.assert_close(predict(adapter, adapter.transformer), expected, atol=1e-5, rtol=1e-4)
