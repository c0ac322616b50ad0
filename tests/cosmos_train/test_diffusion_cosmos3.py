"""The Cosmos3 adapter (`cosmos_train.diffusion.families.cosmos3`) on the tiny `Cosmos3OmniPipeline`: found from a saved
folder; its batched velocity equals upstream's per-sample forward (the pipeline's own call) under mixed
conditioning; conditioning modes follow the mix; the loss ignores clean frames; the reasoner stays frozen; the
LoRA export loads in plain diffusers with the documented call and its framework copy round-trips; and
`cosmos-train diffusion-sft` runs on it with LoRA and with full fine-tuning."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file
from sft_helpers import _toml, cli_in_process

from cosmos_train.config import LoraSection
from cosmos_train.diffusion.adapter import AdapterOptions, adapter_class_for, pipeline_class_name
from cosmos_train.diffusion.families.cosmos3 import FRAMEWORK_LORA, GENERATOR_PARAMETER, Cosmos3Adapter
from cosmos_train.diffusion.flow import add_noise, flow_matching_loss
from cosmos_train.diffusion.loading import load_adapter, prepare_training
from cosmos_train.tiny_models.pipelines import save_tiny_pipeline
from diffusers_cosmos3 import lora_to_diffusers
from diffusers_cosmos3.batched import _REASONER_PARAM, Cosmos3TrainingSample, per_sample_forward

torch.set_num_threads(1)

MIX = {"t2v": 0.5, "i2v": 0.3, "v2v": 0.2}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_pipeline("cosmos3", tmp_path_factory.mktemp("tiny") / "cosmos3")


def adapter_for(folder, mix=None) -> Cosmos3Adapter:
    adapter = load_adapter(str(folder), AdapterOptions(conditioning_mix=mix or dict(MIX)))
    adapter.pipeline.set_progress_bar_config(disable=True)
    return adapter


def batch(adapter, frames=3, height=2, width=3, seed=0):
    """Latents, noise, per-row sigmas and clean frames for t2v / i2v / v2v / a dropped caption (i2v)."""
    generator = torch.Generator().manual_seed(seed)
    channels = adapter.transformer.config.latent_channel
    x0 = torch.randn(4, channels, frames, height, width, generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    sigmas = torch.tensor([0.2, 0.5, 0.8, 0.95])
    clean = torch.zeros(4, frames, dtype=torch.bool)
    clean[1, 0] = clean[2, :2] = clean[3, 0] = True
    prompts = ["a red cube", "a dog running through a park", "waves at dusk", ""]
    return x0, noise, sigmas, clean, prompts


def reference(adapter, prompts, x0, noise, sigmas, clean):
    """Upstream's native per-sample forward, fed exactly what `Cosmos3OmniPipeline.__call__` feeds it: its own
    `tokenize_prompt` (the negative prompt's tokens for a dropped caption) and `x_t` with clean frames from x0."""
    pipe = adapter.pipeline
    frames, height, width = x0.shape[2:]
    pixel_frames = 1 if frames == 1 else (frames - 1) * pipe.vae_scale_factor_temporal + 1
    samples = []
    for row, prompt in enumerate(prompts):
        cond, uncond = pipe.tokenize_prompt(
            prompt, num_frames=pixel_frames, height=height * 16, width=width * 16, fps=24.0
        )
        sigma = float(sigmas[row])
        samples.append(
            Cosmos3TrainingSample(
                uncond if prompt == "" else cond,
                x0=x0[row],
                noisy=sigma * noise[row] + (1 - sigma) * x0[row],
                timestep=sigma * 1000,
                condition_frames=torch.nonzero(clean[row]).flatten().tolist(),
            )
        )
    return torch.cat(per_sample_forward(adapter.transformer, pipe, samples))


# --- discovery -------------------------------------------------------------------------------------------


def test_adapter_found_from_saved_folder_and_targets_only_the_generator(folder):
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == "Cosmos3OmniPipeline"
    assert adapter_class_for(pipeline_class_name(str(folder))) is Cosmos3Adapter
    adapter = adapter_for(folder)
    assert adapter.video and type(adapter.pipeline).__name__ == "Cosmos3OmniPipeline"
    targets = prepare_training(adapter, LoraSection(r=4, alpha=4))["target_modules"]
    lora = [name for name, p in adapter.transformer.named_parameters() if p.requires_grad]
    assert lora and all("lora_" in name for name in lora)
    # Every default target hits generator modules only; the reasoner's keys/values stay cacheable.
    assert not [name for name in lora if _REASONER_PARAM.search(name.replace(".base_layer", ""))]
    for target in targets:
        assert any(f".{target}.lora_A" in name for name in lora), target
    assert adapter.reasoner_frozen(adapter.transformer)


# --- the velocity ----------------------------------------------------------------------------------------


def test_predict_velocity_equals_native_per_sample_forward_with_mixed_conditioning(folder):
    adapter = adapter_for(folder)
    x0, noise, sigmas, clean, prompts = batch(adapter)
    noisy = add_noise(x0, noise, sigmas, clean)  # what the trainer passes: clean frames restored
    conditioning = adapter.encode_prompts(prompts)
    with torch.no_grad():
        expected = reference(adapter, prompts, x0, noise, sigmas, clean)
        ours = adapter.predict_velocity(adapter.transformer, noisy, sigmas, conditioning, clean)
    assert ours.shape == x0.shape
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-4)
    assert not ours[clean.nonzero(as_tuple=True)[0], :, clean.nonzero(as_tuple=True)[1]].any()

    # With the reasoner frozen (full fine-tuning) the second call replays its cached keys/values: same output
    # and the same generator gradients as the native forward.
    adapter.prepare_full_finetuning()
    assert adapter.reasoner_frozen(adapter.transformer)
    adapter.reasoner_cache.clear()
    target = torch.randn(x0.shape, generator=torch.Generator().manual_seed(5))

    def gradients(prediction):
        adapter.transformer.zero_grad(set_to_none=True)
        flow_matching_loss(prediction, x0, noise + target, sigmas, clean).backward()
        return {n: p.grad.clone() for n, p in adapter.transformer.named_parameters() if p.grad is not None}

    expected_grads = gradients(reference(adapter, prompts, x0, noise, sigmas, clean))
    first = adapter.predict_velocity(adapter.transformer, noisy, sigmas, conditioning, clean)
    assert len(adapter.reasoner_cache) == 4
    cached = adapter.predict_velocity(adapter.transformer, noisy, sigmas, conditioning, clean)
    torch.testing.assert_close(first, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cached, expected, atol=1e-5, rtol=1e-4)
    cached_grads = gradients(cached)
    assert cached_grads.keys() == expected_grads.keys() and cached_grads
    for name, grad in expected_grads.items():
        torch.testing.assert_close(cached_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_images_are_one_frame_videos_t2i(folder):
    adapter = adapter_for(folder)
    pixels = torch.rand(2, 3, 32, 48) * 2 - 1
    latents = adapter.encode_pixels(pixels)
    assert latents.shape == (2, adapter.transformer.config.latent_channel, 1, 2, 3)
    torch.testing.assert_close(latents, adapter.pipeline._encode_video(pixels.unsqueeze(2)))
    assert adapter.decode_latents(latents).shape == (2, 3, 1, 32, 48)
    assert not adapter.condition_frames(latents).any()  # t2i: nothing given clean
    noise = torch.randn_like(latents)
    sigmas = torch.tensor([0.3, 0.9])
    prompts = ["a cat", "a red car"]
    with torch.no_grad():
        ours = adapter.predict_velocity(
            adapter.transformer, add_noise(latents, noise, sigmas), sigmas, adapter.encode_prompts(prompts)
        )
        expected = reference(adapter, prompts, latents, noise, sigmas, torch.zeros(2, 1, dtype=torch.bool))
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-4)


