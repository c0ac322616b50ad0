"""A training sample built by `diffusers_cosmos3.actions` is the transformer call upstream's
`Cosmos3OmniPipeline(action=CosmosActionCondition(...))` makes for the same frames, task, actions and noise: the
same tokens, positions, indexes, timesteps and domain ids, and so the same velocities, in each mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import CosmosActionCondition
from PIL import Image

from diffusers_cosmos3.actions import (
    ActionSettings,
    Cosmos3ActionPolicy,
    action_prompt_ids,
    conditioning_latents,
    domain_id,
    first_frame_latents,
    noised_sample,
    pad_actions,
    sample_action_chunk,
    save_action_settings,
)
from diffusers_cosmos3.batched import Cosmos3TrainingSample, batched_outputs, pack_samples
from diffusers_cosmos3.testing import build_pipeline

torch.set_num_threads(1)

DOMAIN, RAW_DIM, CHUNK, FPS, TASK = "bridge_orig_lerobot", 10, 4, 10.0, "put the spoon in the pot"


@pytest.fixture(scope="module")
def pipe():
    return build_pipeline(action=True)


@pytest.fixture(scope="module")
def window():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(CHUNK + 1, 48, 64, 3), dtype=np.uint8)
    actions = torch.from_numpy(rng.standard_normal((CHUNK, RAW_DIM)).astype(np.float32))
    return frames, actions


def pipeline_call(pipe, mode, frames, actions):
    """The kwargs and outputs of the transformer call the pipeline makes at its first step."""
    calls = []
    original = pipe.transformer.forward

    def record(**kwargs):
        output = original(**kwargs)
        calls.append((kwargs, output))
        return output

    condition = CosmosActionCondition(
        mode=mode,
        chunk_size=CHUNK,
        domain_name=DOMAIN,
        resolution_tier=256,
        raw_actions=actions if mode == "forward_dynamics" else None,
        # PIL images: upstream reads a uint8 numpy frame as if it were floats in [0, 1].
        video=[Image.fromarray(f) for f in frames] if mode == "inverse_dynamics" else None,
        image=Image.fromarray(frames[0]) if mode != "inverse_dynamics" else None,
    )
    pipe.transformer.forward = record
    try:
        pipe(
            prompt=TASK, action=condition, num_inference_steps=1, guidance_scale=1.0, fps=FPS,
            use_system_prompt=False, output_type="latent", generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    finally:
        del pipe.transformer.forward
    return calls[0]


@pytest.mark.parametrize("mode", ["policy", "forward_dynamics", "inverse_dynamics"])
def test_a_training_sample_is_the_pipelines_transformer_call(pipe, window, mode):
    frames, actions = window
    settings = ActionSettings(mode, CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256)
    theirs, their_output = pipeline_call(pipe, mode, frames, actions)

    x0, canvas = conditioning_latents(pipe, frames, settings)
    ids, _ = action_prompt_ids(pipe, TASK, settings, canvas)
    action_dim = pipe.transformer.config.action_dim
    action_x0 = pad_actions(
        actions if mode == "forward_dynamics" else torch.zeros(CHUNK, RAW_DIM), action_dim
    )
    timestep = torch.cat([theirs["vision_timesteps"], theirs["action_timesteps"]])[0].item()
    sample = Cosmos3TrainingSample(
        ids, x0=x0, noisy=theirs["vision_tokens"][0], timestep=timestep,
        condition_frames=settings.clean_frames(x0.shape[1]), fps=FPS, action_x0=action_x0,
        action_noisy=theirs["action_tokens"][0], action_condition_steps=settings.clean_steps(),
        domain_id=domain_id(DOMAIN),
    )  # fmt: skip
    ours = pack_samples(pipe, [sample]).kwargs

    assert ours.keys() <= theirs.keys()
    for key, value in ours.items():
        expected = theirs[key]
        if isinstance(value, list):
            assert len(value) == len(expected), key
            for a, b in zip(value, expected, strict=True):
                assert torch.equal(torch.as_tensor(a), torch.as_tensor(b)), key
        elif isinstance(value, torch.Tensor):
            assert torch.equal(value, expected.to(value.dtype)), key
        else:
            assert value == expected, key
    with torch.no_grad():
        output = pipe.transformer(**ours)
        batched = batched_outputs(pipe.transformer, pack_samples(pipe, [sample, sample]))
    their_vision, _, their_action = their_output  # the pipeline calls with return_dict=False
    for got in (output, batched):
        torch.testing.assert_close(got.sample[0], their_vision[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.action[0], their_action[0], atol=1e-5, rtol=1e-5)


def test_noised_sample_shares_sigma_and_keeps_clean_parts(pipe, window):
    """One sigma for vision and actions; padded channels zero; forward dynamics keeps every action clean, a state
    row is clean at offset 0."""
    frames, actions = window
    action_dim = pipe.transformer.config.action_dim
    settings = ActionSettings("policy", CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256, use_state=True)
    x0, _ = conditioning_latents(pipe, frames, settings)
    rows = pad_actions(torch.cat([torch.ones(1, RAW_DIM), actions]), action_dim)
    generator = torch.Generator().manual_seed(1)
    eps, eps_a = torch.randn(x0.shape, generator=generator), torch.randn(rows.shape, generator=generator)
    sample = noised_sample([1, 2, 3], x0, rows, settings, 0.3, eps, eps_a)
    torch.testing.assert_close(sample.noisy, 0.3 * eps + 0.7 * x0)
    torch.testing.assert_close(
        sample.action_noisy[:, :RAW_DIM], 0.3 * eps_a[:, :RAW_DIM] + 0.7 * rows[:, :RAW_DIM]
    )
    assert not sample.action_noisy[:, RAW_DIM:].any() and sample.timestep == pytest.approx(300.0)
    assert sample.clean_action_steps() == [0] and sample.action_start_offset == 0
    assert torch.equal(sample.actions()[0], rows[0]) and sample.clean_frames() == [0]
    fd = ActionSettings("forward_dynamics", CHUNK, DOMAIN, RAW_DIM, FPS)
    assert fd.clean_steps() == list(range(CHUNK)) and ActionSettings(
        "inverse_dynamics", CHUNK, DOMAIN, RAW_DIM, FPS
    ).clean_frames(3) == [0, 1, 2]
    with pytest.raises(
        ValueError, match="unknown Cosmos3 embodiment domain 'lebiro' \\(did you mean 'libero'\\?\\)"
    ):
        domain_id("lebiro")
    assert domain_id("libero") == 5 and domain_id("behavior1k_lerobot") == 22


@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_sampling_an_action_chunk_is_upstreams_pipeline(pipe, window, guidance):
    """Where upstream can express the settings (a domain in its width table, no state row), our sampler returns the
    pipeline's actions for the same frame, task, steps, guidance and generator."""
    frames, _ = window
    image = Image.fromarray(frames[0])
    theirs = pipe(
        prompt=TASK, action=CosmosActionCondition("policy", CHUNK, DOMAIN, 256, image=image),
        num_inference_steps=3, guidance_scale=guidance, fps=FPS, use_system_prompt=False, output_type="latent",
        generator=torch.Generator().manual_seed(7),
    ).action[0]  # fmt: skip
    settings = ActionSettings("policy", CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256)
    ours = sample_action_chunk(
        pipe, settings, image, TASK, num_inference_steps=3, guidance_scale=guidance,
        generator=torch.Generator().manual_seed(7),
    )  # fmt: skip
    assert ours.shape == theirs.shape == (CHUNK, RAW_DIM)
    torch.testing.assert_close(ours, theirs.float(), atol=1e-4, rtol=1e-4)


