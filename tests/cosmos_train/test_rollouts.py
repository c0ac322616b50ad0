"""Rollouts follow the pipeline's own inference: on the noise grid of the pipeline's scheduler, from the same
initial latents, a rollout equals `pipeline(..., latents=noise, output_type="latent")` for every family, with
classifier-free guidance off and on (in the family's own form and negative prompt); a solver of our own equals
the pipeline run with the diffusers scheduler it names. Also: the grids are the schedulers' (not re-derived),
and a rollout sample costs the model calls its solver says."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch

from cosmos_train.diffusion.adapter import AdapterOptions, adapter_class_for
from cosmos_train.diffusion.sampling import Guidance, noise_grid, ode_sample

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = "a red cube on a table"
STEPS = 4
# (pixel size, the pipeline's `__call__` extras, the solver of ours that the pipeline's own scheduler is)
FAMILIES = {
    "sd3": ({}, "euler"),
    "sana": ({"use_resolution_binning": False}, "dpm2"),
    "sana_video": ({"use_resolution_binning": False, "frames": 9}, "dpm2"),
    "cosmos_predict2_5": ({"num_frames": 9}, "pipeline"),
    "cosmos3": ({"num_frames": 9}, "pipeline"),
}
FRAMES = {"sana_video": 9, "cosmos_predict2_5": 9, "cosmos3": 9}
# Text tokens. The tiny Cosmos-Predict2.5 reads bytes and its chat template's system prompt alone is over 100 of
# them: at 16 every prompt, the negative one too, would encode the same and guidance would change nothing.
TEXT_TOKENS = {"cosmos_predict2_5": 192}


@pytest.fixture(scope="module")
def loaded(tiny_pipeline):
    from diffusers import DiffusionPipeline

    cache = {}

    def get(family):
        if family not in cache:
            pipe = DiffusionPipeline.from_pretrained(tiny_pipeline(family), trust_remote_code=True)
            pipe.set_progress_bar_config(disable=True)
            cache[family] = (
                pipe,
                adapter_class_for(type(pipe).__name__)(
                    pipe, AdapterOptions(max_sequence_length=TEXT_TOKENS.get(family, 16))
                ),
            )
        return cache[family]

    return get


def pipeline_latents(pipe, family, noise, guidance_scale, scheduler=None):
    extras, _ = FAMILIES[family]
    run = copy.copy(pipe)
    if scheduler is not None:
        run = type(pipe)(**{**pipe.components, "scheduler": scheduler})
        run.set_progress_bar_config(disable=True)
    call = {"max_sequence_length": TEXT_TOKENS.get(family, 16), **extras}
    if "max_sequence_length" not in inspect.signature(type(pipe).__call__).parameters:
        call.pop("max_sequence_length")  # Cosmos3 reads the prompt as bytes
    with torch.no_grad():
        output = run(
            prompt=PROMPT,
            height=32,
            width=32,
            latents=noise.clone(),
            num_inference_steps=STEPS,
            guidance_scale=guidance_scale,
            output_type="latent",
            return_dict=False,
            **call,
        )
    return output[0].float()


def rollout(adapter, noise, guidance_scale, solver, grid=None):
    grid = grid or noise_grid(adapter, STEPS, tuple(noise.shape[1:]))
    with torch.no_grad():
        conditioning = adapter.encode_prompts([PROMPT])
        guidance = Guidance()
        if guidance_scale > 1:
            guidance = Guidance(guidance_scale, adapter.encode_prompts([adapter.negative_prompt]))
        return ode_sample(adapter, adapter.transformer, noise, conditioning, grid, solver, guidance)


def initial_noise(adapter, family):
    shape = adapter.latent_shape(32, 32, FRAMES.get(family))
    return torch.randn(1, *shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("guidance_scale", [1.0, 3.0], ids=["cfg-off", "cfg-on"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_rollout_equals_the_pipeline(loaded, family, guidance_scale):
    pipe, adapter = loaded(family)
    noise = initial_noise(adapter, family)
    expected = pipeline_latents(pipe, family, noise, guidance_scale)
    if guidance_scale > 1:  # guidance must show, or the case compares the unguided rollout again
        assert not torch.allclose(expected, pipeline_latents(pipe, family, noise, 1.0), atol=1e-3)
    _, solver = FAMILIES[family]
    for used in dict.fromkeys([solver, "pipeline"]):
        torch.testing.assert_close(
            rollout(adapter, noise, guidance_scale, used), expected, atol=1e-5, rtol=1e-5
        )


def test_dpm_solver_2m_equals_diffusers_on_another_grid(loaded):
    """Our DPM-Solver++(2M) against diffusers' DPMSolverMultistepScheduler in SD3's pipeline (flow sigmas,
    shift 3), where SD3's own scheduler is Euler."""
    from diffusers import DPMSolverMultistepScheduler

    pipe, adapter = loaded("sd3")
    noise = initial_noise(adapter, "sd3")
    scheduler = DPMSolverMultistepScheduler(
        algorithm_type="dpmsolver++",
        solver_order=2,
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        flow_shift=3.0,
        final_sigmas_type="zero",
    )
    expected = pipeline_latents(pipe, "sd3", noise, 1.0, scheduler=copy.deepcopy(scheduler))
    scheduler.set_timesteps(STEPS, device="cpu")
    from cosmos_train.diffusion.sampling import NoiseGrid

    grid = NoiseGrid(scheduler.sigmas.float(), scheduler.timesteps, scheduler)
    torch.testing.assert_close(rollout(adapter, noise, 1.0, "dpm2", grid), expected, atol=1e-5, rtol=1e-5)