def test_condition_frames_follow_the_mix(folder):
    adapter = adapter_for(folder)
    latents = torch.zeros(4000, 1, 5, 1, 1)
    frames = adapter.condition_frames(latents, torch.Generator().manual_seed(0))
    clean = frames.sum(1)
    # Only leading frames are clean: t2v none, i2v frame 0, v2v frames 0 and 1.
    assert torch.equal(frames, torch.arange(5)[None] < clean[:, None])
    for count, (mode, weight) in enumerate(MIX.items()):
        assert abs((clean == count).float().mean().item() - weight) < 0.03, mode
    # The global RNG when no generator is given, so a resumed run draws the same modes.
    torch.manual_seed(3)
    first = adapter.condition_frames(latents[:64])
    torch.manual_seed(3)
    assert torch.equal(first, adapter.condition_frames(latents[:64]))
    # Always a frame left to generate: v2v on 2 latent frames falls back to t2v; 1 frame is t2i.
    only_v2v = adapter_for(folder, {"v2v": 1.0})
    assert only_v2v.condition_frames(torch.zeros(8, 1, 3, 1, 1)).sum(1).eq(2).all()
    assert not only_v2v.condition_frames(torch.zeros(8, 1, 2, 1, 1)).any()
    assert not only_v2v.condition_frames(torch.zeros(8, 1, 1, 1, 1)).any()
    with pytest.raises(ValueError, match="unknown modes"):
        adapter_for(folder, {"t2x": 1.0}).condition_frames(latents[:2])


