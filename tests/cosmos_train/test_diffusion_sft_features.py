"""`cosmos-train diffusion-sft` beyond the loss: validation samples (PNG grid, MP4 per prompt, TensorBoard),
gradient checkpointing, bf16 mixed precision on CPU, and the one-line errors for an unsupported pipeline, bad
data and a bad job file (`validate-config`)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from diffusion_helpers import IMAGE_PAIRS, write_diffusion_job, write_video_pairs
from sft_helpers import cli_in_process
from transformers import TrainerCallback

from cosmos_train.algorithms.diffusion_sft.trainer import run_diffusion_sft
from cosmos_train.jobs import read_job
from cosmos_train.tiny_models.pipelines import save_tiny_pipeline

PROMPTS = ["a red square on a white background", "a blue circle on a white background"]
ONE_STEP = {"max_steps": 1, "logging_steps": 1, "save_strategy": "no"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def sd3(tiny_pipeline) -> Path:
    return tiny_pipeline("sd3")


def _validation(steps: int = 2) -> dict:
    return {"validation_prompts": PROMPTS, "validation_steps": steps, "validation_inference_steps": 2}


def _losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


# --- validation samples -------------------------------------------------------------------------------------


def test_validation_writes_a_png_grid_for_images(tmp_path, sd3):
    from PIL import Image

    train = {"max_steps": 2, "save_strategy": "no"}
    job = read_job(write_diffusion_job(tmp_path, sd3, IMAGE_PAIRS, train=train, diffusion=_validation(1)))
    run_diffusion_sft(job)
    for step in (1, 2):
        folder = tmp_path / "run" / "samples" / f"step_{step}"
        assert [sample["prompt"] for sample in json.loads((folder / "samples.json").read_text())] == PROMPTS
        grid = Image.open(folder / "grid.png")
        # torchvision's make_grid: 2 images of 32 x 32 side by side with a 2-pixel border.
        assert grid.format == "PNG" and grid.size == (2 * 32 + 3 * 2, 32 + 2 * 2)
        assert not list(folder.glob("*.mp4"))
    # Fixed seeds per prompt: step 1 and 2 differ only by one update of a LoRA (a visible change, not noise).
    first = torch.tensor(list(Image.open(tmp_path / "run/samples/step_1/grid.png").getdata()))
    second = torch.tensor(list(Image.open(tmp_path / "run/samples/step_2/grid.png").getdata()))
    assert first.shape == second.shape and not torch.equal(first, second)


def test_validation_grid_goes_to_tensorboard(tmp_path, sd3):
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    train = {"max_steps": 2, "save_strategy": "no", "report_to": ["tensorboard"]}
    job = read_job(write_diffusion_job(tmp_path, sd3, IMAGE_PAIRS, train=train, diffusion=_validation(2)))
    run_diffusion_sft(job)
    images = []
    for events in (tmp_path / "run").rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events), size_guidance={IMAGES: 0}).Reload()
        if "validation" in accumulator.Tags()[IMAGES]:
            images += accumulator.Images("validation")
    assert [(image.step, image.width, image.height) for image in images] == [(2, 70, 36)]


def test_validation_writes_one_mp4_per_prompt_for_video(tmp_path):
    """A video family (Cosmos3): `000.mp4`, `001.mp4`, each decodable with PyAV and `num_frames` long."""
    import av

    model = save_tiny_pipeline("cosmos3", tmp_path / "cosmos3")
    videos = write_video_pairs(tmp_path / "videos", frames=9)
    train = {"max_steps": 1, "save_strategy": "no", "per_device_train_batch_size": 2}
    job = read_job(
        write_diffusion_job(tmp_path, model, videos, num_frames=5, train=train, diffusion=_validation(1))
    )
    run_diffusion_sft(job)
    folder = tmp_path / "run" / "samples" / "step_1"
    assert sorted(path.name for path in folder.iterdir()) == ["000.mp4", "001.mp4", "samples.json"]
    for name in ("000.mp4", "001.mp4"):
        with av.open(str(folder / name)) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        assert len(frames) == 5 and frames[0].shape == (32, 32, 3), (name, len(frames))


# --- gradient checkpointing and mixed precision ---------------------------------------------------------------


class _Recorder(TrainerCallback):
    """Counts calls of the first transformer block's `forward` (gradient checkpointing runs it again in the
    backward pass; forward hooks do not see that recomputation) and records the dtypes of an attention
    projection's outputs."""

    def __init__(self):
        self.forwards, self.dtypes = 0, set()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        block = model.transformer_blocks[0]
        forward = block.forward

        def counted(*args, **kwargs):
            self.forwards += 1
            return forward(*args, **kwargs)

        block.forward = counted
        block.attn.to_q.register_forward_hook(lambda module, inputs, output: self.dtypes.add(output.dtype))


