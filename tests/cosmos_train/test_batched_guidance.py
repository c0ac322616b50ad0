"""Classifier-free guidance as one transformer call: the conditional and unconditional rows stacked
(`DiffusionAdapter.stack_conditioning`), the output split in halves. For every family it gives the velocity of
two separate calls (CFG scale 3, two different prompts, video families with clean condition frames), in one
transformer call per step instead of two; texts of different lengths are padded where the family masks them
(SANA, SANA-Video) and fall back to two calls where it cannot (SD3's unmasked text). `[rollout]
batched_guidance = false` keeps two calls."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from cosmos_train.diffusion.adapter import AdapterOptions, DiffusionAdapter, adapter_class_for
from cosmos_train.diffusion.sampling import Guidance, noise_grid, ode_sample, velocity

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["a red cube on a table", "blue"]
SCALE = 3.0
STEPS = 3
FRAMES = {"sana_video": 9, "cosmos_predict2_5": 9, "cosmos3": 9}
FAMILIES = ("sd3", "sana", "sana_video", "cosmos_predict2_5", "cosmos3")
# Text tokens: the tiny Cosmos-Predict2.5 tokenizes bytes, and its chat template's system prompt alone is over
# 100 bytes, so at 16 every prompt (the negative one too) encodes the same and guidance would change nothing.
MAX_SEQUENCE_LENGTH = {"cosmos_predict2_5": 192}


@pytest.fixture(scope="module")
def loaded(tiny_pipeline):
    from diffusers import DiffusionPipeline

    cache = {}

    def get(family):
        if family not in cache:
            pipe = DiffusionPipeline.from_pretrained(tiny_pipeline(family), trust_remote_code=True)
            pipe.set_progress_bar_config(disable=True)
            cache[family] = adapter_class_for(type(pipe).__name__)(
                pipe, AdapterOptions(max_sequence_length=MAX_SEQUENCE_LENGTH.get(family, 16))
            )
        return cache[family]

    return get


@contextlib.contextmanager
def transformer_calls(adapter):
    """The number of forward calls of the adapter's transformer inside the block (a list of one count)."""
    calls = [0]

    def count(module, args, output):
        calls[0] += 1

    handle = adapter.transformer.register_forward_hook(count)
    try:
        yield calls
    finally:
        handle.remove()


def inputs(adapter, family):
    """Two rows of noise, their conditioning, and (video families) clean first frame on row 0 only."""
    shape = adapter.latent_shape(32, 32, FRAMES.get(family))
    noise = torch.randn(len(PROMPTS), *shape, generator=torch.Generator().manual_seed(0))
    frames = None
    if adapter.video:
        frames = torch.zeros(len(PROMPTS), shape[1], dtype=torch.bool)
        frames[0, 0] = True
    with torch.no_grad():
        conditioning = adapter.encode_prompts(PROMPTS)
        unconditional = adapter.encode_prompts([adapter.negative_prompt])
    unconditional = {k: v.expand(len(PROMPTS), *v.shape[1:]) for k, v in unconditional.items()}
    for key, value in conditioning.items():  # the rows differ, so mixing them up shows
        assert not torch.equal(value[0], value[1]) and not torch.equal(value[0], unconditional[key][0]), key
    return noise, conditioning, unconditional, frames


