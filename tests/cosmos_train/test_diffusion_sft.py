"""Flow-matching SFT (`cosmos-train diffusion-sft`) on tiny offline pipelines of every supported family:
the loss falls with LoRA and with full fine-tuning, exports load in plain diffusers and equal the trained
pipeline, and a killed run resumes bit-equal, EMA included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from diffusers import DiffusionPipeline
from diffusion_helpers import IMAGE_PAIRS, fixed_loss, write_diffusion_job, write_video_pairs
from safetensors.torch import load_file
from sft_helpers import cli, cli_in_process

from cosmos_train.algorithms.diffusion_sft.trainer import run_diffusion_sft
from cosmos_train.checkpoints import is_complete
from cosmos_train.diffusion.adapter import adapter_class_for, pipeline_class_name
from cosmos_train.diffusion.loading import load_adapter
from cosmos_train.diffusion.weights import ExponentialAverage
from cosmos_train.jobs import read_job
from cosmos_train.tiny_models.pipelines import PIPELINES

EMA_FILE = ExponentialAverage.filename

NUM_FRAMES = 5


# Subprocess runs on one thread: two threads per process spin against each other on a busy 2-core machine.
ONE_THREAD = os.environ | {"OMP_NUM_THREADS": "1"}


@pytest.fixture
def tiny(tiny_pipeline):
    return tiny_pipeline


@pytest.fixture(scope="module")
def video_pairs(tmp_path_factory):
    return write_video_pairs(tmp_path_factory.mktemp("video-pairs"), frames=9)


def _data(family_folder: Path, video_pairs: Path) -> tuple[Path, int | None]:
    video = adapter_class_for(pipeline_class_name(str(family_folder))).video
    return (video_pairs, NUM_FRAMES) if video else (IMAGE_PAIRS, None)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lora", "full"])
@pytest.mark.parametrize("family", sorted(PIPELINES))
def test_loss_falls_on_a_tiny_overfit_set(tmp_path, tiny, video_pairs, family, mode):
    model = tiny(family)
    data, num_frames = _data(model, video_pairs)
    job = read_job(
        write_diffusion_job(tmp_path, model, data, lora=mode == "lora", num_frames=num_frames, cache=True)
    )
    trainer = run_diffusion_sft(job)

    torch.manual_seed(0)  # the video window
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    untrained = load_adapter(job.config.model, trainer.adapter.options)
    before = fixed_loss(untrained, untrained.transformer, batch, job.config.diffusion)
    after = fixed_loss(trainer.adapter, trainer.model, batch, job.config.diffusion)
    # Fixed noise and data, so the fall is the weights' doing alone. A LoRA on the attention projections
    # of a tiny random transformer moves less than full fine-tuning does.
    assert after < (0.95 if mode == "lora" else 0.85) * before, (family, mode, before, after)
    if mode == "lora":  # only the adapters trained
        assert all("lora" in name for name, p in trainer.model.named_parameters() if p.requires_grad)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lora", "full"])
def test_export_loads_in_plain_diffusers_and_equals_the_trained_pipeline(tmp_path, tiny, mode):
    """The in-training pipeline (EMA weights) against what users load: `load_lora_weights` on the base
    pipeline, or `from_pretrained` of the exported folder; `export --merge-lora` equals the LoRA."""
    model = tiny("sd3")
    job = read_job(
        write_diffusion_job(
            tmp_path, model, IMAGE_PAIRS, lora=mode == "lora", train={"max_steps": 6, "save_steps": 3},
            diffusion={"ema_decay": 0.5},
        )
    )  # fmt: skip
    trainer = run_diffusion_sft(job)
    run = Path(job.args.output_dir)
    step = run / "safetensors" / "step_6"
    call = {
        "height": 32,
        "width": 32,
        "num_inference_steps": 3,
        "max_sequence_length": 16,
        "output_type": "pt",
    }

    def sample(pipeline) -> torch.Tensor:
        return pipeline("a red circle", generator=torch.Generator().manual_seed(0), **call).images

    with trainer.weights_for_export():
        trained = sample(trainer.adapter.pipeline)
    base = DiffusionPipeline.from_pretrained(model)
    untrained = sample(base)
    if mode == "lora":
        base.load_lora_weights(step / "lora")
        loaded = sample(base)
    else:
        loaded = sample(DiffusionPipeline.from_pretrained(step))
    assert torch.equal(loaded, trained)
    assert (untrained - trained).abs().max() > 1e-3  # training changed what the pipeline makes

    # The EMA is what was exported: the raw trained weights give other samples.
    assert (sample(trainer.adapter.pipeline) - trained).abs().max() > 1e-4
    assert (run / "checkpoint-6" / EMA_FILE).is_file() and (run / "checkpoint-3" / EMA_FILE).is_file()

    merged = tmp_path / "merged"
    flags = ["--merge-lora"] if mode == "lora" else []
    result = cli_in_process("export", run / "checkpoint-6", merged, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (sample(DiffusionPipeline.from_pretrained(merged)) - trained).abs().max() < 1e-5
    assert "DiffusionPipeline.from_pretrained" in (merged / "README.md").read_text()


@pytest.mark.slow
def test_sigkill_then_resume_is_bit_equal_with_the_ema(tmp_path, tiny):
    model = tiny("sd3")
    train = {"max_steps": 12, "save_steps": 4, "per_device_train_batch_size": 2}
    diffusion = {"ema_decay": 0.9, "text_dropout": 0.25}

    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    done = cli(
        "diffusion-sft",
        "-c",
        write_diffusion_job(reference_dir, model, IMAGE_PAIRS, train=train, diffusion=diffusion),
        env=ONE_THREAD,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    killed_dir = tmp_path / "killed"
    killed_dir.mkdir()
    job = write_diffusion_job(
        killed_dir, model, IMAGE_PAIRS, train=train | {"resume_from_checkpoint": True}, diffusion=diffusion
    )
    exe = Path(sys.executable).with_name("cosmos-train")
    process = subprocess.Popen(
        [exe, "diffusion-sft", "-c", job],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ONE_THREAD,
    )
    run = killed_dir / "run"
    deadline = time.monotonic() + 600
    while not is_complete(run / "checkpoint-4") and time.monotonic() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert not (run / "model.safetensors").exists()  # the run really did not finish

    resumed = cli("diffusion-sft", "-c", job, env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    for name in ("model.safetensors", EMA_FILE):
        final, reference = load_file(run / name), load_file(reference_dir / "run" / name)
        assert final.keys() == reference.keys(), name
        for key in reference:
            assert torch.equal(final[key], reference[key]), (name, key)


@pytest.mark.two_ranks
@pytest.mark.slow
def test_ddp_two_processes(tmp_path, tiny):
    """`accelerate launch` on 2 CPU processes (gloo DDP): both ranks train, and the run checkpoints and
    exports as a single process does."""
    import socket

    from cosmos_train.launch import ACCELERATE_CONFIG

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    job = write_diffusion_job(
        tmp_path, tiny("sd3"), IMAGE_PAIRS,
        train={"max_steps": 4, "save_steps": 4, "per_device_train_batch_size": 2}, diffusion={"ema_decay": 0.5},
    )  # fmt: skip
    launcher = Path(sys.executable).with_name("accelerate")
    result = subprocess.run(
        [launcher, "launch", "--config_file", ACCELERATE_CONFIG, "--num_processes", "2",
         "--main_process_port", str(port), "-m", "cosmos_train", "diffusion-sft", "-c", job],
        capture_output=True, text=True, timeout=600,
        env=os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoint-4"
    assert is_complete(checkpoint)
    assert {path.name for path in checkpoint.glob("rng_state_*.pth")} == {
        "rng_state_0.pth",
        "rng_state_1.pth",
    }
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["train_batch_size"] == 2 and state["global_step"] == 4
    pipeline = DiffusionPipeline.from_pretrained(tiny("sd3"))
    pipeline.load_lora_weights(tmp_path / "run" / "safetensors" / "step_4" / "lora")