def test_gradient_checkpointing_recomputes_and_matches(tmp_path, sd3):
    """`[train] gradient_checkpointing = true` turns on diffusers' checkpointing on the transformer: blocks run
    again in the backward pass, and the first step's loss and gradient norm equal a run without it."""
    runs = {}
    for checkpointing in (False, True):
        folder = tmp_path / str(checkpointing)
        folder.mkdir()
        train = ONE_STEP | {"gradient_checkpointing": checkpointing}
        recorder = _Recorder()
        trainer = run_diffusion_sft(
            read_job(write_diffusion_job(folder, sd3, IMAGE_PAIRS, train=train)), callbacks=[recorder]
        )
        (logged,) = [entry for entry in trainer.state.log_history if "loss" in entry]
        runs[checkpointing] = (trainer.model.is_gradient_checkpointing, recorder.forwards, logged)
    assert runs[False][:2] == (False, 1)
    assert runs[True][:2] == (True, 2)
    for key in ("loss", "grad_norm"):
        assert math.isclose(runs[True][2][key], runs[False][2][key], rel_tol=1e-5), key


def test_bf16_on_cpu_trains_in_mixed_precision(tmp_path, sd3):
    """`bf16 = true` on CPU: the transformer runs under bfloat16 autocast, its trained weights stay float32,
    and a few steps give finite losses."""
    recorder = _Recorder()
    train = {"max_steps": 3, "logging_steps": 1, "save_strategy": "no", "bf16": True}
    trainer = run_diffusion_sft(
        read_job(write_diffusion_job(tmp_path, sd3, IMAGE_PAIRS, train=train)), callbacks=[recorder]
    )
    losses = _losses(trainer)
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses), losses
    assert recorder.dtypes == {torch.bfloat16}
    trained = [p for p in trainer.model.parameters() if p.requires_grad]
    assert trained and all(p.dtype == torch.float32 for p in trained)


# --- one-line errors -----------------------------------------------------------------------------------------


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_unsupported_pipeline_exits_2_listing_the_supported_ones(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    from cosmos_train.diffusion.adapter import adapters

    unet = UNet2DModel(
        sample_size=8,
        block_out_channels=(8, 8),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(tmp_path / "ddpm")
    result = cli_in_process(
        "diffusion-sft", "-c", write_diffusion_job(tmp_path, tmp_path / "ddpm", IMAGE_PAIRS)
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = _error_lines(result)
    assert "DDPMPipeline" in line
    supported = line.split("supported pipelines: ")[1]
    for name in adapters():
        assert name in supported, name
    assert not (tmp_path / "run" / "checkpoint-1").exists()


def test_pair_without_a_prompt_exits_2_naming_the_file(tmp_path, sd3):
    data = tmp_path / "pairs"
    shutil.copytree(IMAGE_PAIRS, data)
    bad = data / "0003.json"
    bad.write_text(json.dumps({"caption": "a green square on a white background"}))
    job = write_diffusion_job(tmp_path, sd3, data, train=ONE_STEP)
    result = cli_in_process("diffusion-sft", "-c", job)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = _error_lines(result)
    assert str(bad) in line and "no 'prompt'" in line, line

    # skip_bad trains on the other seven instead.
    trainer = run_diffusion_sft(read_job(job, ["data.skip_bad=true"]))
    assert len(trainer.train_dataset) == 7 and trainer.state.global_step == 1


def test_validate_config_checks_a_diffusion_job_without_training(tmp_path, sd3):
    from cosmos_train.config import ConfigError

    job = write_diffusion_job(tmp_path, sd3, IMAGE_PAIRS, diffusion=_validation(10) | {"ema_decay": 0.99})
    result = cli_in_process("validate-config", job)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"{job}: ok (diffusion-sft job)"
    assert not (tmp_path / "run").exists()

    text = job.read_text()
    cases = {
        "misspelt key": (
            text.replace("[diffusion]\n", '[diffusion]\ntimestep_densty = "uniform"\n'),
            ["diffusion", "timestep_densty", "did you mean 'timestep_density'"],
        ),
        "unknown choice": (
            text.replace("[diffusion]\n", '[diffusion]\ntimestep_density = "logit-normal"\n'),
            ["diffusion", "timestep_density", "logit_normal"],
        ),
        "out of range": (text.replace("ema_decay = 0.99", "ema_decay = 1.5"), ["diffusion", "ema_decay"]),
        "validation without prompts": (
            text.replace("validation_prompts = ", "# validation_prompts = "),
            ["diffusion", "validation_steps", "validation_prompts"],
        ),
        "unknown conditioning mode": (
            text.replace("[diffusion]\n", "[diffusion]\nconditioning_mix = { t2i = 1.0 }\n"),
            ["diffusion", "conditioning_mix", "t2i"],
        ),
    }
    for case, (bad, expected) in cases.items():
        path = tmp_path / f"{case.replace(' ', '_')}.toml"
        path.write_text(bad)
        with pytest.raises(ConfigError) as error:  # what validate-config runs (`read_job`)
            read_job(path)
        message = str(error.value)
        assert "\n" not in message and str(path) in message, (case, message)
        assert all(part in message for part in expected), (case, message)
    # ...and on the command line: exit code 2 and that one line.
    result = cli_in_process("validate-config", path)
    assert result.returncode == 2 and _error_lines(result) == [f"error: {message}"], result.stderr[-2000:]
