"""Cosmos3 action SFT end to end on a tiny model with action heads and a Reach2D LeRobot dataset: the job validates
from the dataset's meta, the loss falls on a small overfit set, and the export runs in upstream's pipeline as a
policy."""

from __future__ import annotations

import pytest
import torch
from action_helpers import CHUNK, action_job, reach2d_dataset
from typer.testing import CliRunner

from cosmos_train.cli import app
from cosmos_train.config import ConfigError
from cosmos_train.jobs import read_job
from cosmos_train.tiny_models.pipelines import save_tiny_pipeline


@pytest.fixture(scope="module")
def tiny_action_model(tmp_path_factory):
    return save_tiny_pipeline("cosmos3_action", tmp_path_factory.mktemp("models") / "cosmos3-action")


@pytest.fixture(scope="module")
def reach2d(tmp_path_factory):
    return reach2d_dataset(tmp_path_factory.mktemp("data") / "reach2d")


def test_validate_config_checks_the_dataset_without_decoding(tmp_path, tiny_action_model, reach2d):
    job = action_job(tmp_path, tiny_action_model, reach2d)
    result = CliRunner().invoke(app, ["validate-config", str(job)])
    assert result.exit_code == 0, result.output
    for override, message in (
        ("data.action_columns=['actions']", "actions"),
        ("action.domain=lebiro", "unknown Cosmos3 embodiment domain 'lebiro'"),
        ("action.use_state=true", None),
    ):
        if message is None:
            read_job(job, [override])  # state columns are named: fine
            continue
        with pytest.raises(ConfigError, match=message) as raised:
            read_job(job, [override])
        assert "\n" not in str(raised.value)


def test_policy_loss_falls_and_the_export_runs_in_upstreams_pipeline(tmp_path, tiny_action_model, reach2d):
    from cosmos_train.algorithms.action_sft.trainer import run_action_sft

    job = read_job(action_job(tmp_path, tiny_action_model, reach2d, train={"max_steps": 30, "learning_rate": 2e-3, "save_strategy": "steps", "save_steps": 30},
                              action={"caption_dropout": 0.0}, data_extra={"normalization": "mean_std"}))  # fmt: skip
    torch.manual_seed(0)
    trainer = run_action_sft(job)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, losses

    from diffusers import Cosmos3OmniPipeline
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import CosmosActionCondition
    from PIL import Image

    export = tmp_path / "run" / "safetensors" / "step_30"
    pipe = Cosmos3OmniPipeline.from_pretrained(export, enable_safety_checker=False)
    frame = trainer.train_dataset[0]["frames"][0]
    output = pipe(
        prompt="reach the red target", action=CosmosActionCondition("policy", CHUNK, "pusht", 256, image=Image.fromarray(frame)),
        num_inference_steps=2, guidance_scale=1.0, fps=10.0, use_system_prompt=False, output_type="np",
    )  # fmt: skip
    assert output.action[0].shape == (CHUNK, 2)
    # And as a policy in the dataset's units, with the settings the export wrote beside the pipeline.
    from diffusers_cosmos3.actions import Cosmos3ActionPolicy

    policy = Cosmos3ActionPolicy.from_pretrained(export, num_inference_steps=2, enable_safety_checker=False)
    assert (policy.settings.mode, policy.settings.fps, policy.normalization) == ("policy", 10.0, "mean_std")
    assert len(policy.stats["mean"]) == 2
    chunk = policy(frame, "reach the red target", generator=torch.Generator().manual_seed(0))
    assert chunk.shape == (CHUNK, 2) and chunk.dtype.name == "float32"
    # `cosmos-train export` of the checkpoint carries the settings too.
    exported = tmp_path / "exported"
    result = CliRunner().invoke(app, ["export", str(tmp_path / "run" / "checkpoint-30"), str(exported)])
    assert result.exit_code == 0, result.output
    assert (exported / "action_settings.json").read_text() == (export / "action_settings.json").read_text()