def test_grids_are_the_pipelines_schedulers(loaded):
    """Cosmos-Predict2.5 samples on its Karras grid (rho 7), SD3 on shift(linspace(1, sigma_min, N)) plus 0, with
    sigma_min the shifted smallest training level (about 0.003), as diffusers' FlowMatchEulerDiscreteScheduler."""
    _, cosmos = loaded("cosmos_predict2_5")
    grid = noise_grid(cosmos, 10, (16, 3, 4, 4))
    sigma_min, sigma_max, rho = 0.01, 200.0, 7.0
    ramp = np.linspace(0, 1, 10)
    karras = (sigma_max ** (1 / rho) + ramp * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    np.testing.assert_allclose(grid.sigmas[:-1].numpy(), karras / (karras + 1), rtol=1e-5)
    assert grid.sigmas[-1] == 0

    _, sd3 = loaded("sd3")
    grid = noise_grid(sd3, 10, (4, 16, 16))

    def shift(sigma):
        return 3 * sigma / (1 + 2 * sigma)

    plain = np.linspace(1.0, shift(1 / 1000), 10)
    np.testing.assert_allclose(grid.sigmas[:-1].numpy(), shift(plain), rtol=1e-6)
    assert grid.sigmas[-1] == 0
    np.testing.assert_allclose(grid.timesteps.numpy(), grid.sigmas[:-1].numpy() * 1000, rtol=1e-6)


@pytest.mark.parametrize(
    ("solver", "calls"), [("dpm2", STEPS), ("euler", STEPS), ("heun", 2 * STEPS - 1), ("pipeline", STEPS)]
)
def test_model_calls_per_rollout_sample(loaded, solver, calls):
    _, adapter = loaded("sana")
    seen = []
    handle = adapter.transformer.register_forward_hook(
        lambda module, args, output: seen.append(args[0].shape[0])
    )
    try:
        rollout(adapter, initial_noise(adapter, "sana"), 1.0, solver)
    finally:
        handle.remove()
    assert len(seen) == calls and set(seen) == {1}


def test_each_family_rolls_out_with_its_references_solver():
    """DPM-Solver++(2M) for SD3 and Cosmos (DiffusionNFT's and cosmos-rl's configs), Euler for SANA."""
    expected = {
        "StableDiffusion3Pipeline": "dpm2",
        "Cosmos2_5_PredictBasePipeline": "dpm2",
        "SanaPipeline": "euler",
        "SanaVideoPipeline": "euler",
    }
    assert {name: adapter_class_for(name).rollout_solver for name in expected} == expected


def test_guidance_costs_a_second_model_row_per_step(loaded):
    """With classifier-free guidance, each step evaluates the conditional and the unconditional branch."""
    _, adapter = loaded("sd3")
    seen = []
    handle = adapter.transformer.register_forward_hook(
        lambda module, args, kwargs, output: seen.append((args or (kwargs["hidden_states"],))[0].shape[0]),
        with_kwargs=True,
    )
    try:
        rollout(adapter, initial_noise(adapter, "sd3"), 4.0, "dpm2")
    finally:
        handle.remove()
    assert sum(seen) == 2 * STEPS