def guided_velocities(adapter, noise, conditioning, unconditional, frames, batched):
    """The guided velocity at every level of a 3-step grid, and the transformer calls it took."""
    grid = noise_grid(adapter, STEPS, tuple(noise.shape[1:]))
    guidance = Guidance(SCALE, unconditional, batched=batched)
    out = []
    with torch.no_grad(), transformer_calls(adapter) as calls:
        for index, timestep in enumerate(grid.timesteps):
            sigma = grid.sigmas[index]
            x = noise * sigma  # a different input per level
            out.append(
                velocity(adapter, adapter.transformer, x, sigma, conditioning, guidance, timestep, frames)
            )
    return torch.stack(out), calls[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_one_batched_call_equals_two_calls(loaded, family):
    adapter = loaded(family)
    noise, conditioning, unconditional, frames = inputs(adapter, family)
    batched, batched_calls = guided_velocities(adapter, noise, conditioning, unconditional, frames, True)
    separate, separate_calls = guided_velocities(adapter, noise, conditioning, unconditional, frames, False)
    assert (batched_calls, separate_calls) == (STEPS, 2 * STEPS)
    torch.testing.assert_close(batched, separate, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["sd3", "sana"])
def test_a_guided_rollout_is_the_same_batched(loaded, family):
    """A whole guided sample (the pipeline's own scheduler) is the same either way."""
    adapter = loaded(family)
    noise, conditioning, unconditional, _ = inputs(adapter, family)
    grid = noise_grid(adapter, STEPS, tuple(noise.shape[1:]))
    samples = {}
    for batched in (True, False):
        guidance = Guidance(SCALE, unconditional, batched=batched)
        with torch.no_grad():
            samples[batched] = ode_sample(
                adapter, adapter.transformer, noise, conditioning, grid, "pipeline", guidance
            )
    torch.testing.assert_close(samples[True], samples[False], atol=1e-5, rtol=1e-5)


def trimmed(conditioning):
    """Masked text cut after its last real token (a shorter sequence than the other branch's)."""
    length = int(conditioning["prompt_attention_mask"].nonzero()[:, 1].max()) + 1
    return {
        "prompt_embeds": conditioning["prompt_embeds"][:, :length],
        "prompt_attention_mask": conditioning["prompt_attention_mask"][:, :length],
    }


@pytest.mark.parametrize("family", ["sana", "sana_video"])
def test_masked_texts_of_different_lengths_share_the_call(loaded, family):
    """SANA's masked text: a shorter unconditional text is zero-padded (mask 0) into the batched call, which
    still equals the two calls on the unpadded texts. (A negative prompt with tokens: an all-masked row attends
    to its padding uniformly, so its padding is not neutral.)"""
    adapter = loaded(family)
    noise, conditioning, _, frames = inputs(adapter, family)
    with torch.no_grad():
        unconditional = trimmed(adapter.encode_prompts(["blurry"]))
    unconditional = {k: v.expand(len(PROMPTS), *v.shape[1:]) for k, v in unconditional.items()}
    assert unconditional["prompt_embeds"].shape[1] < conditioning["prompt_embeds"].shape[1]
    batched, batched_calls = guided_velocities(adapter, noise, conditioning, unconditional, frames, True)
    separate, separate_calls = guided_velocities(adapter, noise, conditioning, unconditional, frames, False)
    assert (batched_calls, separate_calls) == (STEPS, 2 * STEPS)
    torch.testing.assert_close(batched, separate, atol=1e-5, rtol=1e-5)


def test_unmasked_texts_of_different_lengths_take_two_calls(loaded):
    """SD3's text has no mask: padding would change it, so texts of differing lengths keep two calls."""
    adapter = loaded("sd3")
    noise, conditioning, unconditional, frames = inputs(adapter, "sd3")
    unconditional = {**unconditional, "prompt_embeds": unconditional["prompt_embeds"][:, :-5]}
    assert adapter.stack_conditioning(conditioning, unconditional) is None
    batched, batched_calls = guided_velocities(adapter, noise, conditioning, unconditional, frames, True)
    separate, _ = guided_velocities(adapter, noise, conditioning, unconditional, frames, False)
    assert batched_calls == 2 * STEPS
    torch.testing.assert_close(batched, separate, atol=0, rtol=0)


def test_stack_conditioning_rules():
    class Masked(DiffusionAdapter):
        ragged_conditioning = ("embeds", "mask")

    plain, masked = DiffusionAdapter(None), Masked(None)
    cond = {
        "embeds": torch.ones(2, 3, 4),
        "mask": torch.ones(2, 3, dtype=torch.long),
        "pooled": torch.ones(2, 5),
    }
    uncond = {
        "embeds": torch.full((2, 1, 4), 2.0),
        "mask": torch.ones(2, 1, dtype=torch.long),
        "pooled": torch.zeros(2, 5),
    }
    stacked = masked.stack_conditioning(cond, uncond)
    assert {k: tuple(v.shape) for k, v in stacked.items()} == {
        "embeds": (4, 3, 4),
        "mask": (4, 3),
        "pooled": (4, 5),
    }
    assert stacked["mask"].tolist() == [[1, 1, 1]] * 2 + [[1, 0, 0]] * 2
    assert torch.equal(stacked["embeds"][2:, 1:], torch.zeros(2, 2, 4))
    assert torch.equal(stacked["embeds"][2:, :1], uncond["embeds"])
    assert torch.equal(stacked["pooled"], torch.cat([cond["pooled"], uncond["pooled"]]))
    assert plain.stack_conditioning(cond, uncond) is None  # not declared ragged: no padding
    short = {
        k: v[:, :1] if k != "pooled" else v for k, v in cond.items()
    }  # equal shapes: no declaration needed
    assert plain.stack_conditioning(short, uncond)["embeds"].shape == (4, 1, 4)
    assert masked.stack_conditioning(cond, {"embeds": uncond["embeds"]}) is None  # other keys


def test_the_rollout_switch_reaches_the_guidance():
    from cosmos_train.algorithms.diffusion_rl.trainer import DiffusionRLTrainer
    from cosmos_train.algorithms.flow_grpo.schema import SDERolloutSection

    assert SDERolloutSection().batched_guidance is True
    unconditional = {"prompt_embeds": torch.zeros(1, 3, 4)}
    for batched in (True, False):
        trainer = SimpleNamespace(
            rollout_config=SDERolloutSection(batched_guidance=batched), unconditional=unconditional
        )
        guidance = DiffusionRLTrainer.guidance(trainer, 2)
        assert guidance.batched is batched and guidance.unconditional["prompt_embeds"].shape == (2, 3, 4)