def test_a_lora_policy_exports_its_heads_and_runs_as_its_merged_export(tmp_path, tiny_action_model, reach2d):
    """`[lora]`: only the LoRA and the (fresh) action heads train; the run's LoRA export (the LoRA, the heads beside it,
    the base it applies to) samples the same chunk as `cosmos-train export --merge-lora` of the same checkpoint run
    through upstream's own pipeline loader."""
    from safetensors.torch import load_file

    from cosmos_train.algorithms.action_sft.trainer import run_action_sft
    from diffusers_cosmos3.actions import ACTION_HEADS_FILE, Cosmos3ActionPolicy

    path = action_job(tmp_path, tiny_action_model, reach2d, action={"action_heads": "fresh", "caption_dropout": 0.0},
                      train={"max_steps": 3, "save_strategy": "steps", "save_steps": 3})  # fmt: skip
    path.write_text(path.read_text() + "[lora]\nr = 4\nalpha = 4\n")
    trainer = run_action_sft(read_job(path))
    trained = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or n.startswith("action_") for n in trained), sorted(trained)[:5]
    assert any(n.startswith("action_proj_in") for n in trained)

    export = tmp_path / "run" / "safetensors" / "step_3"
    assert not (export / "model_index.json").exists()
    heads = load_file(str(export / "lora" / ACTION_HEADS_FILE))
    assert set(heads) == {n for n in trained if "lora_" not in n}
    merged = tmp_path / "merged"
    result = CliRunner().invoke(
        app, ["export", str(tmp_path / "run" / "checkpoint-3"), str(merged), "--merge-lora"]
    )
    assert result.exit_code == 0, result.output
    unmerged = tmp_path / "unmerged"
    result = CliRunner().invoke(app, ["export", str(tmp_path / "run" / "checkpoint-3"), str(unmerged)])
    assert result.exit_code == 0, result.output

    frame = trainer.train_dataset[0]["frames"][0]
    chunks = {}
    for name, folder in (("run", export), ("merged", merged), ("unmerged", unmerged)):
        policy = Cosmos3ActionPolicy.from_pretrained(
            folder, num_inference_steps=2, enable_safety_checker=False
        )
        chunks[name] = policy(frame, "reach the red target", generator=torch.Generator().manual_seed(0))
    base = Cosmos3ActionPolicy(type(policy.pipe).from_pretrained(tiny_action_model, enable_safety_checker=False),
                               policy.settings, num_inference_steps=2)  # fmt: skip
    untrained = base(frame, "reach the red target", generator=torch.Generator().manual_seed(0))
    assert abs(chunks["run"] - untrained).max() > 1e-2  # the heads and the LoRA took effect
    for name in ("merged", "unmerged"):
        assert abs(chunks["run"] - chunks[name]).max() < 1e-4, name


def test_kept_latents_train_as_encoding_each_time(tmp_path, tiny_action_model, reach2d):
    """`[data] cache`: each window's frames are decoded and encoded once; the losses equal encoding every time, and
    the per-mode parts are logged."""
    from cosmos_train.algorithms.action_sft.trainer import run_action_sft

    runs = {}
    for cache in (False, True):
        folder = tmp_path / f"cache-{cache}"
        folder.mkdir()
        job = action_job(folder, tiny_action_model, reach2d, action={"mode": "joint"},
                         train={"max_steps": 4}, data_extra={"cache": cache, "episodes": [0], "stride": 8})  # fmt: skip
        runs[cache] = run_action_sft(read_job(job))
    logged = {cache: [e for e in run.state.log_history if "loss" in e] for cache, run in runs.items()}
    assert [e["loss"] for e in logged[True]] == [e["loss"] for e in logged[False]]
    windows = runs[True].train_dataset.windows
    assert len(windows) == 1 and set(runs[True].latents) == set(windows) == runs[True].train_dataset.encoded
    assert runs[False].latents is None and not runs[False].train_dataset.encoded
    parts = {key for entry in logged[True] for key in entry if key.startswith("loss/")}
    assert parts and all(key.split("/")[1] in ("video", "action") for key in parts)


@pytest.mark.slow
def test_sigkill_then_resume_is_bit_equal(tmp_path, tiny_action_model, reach2d):
    """Killed once a checkpoint is complete, the job resumes to the uninterrupted run's weights and EMA (joint modes,
    caption dropout and kept latents draw from the restored random state)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from safetensors.torch import load_file
    from sft_helpers import cli

    from cosmos_train.checkpoints import is_complete

    train = {"max_steps": 8, "save_strategy": "steps", "save_steps": 4, "resume_from_checkpoint": True}
    settings = {"action": {"mode": "joint", "caption_dropout": 0.3, "ema_decay": 0.9},
                "data_extra": {"cache": True}, "train": train}  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    runs = {}
    for name in ("reference", "killed"):
        folder = tmp_path / name
        folder.mkdir()
        runs[name] = (folder, action_job(folder, tiny_action_model, reach2d, **settings))
    done = cli("action-sft", "-c", runs["reference"][1], env=env)
    assert done.returncode == 0, done.stderr[-3000:]

    folder, job = runs["killed"]
    exe = Path(sys.executable).with_name("cosmos-train")
    process = subprocess.Popen(
        [exe, "action-sft", "-c", job], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    run, deadline = folder / "run", time.monotonic() + 600
    while not is_complete(run / "checkpoint-4") and time.monotonic() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not (run / "checkpoint-8").exists()
    resumed = cli("action-sft", "-c", job, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    for name in ("model.safetensors", "ema.safetensors"):
        final, reference = load_file(run / name), load_file(runs["reference"][0] / "run" / name)
        assert final.keys() == reference.keys(), name
        assert all(torch.equal(final[key], reference[key]) for key in reference), name


def test_the_memory_estimates_canvas_is_upstreams_largest():
    """`TIER_LARGEST_CANVAS` (what estimate-memory sizes an action job's frames at) is the largest canvas of each tier
    in upstream's own table."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS

    from cosmos_train.algorithms.action_sft.schema import TIER_LARGEST_CANVAS

    for tier, canvases in _ACTION_RESOLUTION_BINS.items():
        largest = max(h * w for h, w in canvases.values())
        height, width = TIER_LARGEST_CANVAS[int(tier)]
        assert height * width == largest and (height, width) in canvases.values(), tier