def test_what_upstream_cannot_express(pipe, window, tmp_path):
    """LIBERO's 10-D width (absent from upstream's table), a clean state row first, normalised units: the policy call
    returns the chunk in the dataset's units, from the settings an export wrote beside the pipeline."""
    frames, _ = window
    stats = {"q01": [-2.0] * RAW_DIM, "q99": [2.0] * RAW_DIM}
    settings = ActionSettings("policy", CHUNK, "libero", RAW_DIM, 20.0, resolution_tier=256, use_state=True)
    pipe.save_pretrained(tmp_path)
    save_action_settings(tmp_path, settings, "quantile", stats, normalize_state=True)
    policy = Cosmos3ActionPolicy.from_pretrained(tmp_path, num_inference_steps=2, enable_safety_checker=False)
    state = np.linspace(-1, 1, RAW_DIM)
    chunk = policy(frames[0], TASK, state=state, generator=torch.Generator().manual_seed(0))
    model_space = sample_action_chunk(
        policy.pipe, settings, frames[0], TASK, state=state / 2.0, num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert chunk.shape == (CHUNK, RAW_DIM) and chunk.dtype == np.float32
    np.testing.assert_allclose(chunk, model_space.numpy() * 2.0, atol=1e-5)  # mid 0, half range 2
    with pytest.raises(ValueError, match="use_state"):
        sample_action_chunk(policy.pipe, settings, frames[0], TASK, num_inference_steps=1)


def test_uint8_frames_in_any_form_are_the_pil_images(pipe, window):
    """A uint8 frame, a list of them or a `[T, H, W, 3]` array encode as the same frames given as PIL images (upstream
    reads uint8 numpy as floats in [0, 1]: a policy fed camera arrays would see noise)."""
    frames, _ = window
    settings = ActionSettings("inverse_dynamics", CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256)
    expected, _ = conditioning_latents(pipe, [Image.fromarray(f) for f in frames], settings)
    for given in (frames, list(frames), torch.from_numpy(frames)):
        torch.testing.assert_close(conditioning_latents(pipe, given, settings)[0], expected)
    one, _ = conditioning_latents(pipe, frames[0], settings)
    torch.testing.assert_close(one, conditioning_latents(pipe, [Image.fromarray(frames[0])], settings)[0])
    chunk = sample_action_chunk(
        pipe, settings, list(frames), TASK, num_inference_steps=2, generator=torch.Generator().manual_seed(1)
    )
    same = sample_action_chunk(
        pipe, settings, [Image.fromarray(f) for f in frames], TASK, num_inference_steps=2,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    torch.testing.assert_close(chunk, same)


def test_a_policy_call_encodes_the_first_frame_alone(pipe, window, monkeypatch):
    """The causal VAE's first latent frame sees only the first frame, and a policy's sampler keeps only that one
    clean: it encodes one frame, not `chunk_size + 1` (upstream's equality above pins the chunk it samples)."""
    frames, _ = window
    settings = ActionSettings("policy", CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256)
    full, _ = conditioning_latents(pipe, frames[0], settings)
    first, _ = conditioning_latents(pipe, frames[0], settings, first_frame_only=True)
    assert first.shape == full.shape and full.shape[1] > 1 and not first[:, 1:].any()
    torch.testing.assert_close(first[:, :1], full[:, :1], atol=1e-6, rtol=1e-6)
    encoded = []
    encode = pipe.vae.encode
    monkeypatch.setattr(
        pipe.vae, "encode", lambda x, *a, **k: encoded.append(x.shape[2]) or encode(x, *a, **k)
    )
    sample_action_chunk(pipe, settings, frames[0], TASK, num_inference_steps=1)
    assert encoded == [1]


def test_current_frames_encoded_in_one_batch_are_each_frames_own_latents(pipe, window, monkeypatch):
    """A rollout's current frames (one per running episode) are encoded in one autoencoder call, and each comes out
    as its own first-frame-only encoding; frames on different canvases are refused."""
    frames, _ = window
    settings = ActionSettings("policy", CHUNK, DOMAIN, RAW_DIM, FPS, resolution_tier=256)
    encoded = []
    encode = pipe.vae.encode
    monkeypatch.setattr(
        pipe.vae, "encode", lambda x, *a, **k: encoded.append(x.shape[0]) or encode(x, *a, **k)
    )
    batch, canvas = first_frame_latents(pipe, list(frames[:3]), settings)
    assert encoded == [3]
    for frame, latents in zip(frames[:3], batch, strict=True):
        alone, alone_canvas = conditioning_latents(pipe, frame, settings, first_frame_only=True)
        assert alone_canvas == canvas
        torch.testing.assert_close(latents, alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(batch[0], batch[1])  # each frame's own
    with pytest.raises(ValueError, match="different canvases"):
        first_frame_latents(pipe, [frames[0], frames[1][:, :16]], settings)
