"""DiffusionNFT (`cosmos-train nft`): it raises a weight-free reward on tiny offline pipelines of two
families, keeps its old policy (a copy of the trained parameters) apart from the EMA in checkpoints, and
refuses what it cannot do correctly. Its SIGKILL resume is tested with the other RL trainers' (test_rl_resume.py)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
import torch
from diffusion_helpers import model_section
from safetensors.torch import load_file
from sft_helpers import REPO
from typer.testing import CliRunner

from cosmos_train.cli import app
from cosmos_train.diffusion.adapter import adapter_class_for, pipeline_class_name
from cosmos_train.diffusion.weights import ExponentialAverage, OldPolicy, old_policy_decay
from cosmos_train.jobs import read_job
from cosmos_train.tiny_models.pipelines import PIPELINES

EMA_FILE, OLD_POLICY_FILE = ExponentialAverage.filename, OldPolicy.filename

PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"


# Subprocess runs on one thread: two threads per process spin against each other on a busy 2-core machine.
ONE_THREAD = os.environ | {"OMP_NUM_THREADS": "1"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def tiny(tiny_pipeline):
    return tiny_pipeline


def write_nft_job(
    folder: Path,
    model: Path,
    *,
    lora: bool = True,
    train: dict | None = None,
    extra: str = "",
    brightness: float = 1.0,
) -> Path:
    settings = {
        "output_dir": f'"{folder / "run"}"',
        "learning_rate": 1e-2 if lora else 1e-3,
        "max_steps": 24,
        "per_device_train_batch_size": 4,
        "logging_steps": 1,
        "save_steps": 100,
        "report_to": '"none"',
        "seed": 0,
    } | (train or {})
    text = 'kind = "nft"\n' + model_section(model)
    if lora:
        text += "[lora]\nr = 16\nalpha = 32\n"
    text += f'[data]\npath = "{PROMPTS}"\n[rewards]\nbrightness = {brightness}\n'
    text += "[rollout]\nsamples_per_prompt = 4\nsampling_steps = 4\ntrain_batch_size = 16\nheight = 32\nwidth = 32\n"
    text += "max_sequence_length = 16\n[nft]\nkl_beta = 0.0001\n" + extra
    text += "[train]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items())
    job = folder / "job.toml"
    job.write_text(text)
    return job


def rewards(trainer) -> list[float]:
    return [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "brightness"), [("sd3", 1.0), ("sana", -1.0)])
def test_nft_raises_brightness(tmp_path, tiny, family, brightness):
    """SD3 learns brighter, SANA darker: its tiny DC-AE decodes towards brightness 0.77, about where its samples
    start (0.75), so upwards it has little room (test_flow_grpo.py)."""
    trainer = read_job(write_nft_job(tmp_path, tiny(family), brightness=brightness)).run()
    curve = rewards(trainer)
    assert len(curve) == 24
    spread = statistics.mean(
        entry["reward_std"] for entry in trainer.state.log_history[:4] if "reward_std" in entry
    )
    first, last = statistics.mean(curve[:4]), statistics.mean(curve[-4:])
    # A clear margin: three times the reward's own spread within the first rollouts.
    assert last - first > max(3 * spread, 0.01), (family, first, last, spread, curve)


def test_old_policy_decay_types():
    assert [old_policy_decay(0, s) for s in (0, 100)] == [0.0, 0.0]
    assert [old_policy_decay(1, s) for s in (0, 100, 1000)] == [0.0, pytest.approx(0.1), 0.5]
    assert [old_policy_decay(2, s) for s in (74, 75, 100, 1000)] == [0.0, 0.0, pytest.approx(0.1875), 0.999]


def test_old_policy_is_a_lagged_copy_swapped_in_for_its_forwards():
    model = torch.nn.Linear(3, 2)
    old = OldPolicy(model, decay_type=1)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    trained = model.weight.detach().clone()
    with old.swapped_in():  # the model computes with the old weights, without copying them
        assert torch.equal(model.weight, before)
    assert torch.equal(model.weight, trained)
    old.update(100)  # after optimizer step 100: d = 0.1, 10% old, 90% new
    with old.swapped_in():
        assert torch.allclose(model.weight, 0.1 * before + 0.9 * trained)


def test_guidance_is_refused(tmp_path, tiny):
    job = write_nft_job(tmp_path, Path("model"))
    text = job.read_text().replace("[rollout]\n", "[rollout]\nguidance_scale = 4.5\n")
    job.write_text(text)
    result = CliRunner().invoke(app, ["validate-config", str(job)])
    assert result.exit_code == 2
    assert "DiffusionNFT samples without classifier-free guidance" in result.stderr
    assert result.stderr.count("\n") == 1


def test_gradient_accumulation_is_the_jobs(tmp_path, tiny):
    job = write_nft_job(tmp_path, tiny("sd3"), train={"gradient_accumulation_steps": 2})
    result = CliRunner().invoke(app, ["validate-config", str(job)])
    assert result.exit_code == 2 and "[train] gradient_accumulation_steps is set by the job" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(PIPELINES))
def test_every_family_samples_scores_and_trains(tmp_path, tiny, family):
    """Every adapter supplies what the RL trainers need: a latent shape, sampling, decoding to media
    (videos as B x T x H x W x C) and the training forward."""
    model = tiny(family)
    video = adapter_class_for(pipeline_class_name(str(model))).video
    job = write_nft_job(tmp_path, model, train={"max_steps": 2})
    text = job.read_text().replace("samples_per_prompt = 4", "samples_per_prompt = 2")
    text = text.replace("sampling_steps = 4", "sampling_steps = 2" + ("\nnum_frames = 5" if video else ""))
    job.write_text(text.replace("per_device_train_batch_size = 4", "per_device_train_batch_size = 2"))
    trainer = read_job(job).run()
    curve = rewards(trainer)
    assert len(curve) == 2 and all(0.0 <= value <= 1.0 for value in curve), curve
    assert (Path(trainer.args.output_dir) / "safetensors" / "step_2").is_dir()
    # The model's own weights (no second adapter), and the old policy and the EMA each in a file of their own,
    # under the trained parameters' names.
    run = Path(trainer.args.output_dir)
    weights, old, ema = (load_file(run / name) for name in ("model.safetensors", OLD_POLICY_FILE, EMA_FILE))
    assert old.keys() == ema.keys() and set(old) < set(weights) and not any(".old." in key for key in weights)
    assert all(".lora_" in key for key in old)


@pytest.mark.slow
def test_a_remote_reward_scores_as_the_local_one(tmp_path, tiny, monkeypatch):
    """`remote:brightness` through the real reward service gives the run the local built-in gives."""
    from cosmos_train.rewards import RewardSpec, build_media_rewards
    from cosmos_train.service.app import ENQUEUE_PATH, PULL_PATH, ServiceSettings, serving

    model = tiny("sd3")
    train = {"max_steps": 3}
    local_dir, remote_dir = tmp_path / "local", tmp_path / "remote"
    local_dir.mkdir()
    remote_dir.mkdir()
    local = rewards(read_job(write_nft_job(local_dir, model, train=train)).run())
    job = write_nft_job(remote_dir, model, train=train)
    job.write_text(job.read_text().replace("brightness = 1.0", '"remote:brightness" = 1.0'))
    hosted = {reward.name: reward for reward in build_media_rewards([RewardSpec("brightness", 1.0, {})])}
    with serving(ServiceSettings(token="nft-test-token"), hosted) as base:
        monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", base + ENQUEUE_PATH)
        monkeypatch.setenv("REMOTE_REWARD_FETCH_URL", base + PULL_PATH)
        monkeypatch.setenv("REMOTE_REWARD_TOKEN", "nft-test-token")
        remote = rewards(read_job(job).run())
    assert remote == pytest.approx(local, abs=1e-9) and len(remote) == 3