def test_masked_loss_ignores_clean_frames(folder):
    adapter = adapter_for(folder)
    x0, noise, sigmas, clean, prompts = batch(adapter)
    noisy = add_noise(x0, noise, sigmas, clean)
    assert torch.equal(noisy[2, :, :2], x0[2, :, :2])  # clean frames are not noised
    with torch.no_grad():
        prediction = adapter.predict_velocity(
            adapter.transformer, noisy, sigmas, adapter.encode_prompts(prompts), clean
        )
    loss = flow_matching_loss(prediction, x0, noise, sigmas, clean)
    changed = prediction.clone()
    changed[2, :, :2] += 100.0  # v2v's clean frames
    changed[1, :, 0] -= 50.0  # i2v's
    assert flow_matching_loss(changed, x0, noise, sigmas, clean) == loss
    changed[2, :, 2] += 1.0  # a noisy frame does count
    assert flow_matching_loss(changed, x0, noise, sigmas, clean) > loss


def test_full_finetuning_trains_the_generator_only_and_every_trained_weight_gets_a_gradient(folder):
    adapter = adapter_for(folder)
    adapter.prepare_full_finetuning()
    trained = {name for name, p in adapter.transformer.named_parameters() if p.requires_grad}
    assert trained and all(GENERATOR_PARAMETER.search(name) for name in trained)
    assert not [name for name in trained if _REASONER_PARAM.search(name)]
    assert not {"embed_tokens.weight", "norm.weight"} & trained
    # No trained weight is left without a gradient (DDP's reducer needs every one of them used).
    x0, noise, sigmas, clean, prompts = batch(adapter)
    prediction = adapter.predict_velocity(
        adapter.transformer,
        add_noise(x0, noise, sigmas, clean),
        sigmas,
        adapter.encode_prompts(prompts),
        clean,
    )
    flow_matching_loss(prediction, x0, noise, sigmas, clean).backward()
    assert {name for name, p in adapter.transformer.named_parameters() if p.grad is not None} == trained


# --- LoRA export -----------------------------------------------------------------------------------------


def test_lora_export_loads_in_plain_diffusers_with_the_documented_call(folder, tmp_path):
    adapter = adapter_for(folder)
    rank, alpha = 4, 8  # alpha != r: a halved or doubled scale would show
    prepare_training(adapter, LoraSection(r=rank, alpha=alpha))
    with torch.no_grad():
        for name, parameter in adapter.transformer.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.2, generator=torch.Generator().manual_seed(len(name)))
    state = get_peft_model_state_dict(adapter.transformer)
    out = tmp_path / "lora"
    adapter.save_lora(out, state, alpha=alpha, rank=rank)

    # The documented call, run literally on a pipeline loaded the plain diffusers way.
    pipe = DiffusionPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    exec(adapter.lora_loading_call(out), {"pipe": pipe})
    loaded = Cosmos3Adapter(pipe, adapter.options)
    base = Cosmos3Adapter(DiffusionPipeline.from_pretrained(folder), adapter.options)

    x0, noise, sigmas, clean, prompts = batch(adapter)
    noisy, conditioning = add_noise(x0, noise, sigmas, clean), adapter.encode_prompts(prompts)
    with torch.no_grad():
        trained = adapter.predict_velocity(adapter.transformer, noisy, sigmas, conditioning, clean)
        reloaded = loaded.predict_velocity(pipe.transformer, noisy, sigmas, conditioning, clean)
        untouched = base.predict_velocity(base.transformer, noisy, sigmas, conditioning, clean)
    torch.testing.assert_close(reloaded, trained, atol=1e-6, rtol=1e-5)
    assert (trained - untouched).abs().max() > 1e-2  # the LoRA does change the output
    # The pipeline's own sampler with a fixed seed, too.
    sample = {"height": 32, "width": 32, "num_frames": 5, "num_inference_steps": 2, "guidance_scale": 2.0}
    torch.testing.assert_close(loaded.generate(["a cat"], **sample), adapter.generate(["a cat"], **sample))

    # The framework-named copy holds the same tensors under framework names.
    framework = load_file(out / FRAMEWORK_LORA)
    assert all(k.startswith("net.") for k in framework)
    assert any("q_proj_moe_gen" in k for k in framework) and not any("add_q_proj" in k for k in framework)
    back = lora_to_diffusers(framework)
    assert back.keys() == state.keys()
    for key, value in state.items():
        assert torch.equal(back[key], value.cpu()), key


