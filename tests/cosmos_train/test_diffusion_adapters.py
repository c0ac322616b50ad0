"""Diffusion model adapters against their own pipelines: every family in `tiny_pipelines.PIPELINES` is saved,
found by its `_class_name`, and its adapter's text encoding, VAE normalisation and transformer call are checked
against what the diffusers pipeline itself computes (captured from a real pipeline run)."""

import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.diffusion.adapter import (
    AdapterOptions,
    UnsupportedPipelineError,
    adapter_class_for,
    pipeline_class_name,
)
from cosmos_train.tiny_models.pipelines import PIPELINES, save_tiny_pipeline

torch.set_num_threads(1)

PROMPT = "a red cube on a table"
# Extra `__call__` arguments for a 32x32 tiny run (SANA's resolution binning would upscale to its bins).
CALL = {
    "sd3": {},
    "sana": {"use_resolution_binning": False},
    "sana_video": {"use_resolution_binning": False, "frames": 9},
    "cosmos_predict2_5": {"num_frames": 9},
}
FAMILIES = list(PIPELINES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-pipelines")
    return {family: save_tiny_pipeline(family, root / family) for family in FAMILIES}


_loaded = {}


def load(folders, family):
    """(pipeline, adapter), loaded once from the saved folder through the plain diffusers path."""
    if family not in CALL:
        pytest.skip(f"no tiny-run recipe for {family} in this test's CALL table")
    if family not in _loaded:
        from diffusers import DiffusionPipeline

        # trust_remote_code: the tiny Cosmos-Predict2.5 ships its stand-in safety checker's code.
        pipe = DiffusionPipeline.from_pretrained(folders[family], trust_remote_code=True)
        pipe.set_progress_bar_config(disable=True)
        _loaded[family] = pipe, adapter_class_for(pipeline_class_name(folders[family]))(pipe)
    return _loaded[family]


def run(pipe, family, **kwargs):
    """Run the pipeline; return its transformer calls [(args, kwargs, output)], its final latents and its output."""
    calls, final = [], {}

    def hook(module, args, call_kwargs, output):
        calls.append((args, dict(call_kwargs), output[0].clone()))

    def on_step_end(pipeline, step, timestep, tensors):
        final["latents"] = tensors["latents"].clone()
        return tensors

    arguments = {
        "prompt": PROMPT,
        "num_inference_steps": 2,
        "height": 32,
        "width": 32,
        "guidance_scale": 1.0,
        "generator": torch.Generator().manual_seed(0),
        "output_type": "pt",
        "callback_on_step_end": on_step_end,
        "callback_on_step_end_tensor_inputs": ["latents"],
        **CALL[family],
        **kwargs,
    }
    handle = pipe.transformer.register_forward_hook(hook, with_kwargs=True)
    try:
        output = pipe(**arguments)[0]
    finally:
        handle.remove()
    return calls, final["latents"], output


def hidden_states(args, kwargs):
    return kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def row_timesteps(timestep):
    """One timestep per row: Cosmos passes B x 1 x T x 1 x 1 (the last frame is never a conditioning frame)."""
    return timestep[:, 0, -1, 0, 0] if timestep.ndim == 5 else timestep


def pixels(adapter, batch=1):
    torch.manual_seed(1)
    shape = (batch, 3, 9, 32, 32) if adapter.video else (batch, 3, 32, 32)
    return torch.rand(shape) * 2 - 1


# --- discovery -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_found_from_saved_folder(folders, family):
    pipe, adapter = load(folders, family)
    assert type(adapter).pipeline_class == type(pipe).__name__ == pipeline_class_name(folders[family])
    names = {name for name, _ in pipe.transformer.named_modules()}
    for target in adapter.lora_target_modules:
        assert any(name == target or name.endswith("." + target) for name in names), target
    assert adapter.video == (family in {"sana_video", "cosmos_predict2_5"})


def test_unsupported_pipeline_is_one_line_listing_supported():
    with pytest.raises(UnsupportedPipelineError) as error:
        adapter_class_for("NoSuchPipeline")
    message = str(error.value)
    assert "\n" not in message and "NoSuchPipeline" in message
    for name in (
        "StableDiffusion3Pipeline",
        "SanaPipeline",
        "SanaVideoPipeline",
        "Cosmos2_5_PredictBasePipeline",
    ):
        assert name in message


# --- pixels <-> latents ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_matches_pipeline_output(folders, family):
    pipe, adapter = load(folders, family)
    _, latents, output = run(pipe, family)
    with torch.no_grad():
        decoded = adapter.decode_latents(latents)
    expected = (decoded / 2 + 0.5).clamp(0, 1)  # the pipelines' postprocess to "pt"
    if adapter.video:
        expected = expected.permute(0, 2, 1, 3, 4)  # B x C x T x H x W -> the pipelines' B x T x C x H x W
    torch.testing.assert_close(expected, output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_encode_is_the_inverse_normalisation(folders, family):
    """decode(encode(x)) equals the VAE's own decode(encode(x)) with no normalisation: the two cancel."""
    pipe, adapter = load(folders, family)
    x, vae = pixels(adapter), pipe.vae
    with torch.no_grad():
        torch.manual_seed(0)
        latents = adapter.encode_pixels(x)
        torch.manual_seed(0)
        encoded = vae.encode(x)
        # Video families encode the mode, as their pipelines encode conditioning frames; SD3 samples.
        if hasattr(encoded, "latent"):
            raw = encoded.latent
        else:
            raw = encoded.latent_dist.mode() if adapter.video else encoded.latent_dist.sample()
        assert latents.shape == raw.shape
        scale = getattr(pipe, "vae_scale_factor_spatial", None) or pipe.vae_scale_factor
        assert latents.shape[-2:] == (32 // scale,) * 2 and latents.shape[0] == 1
        assert latents.shape[2] == 3 if adapter.video else latents.dim() == 4  # 9 frames -> 3 latent frames
        torch.testing.assert_close(adapter.decode_latents(latents), vae.decode(raw, return_dict=False)[0])


def test_cosmos_encode_matches_pipeline_conditioning_latents(folders):
    pipe, adapter = load(folders, "cosmos_predict2_5")
    x = pixels(adapter)
    with torch.no_grad():
        _, expected, _, _ = pipe.prepare_latents(
            video=x, batch_size=1, height=32, width=32, num_frames_in=1, num_frames_out=9, dtype=torch.float32
        )
        torch.testing.assert_close(adapter.encode_pixels(x), expected)


# --- text and the transformer call -----------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_predict_velocity_matches_pipeline_transformer_call(folders, family):
    pipe, adapter = load(folders, family)
    if family == "sana":  # released SANA uses 1.0; another value makes a dropped timestep_scale visible
        pipe.transformer.register_to_config(timestep_scale=0.25)
    try:
        calls, _, _ = run(pipe, family)
        args, kwargs, expected = calls[0]
        timesteps = row_timesteps(kwargs["timestep"]).float()
        # The transformer's timestep for the scheduler's first sigma (DPM-Solver truncates it to an integer).
        unit = adapter.model_timesteps(torch.ones(1)).item()
        first = pipe.scheduler.sigmas[0].expand(len(timesteps)).float()
        assert (adapter.model_timesteps(first) - timesteps).abs().max() <= unit * 1e-3 + 1e-6
        with torch.no_grad():
            conditioning = adapter.encode_prompts([PROMPT])
            torch.testing.assert_close(conditioning["prompt_embeds"], kwargs["encoder_hidden_states"])
            velocity = adapter.predict_velocity(
                pipe.transformer, hidden_states(args, kwargs), timesteps / unit, conditioning
            )
    finally:
        if family == "sana":
            pipe.transformer.register_to_config(timestep_scale=1.0)
    assert velocity.shape == hidden_states(args, kwargs).shape
    torch.testing.assert_close(velocity, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_empty_prompt_is_the_pipeline_unconditional_embedding(folders, family):
    pipe, adapter = load(folders, family)
    calls, _, _ = run(pipe, family, guidance_scale=2.0, negative_prompt="")
    first = row_timesteps(calls[0][1]["timestep"])[0]
    rows = [
        row
        for _, kw, _ in calls
        if row_timesteps(kw["timestep"])[0] == first
        for row in kw["encoder_hidden_states"]
    ]
    with torch.no_grad():
        empty = adapter.encode_prompts(["", PROMPT])["prompt_embeds"]
    assert any(torch.allclose(empty[0], row, atol=1e-5) for row in rows)
    assert any(torch.allclose(empty[1], row, atol=1e-5) for row in rows)


# --- Cosmos-Predict2.5 conditioning frames ---------------------------------------------------------------


def test_cosmos_condition_frames_match_pipeline_image_to_world(folders):
    pipe, adapter = load(folders, "cosmos_predict2_5")
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    calls, _, _ = run(pipe, "cosmos_predict2_5", image=image)
    _, kwargs, raw = calls[0]
    mask, noisy = kwargs["condition_mask"], kwargs["hidden_states"]
    frames = mask[:, 0, :, 0, 0].bool()
    assert frames.tolist() == [[True, False, False]]
    assert kwargs["timestep"][0, 0, :, 0, 0].tolist() == pytest.approx(
        [1e-4, *[float(pipe.scheduler.sigmas[0])] * 2]
    )
    sigmas = row_timesteps(kwargs["timestep"])
    with torch.no_grad():
        conditioning = adapter.encode_prompts([PROMPT])
        velocity = adapter.predict_velocity(
            pipe.transformer, noisy, sigmas, conditioning, condition_frames=frames
        )
        # Without the flags the model sees a different input: the conditioning is not a no-op.
        unflagged = adapter.predict_velocity(pipe.transformer, noisy, sigmas, conditioning)
    torch.testing.assert_close(velocity, raw * (1 - mask), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(unflagged[:, :, 1:], velocity[:, :, 1:], atol=1e-4)
    # Clean frames have zero velocity, so an Euler step leaves them unchanged.
    stepped = noisy + (0.5 - sigmas.view(-1, 1, 1, 1, 1)) * velocity
    assert torch.equal(stepped[:, :, frames[0]], noisy[:, :, frames[0]])
    assert not torch.equal(stepped[:, :, ~frames[0]], noisy[:, :, ~frames[0]])


def test_cosmos_condition_frames_drawn_from_the_mix(folders):
    pipe, _ = load(folders, "cosmos_predict2_5")
    adapter_class = adapter_class_for("Cosmos2_5_PredictBasePipeline")
    latents = torch.zeros(64, 16, 3, 4, 4)

    def draw(mix, generator=None):
        return adapter_class(pipe, AdapterOptions(conditioning_mix=mix)).condition_frames(latents, generator)

    assert not draw({"t2v": 1.0}).any()
    assert draw({"i2v": 1.0}).tolist() == [[True, False, False]] * 64
    assert draw({"v2v": 1.0}).tolist() == [[True, True, False]] * 64  # the pipeline's 2 latent frames
    mix = {"t2v": 0.5, "i2v": 0.25, "v2v": 0.25}
    seeded = draw(mix, torch.Generator().manual_seed(3))
    assert seeded.shape == (64, 3) and seeded.dtype == torch.bool
    assert torch.equal(seeded, draw(mix, torch.Generator().manual_seed(3)))
    assert set(seeded.sum(1).tolist()) == {0, 1, 2}
    torch.manual_seed(5)
    first = draw(mix)
    torch.manual_seed(5)
    assert torch.equal(first, draw(mix))  # no generator: the global RNG
    with pytest.raises(ValueError, match="t2i"):
        draw({"t2i": 1.0})


def test_sd3_says_once_that_long_prompts_are_truncated(capfd, caplog):
    """diffusers warns on every encode (each training step) and shows the cut text as ''; the adapter says it
    once, with the limits."""
    from cosmos_train.diffusion.families.sd3 import StableDiffusion3Adapter
    from cosmos_train.tiny_models.pipelines import build_sd3

    adapter = StableDiffusion3Adapter(build_sd3(), AdapterOptions(max_sequence_length=16))
    with torch.no_grad():
        for _ in range(3):
            adapter.encode_prompts(["a yellow triangle on a white background", ""])
    messages = capfd.readouterr().err + caplog.text
    assert messages.count("truncated") == 0, messages
    assert messages.count("lose their ends") == 1 and "T5 max_sequence_length 16" in messages, messages
