"""Rollout micro-batching (`[rollout] sampling_batch_size`): a rollout is sampled in transformer calls of at most
that many rows, independent of the training micro-batch, so a large K fits. The samples are the same as in one
call (within float32 rounding of a different batch size), for plain and guided velocities and for the rollouts
of DiffusionNFT, FlowGRPO and DDRL."""

from __future__ import annotations

import contextlib

import pytest
import torch
from diffusion_rl_helpers import write_rl_job

from cosmos_train.diffusion.adapter import AdapterOptions, adapter_class_for
from cosmos_train.diffusion.sampling import Guidance, predict_in_parts, velocity
from cosmos_train.jobs import read_job

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["a red cube", "blue", "a green ball on grass"]


@contextlib.contextmanager
def call_rows(transformer):
    """The rows (first dimension of the first tensor argument) of each forward call inside the block."""
    rows = []

    def record(module, args, kwargs):
        first = next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))
        rows.append(first.shape[0])

    handle = transformer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        yield rows
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def adapter_for(tiny_pipeline):
    from diffusers import DiffusionPipeline

    def get(family):
        pipe = DiffusionPipeline.from_pretrained(tiny_pipeline(family), trust_remote_code=True)
        return adapter_class_for(type(pipe).__name__)(pipe, AdapterOptions(max_sequence_length=16))

    return get


@pytest.mark.parametrize("family", ["sd3", "sana_video"])
def test_parts_give_the_velocity_of_one_call(adapter_for, family):
    adapter = adapter_for(family)
    shape = adapter.latent_shape(32, 32, 9 if adapter.video else None)
    latents = torch.randn(len(PROMPTS), *shape, generator=torch.Generator().manual_seed(0))
    sigmas = torch.tensor([0.9, 0.5, 0.2])
    frames = None
    if adapter.video:
        frames = torch.zeros(len(PROMPTS), shape[1], dtype=torch.bool)
        frames[1, 0] = True
    with torch.no_grad():
        conditioning = adapter.encode_prompts(PROMPTS)
        with call_rows(adapter.transformer) as whole_rows:
            whole = predict_in_parts(adapter, adapter.transformer, latents, sigmas, conditioning, frames)
        with call_rows(adapter.transformer) as part_rows:
            parts = predict_in_parts(
                adapter, adapter.transformer, latents, sigmas, conditioning, frames, max_rows=2
            )
    assert (whole_rows, part_rows) == ([3], [2, 1])
    torch.testing.assert_close(parts, whole, atol=1e-5, rtol=1e-5)


def test_a_batched_guided_call_is_cut_by_its_stacked_rows(adapter_for):
    adapter = adapter_for("sd3")
    latents = torch.randn(
        len(PROMPTS), *adapter.latent_shape(32, 32), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        conditioning = adapter.encode_prompts(PROMPTS)
        unconditional = adapter.encode_prompts([adapter.negative_prompt])
        guidance = Guidance(3.0, {k: v.expand(3, *v.shape[1:]) for k, v in unconditional.items()})
        whole = velocity(adapter, adapter.transformer, latents, 0.7, conditioning, guidance, 700.0)
        with call_rows(adapter.transformer) as rows:
            parts = velocity(
                adapter, adapter.transformer, latents, 0.7, conditioning, guidance, 700.0, max_rows=4
            )
    assert rows == [4, 2]  # [conditional; unconditional] = 6 rows
    torch.testing.assert_close(parts, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["nft", "flow-grpo", "ddrl"])
def test_each_trainer_samples_its_rollout_in_parts(tmp_path, tiny_pipeline, kind):
    """The same rollout (noise drawn alike) with `sampling_batch_size = 3` as in one call per step: 8 rows in calls
    of 3, 3 and 2, and the same clean samples; the VAE decodes in the same parts."""
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer
    from cosmos_train.data import collate_pairs, load_pairs

    guided = {"guidance_scale": 2.0, "batched_guidance": False} if kind == "flow-grpo" else {}
    rollout = {"samples_per_prompt": 4, "sampling_steps": 3, "sampling_batch_size": 3} | guided
    job = read_job(write_rl_job(tmp_path, tiny_pipeline("sd3"), kind=kind, rollout=rollout, lora=False))
    trainer = build_diffusion_rl_trainer(job)
    if kind == "ddrl":
        dataset, _ = load_pairs(job.config.data, video=False)
        batch = collate_pairs([dataset[i] for i in range(2)])
    else:
        batch = {"prompts": ["red", "blue"], "metadata": [{}, {}]}
    prompts = [p for p in batch["prompts"] for _ in range(4)]
    metadata = [{} for _ in prompts]

    def sample(rows: int | None):
        trainer.rollout_config = trainer.rollout_config.model_copy(update={"sampling_batch_size": rows})
        torch.manual_seed(0)
        with call_rows(trainer.adapter.transformer) as calls:
            result = trainer.rollout(prompts, metadata, batch)
        return result["latents_for_reward"], calls

    whole, whole_calls = sample(None)
    parts, part_calls = sample(3)
    assert set(whole_calls) == {8} and set(part_calls) == {3, 2} and max(part_calls) == 3
    assert len(part_calls) == 3 * len(whole_calls)
    torch.testing.assert_close(parts, whole, atol=1e-4, rtol=1e-4)

    decoded = []
    original = trainer.adapter.decode_latents
    trainer.adapter.decode_latents = lambda latents: decoded.append(len(latents)) or original(latents)
    trainer.score(parts, prompts, metadata)
    assert decoded == [3, 3, 2]


def test_each_decoded_part_is_submitted_before_any_score_is_awaited(tmp_path, tiny_pipeline):
    """With a remote reward (a function with `submit` / `fetch`), part i is on its way to the service while part
    i + 1 decodes; the scores are collected, in row order, only after the last part is submitted."""
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer

    rollout = {"samples_per_prompt": 4, "sampling_steps": 2, "sampling_batch_size": 3}
    job = read_job(write_rl_job(tmp_path, tiny_pipeline("sd3"), kind="nft", rollout=rollout))
    trainer = build_diffusion_rl_trainer(job)
    events = []

    class Remote:
        def submit(self, media, prompts, metadata=None):
            events.append(("submit", len(media)))
            return [float(m.mean()) for m in media]

        def fetch(self, pending):
            events.append(("fetch", len(pending)))
            return pending

        def __call__(self, media, prompts, metadata=None):
            return self.fetch(self.submit(media, prompts, metadata))

    trainer.rewards[0].function = Remote()
    decode = trainer.adapter.decode_latents
    trainer.adapter.decode_latents = lambda latents: (
        events.append(("decode", len(latents))) or decode(latents)
    )
    latents = torch.randn(8, *trainer.latent_shape(), generator=torch.Generator().manual_seed(0))
    scores = trainer.score(latents, ["red"] * 8, [{}] * 8)
    assert events == [
        ("decode", 3), ("submit", 3), ("decode", 3), ("submit", 3), ("decode", 2), ("submit", 2),
        ("fetch", 3), ("fetch", 3), ("fetch", 2),
    ]  # fmt: skip
    trainer.adapter.decode_latents = decode
    trainer.rollout_config = trainer.rollout_config.model_copy(update={"sampling_batch_size": None})
    torch.testing.assert_close(
        scores["brightness"], trainer.score(latents, ["red"] * 8, [{}] * 8)["brightness"]
    )