def test_generate_shapes(folder):
    adapter = adapter_for(folder)
    common = {"height": 32, "width": 32, "num_inference_steps": 1, "guidance_scale": 1.0}
    video = adapter.generate(["a cat", "a dog"], num_frames=5, **common)
    image = adapter.generate(["a cat"], num_frames=1, **common)
    assert video.shape == (2, 5, 3, 32, 32) and image.shape == (1, 3, 32, 32)
    assert video.min() >= 0 and video.max() <= 1


def test_export_keeps_the_repo_safety_setting(folder, tmp_path):
    """Loading turns Cosmos Guardrail off (training never runs it); a full export keeps the repo's setting."""
    guarded = tmp_path / "guarded"
    DiffusionPipeline.from_pretrained(folder).save_pretrained(guarded)
    index = json.loads((guarded / "model_index.json").read_text())
    (guarded / "model_index.json").write_text(json.dumps(index | {"enable_safety_checker": True}))
    adapter = adapter_for(guarded)  # without the load kwargs this raises (no cosmos_guardrail installed)
    assert adapter.pipeline.safety_checker is None
    adapter.pipeline.save_pretrained(tmp_path / "export")
    assert json.loads((tmp_path / "export" / "model_index.json").read_text())["enable_safety_checker"] is True


# --- end to end ------------------------------------------------------------------------------------------


def write_video_pairs(folder: Path, count: int = 4, frames: int = 9, size: int = 32) -> Path:
    """Short MP4s of a coloured square moving right, each with a `{"prompt": ...}` JSON, written by the toolkit's
    deterministic `write_mp4` (the same bytes in every run)."""
    from cosmos_train.diffusion.media_io import write_mp4

    folder.mkdir(parents=True, exist_ok=True)
    colors = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}
    for index, (color, rgb) in enumerate(list(colors.items())[:count]):
        name = folder / f"{index:04d}"
        pixels = np.full((frames, size, size, 3), 255, dtype=np.uint8)
        for step in range(frames):
            pixels[step, 10:22, 2 + 2 * step : 14 + 2 * step] = rgb
        write_mp4(Path(f"{name}.mp4"), pixels, fps=8)
        Path(f"{name}.json").write_text(json.dumps({"prompt": f"a {color} square moving right"}))
    return folder


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_cli_diffusion_sft_trains_on_tiny_cosmos3(folder, tmp_path, mode):
    data = write_video_pairs(tmp_path / "pairs")
    train = {
        "output_dir": str(tmp_path / "run"),
        "learning_rate": 1e-3,
        "max_steps": 3,
        "per_device_train_batch_size": 2,
        "logging_steps": 1,
        "save_steps": 3,
        "report_to": "none",
        "seed": 0,
    }
    diffusion = {"text_dropout": 0.3, "conditioning_mix": MIX}
    lines = ['kind = "diffusion-sft"\n', f'[model]\nname_or_path = "{folder}"\n']
    if mode == "lora":
        lines.append("[lora]\nr = 4\nalpha = 8\n")
    # LoRA runs on the latent/text cache: text dropout then swaps in the cached empty prompt (fixed-length rows).
    cache = "cache = true\n" if mode == "lora" else ""
    lines.append(f'[data]\npath = "{data}"\nheight = 32\nwidth = 32\nnum_frames = 5\n{cache}')
    lines.append("[diffusion]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in diffusion.items()))
    lines.append("[train]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in train.items()))
    job = tmp_path / "job.toml"
    job.write_text("\n".join(lines))

    result = cli_in_process("diffusion-sft", "--config", job)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "checkpoint-3" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses), losses
    export = tmp_path / "run" / "safetensors" / "step_3"
    if mode == "lora":
        assert (export / "lora" / "pytorch_lora_weights.safetensors").is_file()
        assert (export / "lora" / FRAMEWORK_LORA).is_file()
    else:
        pipe = DiffusionPipeline.from_pretrained(export)
        assert type(pipe).__name__ == "Cosmos3OmniPipeline"
        # The reasoner is bit-identical to the untrained one; the generator moved.
        before = DiffusionPipeline.from_pretrained(folder).transformer.state_dict()
        after = pipe.transformer.state_dict()
        for name, value in after.items():
            if _REASONER_PARAM.search(name) or name in ("embed_tokens.weight", "norm.weight"):
                assert torch.equal(value, before[name]), name
        assert not torch.equal(
            after["layers.0.self_attn.add_q_proj.weight"], before["layers.0.self_attn.add_q_proj.weight"]
        )


def _value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return _toml(value)


DDP_SCRIPT = r"""
import copy, os, sys
import torch
import torch.distributed as dist

def grads_of(adapter, model, rank):
    from cosmos_train.diffusion.flow import add_noise, flow_matching_loss
    generator = torch.Generator().manual_seed(100 + rank)
    x0 = torch.randn(2, 8, 3, 2, 2, generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    sigmas = torch.tensor([0.3, 0.7])
    clean = torch.tensor([[True, False, False], [False, False, False]])
    conditioning = adapter.encode_prompts([f"prompt {rank}", ""])
    prediction = adapter.predict_velocity(model, add_noise(x0, noise, sigmas, clean), sigmas, conditioning, clean)
    flow_matching_loss(prediction, x0, noise, sigmas, clean).backward()

def main(rank, world, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for mode in ("lora", "full"):
        check(rank, world, mode)
    dist.destroy_process_group()

def check(rank, world, mode):
    from diffusers_cosmos3.testing import build_pipeline
    from cosmos_train.diffusion.families.cosmos3 import Cosmos3Adapter
    from cosmos_train.config import LoraSection
    from cosmos_train.diffusion.loading import prepare_training
    adapter = Cosmos3Adapter(build_pipeline())
    torch.manual_seed(0)
    if mode == "lora":
        prepare_training(adapter, LoraSection(r=4, alpha=8))
    else:
        adapter.prepare_full_finetuning()
    reference = copy.deepcopy(adapter.transformer)
    ddp = torch.nn.parallel.DistributedDataParallel(adapter.transformer)  # strict: every trained weight used
    for step in range(2):  # the second step replays the reasoner cache
        ddp.zero_grad(set_to_none=True)
        grads_of(adapter, ddp, rank)
        synced = {n: p.grad for n, p in adapter.transformer.named_parameters() if p.requires_grad}
        reference.zero_grad(set_to_none=True)
        local = Cosmos3Adapter(adapter.pipeline)
        for other in range(world):
            grads_of(local, reference, other)
        for name, parameter in reference.named_parameters():
            if parameter.requires_grad:
                torch.testing.assert_close(synced[name], parameter.grad / world, atol=1e-6, rtol=1e-5, msg=name)
    assert len(adapter.reasoner_cache) == 2

if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(main, args=(2, int(sys.argv[1])), nprocs=2)
    print("DDP OK")
"""


@pytest.mark.two_ranks
def test_ddp_gradients_are_the_mean_of_the_ranks(tmp_path):
    """Two CPU processes, LoRA and full fine-tuning: the adapter called on the DDP wrapper syncs gradients
    (processors go on the inner module, the call through the wrapper), also when the reasoner cache replays."""
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), str(port)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and "DDP OK" in result.stdout, result.stderr[-3000:]
