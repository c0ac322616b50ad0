"""The batched Cosmos3 training forward equals upstream's per-sample forward: outputs and gradients."""

import copy
import dataclasses

import pytest
import torch
from peft import LoraConfig

from diffusers_cosmos3.batched import (
    Cosmos3ReasonerCache,
    Cosmos3TrainingSample,
    batched_forward,
    batched_outputs,
    pack_samples,
    per_sample_forward,
    per_sample_outputs,
    repack,
)
from diffusers_cosmos3.testing import build_pipeline

torch.set_num_threads(1)

# Generator-side and reasoner-side modules, so LoRA gradients cross both pathways.
LORA_TARGETS = ["to_q", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "proj_in"]
GENERATOR_TARGETS = ["add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "proj_in", "proj_out"]


@pytest.fixture(scope="module")
def pipeline():
    return build_pipeline()


def make_samples(pipeline, seed=0):
    """t2i (one frame), t2v, i2v (frame 0 clean), v2v (frames 0, 1 clean); different prompts and t."""
    channels = pipeline.transformer.config.latent_channel
    generator = torch.Generator().manual_seed(seed)
    specs = [
        ("a cat", (1, 4, 4), (), 700.0),
        ("a dog running through a park at dusk", (3, 4, 6), (), 300.0),
        ("waves", (3, 2, 4), (0,), 500.0),
        ("a red car driving along a mountain road", (4, 4, 4), (0, 1), 900.0),
    ]
    samples = []
    for prompt, (frames, h, w), clean, timestep in specs:
        pixel_frames = 1 if frames == 1 else (frames - 1) * pipeline.vae_scale_factor_temporal + 1
        ids, _ = pipeline.tokenize_prompt(prompt, num_frames=pixel_frames, height=h * 16, width=w * 16)
        x0 = torch.randn(channels, frames, h, w, generator=generator)
        eps = torch.randn(channels, frames, h, w, generator=generator)
        sigma = timestep / 1000
        shape = (1, channels, frames, h, w) if frames == 4 else (channels, frames, h, w)  # both layouts
        x_t = (sigma * eps + (1 - sigma) * x0).reshape(shape)
        samples.append(Cosmos3TrainingSample(ids, x0.reshape(shape), x_t, timestep, clean))
    return samples


def loss_of(preds, samples, seed=1):
    """Masked MSE against a fixed random target, on the noisy frames only."""
    generator = torch.Generator().manual_seed(seed)
    total = 0
    for pred, sample in zip(preds, samples, strict=True):
        target = torch.randn(pred.shape, generator=generator)
        noisy = sample.noisy_frames()
        total = total + (pred[:, :, noisy] - target[:, :, noisy]).square().mean()
    return total


def grads(transformer, preds, samples):
    transformer.zero_grad(set_to_none=True)
    loss_of(preds, samples).backward()
    return {n: p.grad.clone() for n, p in transformer.named_parameters() if p.grad is not None}


def assert_same(batched, reference, atol=1e-5):
    assert len(batched) == len(reference)
    for ours, theirs in zip(batched, reference, strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, atol=atol, rtol=1e-4)


def assert_same_grads(batched, reference):
    assert batched.keys() == reference.keys() and reference
    for name in reference:
        torch.testing.assert_close(batched[name], reference[name], atol=1e-5, rtol=1e-4, msg=name)


def test_pack_layout_text_first_then_vision(pipeline):
    samples = make_samples(pipeline)
    packed = pack_samples(pipeline, samples)
    kw = packed.kwargs
    assert kw["und_len"] == sum(packed.und_lengths) == len(kw["input_ids"])
    assert kw["sequence_length"] == kw["und_len"] + sum(packed.gen_lengths)
    assert kw["vision_sequence_indexes"].tolist() == list(range(kw["und_len"], kw["sequence_length"]))
    # One timestep per noisy token; the clean (condition) frames get none.
    noisy_tokens = [
        len(s.noisy_frames()) * n // s.latents().shape[2]
        for s, n in zip(samples, packed.gen_lengths, strict=True)
    ]
    assert len(kw["vision_timesteps"]) == len(kw["vision_mse_loss_indexes"]) == sum(noisy_tokens)
    # A single sample packs exactly as the pipeline does: text at 0.., vision right after.
    one = pack_samples(pipeline, samples[:1]).kwargs
    assert one["und_len"] == len(samples[0].input_ids)
    assert one["vision_sequence_indexes"][0] == one["und_len"]


@pytest.mark.parametrize("attention", ["segments", "mask"])
def test_outputs_and_gradients_equal_per_sample_forward(pipeline, attention):
    transformer = pipeline.transformer
    samples = make_samples(pipeline)
    reference = per_sample_forward(transformer, pipeline, samples)
    reference_grads = grads(transformer, reference, samples)
    batched = batched_forward(transformer, pack_samples(pipeline, samples), attention=attention)
    assert_same(batched, reference)
    # Upstream's convention: zeros at the clean frames.
    assert not batched[3][:, :, [0, 1]].any() and not batched[2][:, :, 0].any()
    assert_same_grads(grads(transformer, batched, samples), reference_grads)
    # The original processors are back.
    assert all(type(p).__name__ == "Cosmos3AttnProcessor" for p in transformer.attn_processors.values())


def test_lora_with_gradient_checkpointing(pipeline):
    transformer = copy.deepcopy(pipeline.transformer)
    transformer.add_adapter(
        LoraConfig(r=4, lora_alpha=4, target_modules=LORA_TARGETS, init_lora_weights=False)
    )
    transformer.enable_gradient_checkpointing()
    transformer.train()
    samples = make_samples(pipeline, seed=2)
    reference = per_sample_forward(transformer, pipeline, samples)
    reference_grads = grads(transformer, reference, samples)
    # Backward runs after the processors are restored: the recompute must still use the segment processor.
    batched = batched_forward(transformer, pack_samples(pipeline, samples))
    assert_same(batched, reference)
    batched_grads = grads(transformer, batched, samples)
    assert any("lora_" in name for name in reference_grads)
    assert_same_grads(batched_grads, reference_grads)


def test_reasoner_cache_replays_keys_and_values(pipeline):
    transformer = copy.deepcopy(pipeline.transformer)
    transformer.requires_grad_(False)  # frozen reasoner; LoRA on the generator only
    transformer.add_adapter(
        LoraConfig(r=4, lora_alpha=4, target_modules=GENERATOR_TARGETS, init_lora_weights=False)
    )
    samples = make_samples(pipeline, seed=3)
    reference = per_sample_forward(transformer, pipeline, samples)
    reference_grads = grads(transformer, reference, samples)
    cache = Cosmos3ReasonerCache()
    packed = pack_samples(pipeline, samples)
    recorded = batched_forward(transformer, packed, cache=cache)  # unseen prompts: full run, recorded
    assert len(cache) == len(samples)
    assert_same(recorded, reference)
    # New noise and timesteps, same prompts: the reasoner is skipped entirely.
    renoised = make_samples(pipeline, seed=4)
    reference = per_sample_forward(transformer, pipeline, renoised)
    reference_grads = grads(transformer, reference, renoised)
    replayed = batched_forward(transformer, pack_samples(pipeline, renoised), cache=cache)
    assert_same(replayed, reference)
    assert_same_grads(grads(transformer, replayed, renoised), reference_grads)

    transformer.layers[0].self_attn.to_k.weight.requires_grad_(True)
    with pytest.raises(ValueError, match="frozen reasoner"):
        batched_forward(transformer, packed, cache=cache)


def test_edge_family_and_reasoner_cache():
    """Edge: relu2 MLPs, no text q/k norms, a generator key norm on the reasoner keys (stays trainable)."""
    pipeline = build_pipeline(family="cosmos3_edge")
    transformer = pipeline.transformer
    samples = make_samples(pipeline)
    reference = per_sample_forward(transformer, pipeline, samples)
    assert_same(batched_forward(transformer, pack_samples(pipeline, samples)), reference)

    transformer.requires_grad_(False)
    norms = [layer.self_attn.k_norm_und_for_gen for layer in transformer.layers]
    for norm in norms:
        norm.requires_grad_(True)
    reference_grads = grads(transformer, reference, samples)
    assert any("k_norm_und_for_gen" in name for name in reference_grads)
    cache = Cosmos3ReasonerCache()
    packed = pack_samples(pipeline, samples)
    batched_forward(transformer, packed, cache=cache)
    replayed = batched_forward(transformer, packed, cache=cache)
    assert_same(replayed, reference)
    assert_same_grads(grads(transformer, replayed, samples), reference_grads)


# --- action modes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action_pipeline():
    return build_pipeline(action=True)


def make_action_samples(pipeline, seed=0):
    """Policy (frame 0 clean, actions noisy), forward dynamics (frame 0 and every action clean), inverse
    dynamics (every frame clean, actions noisy), and a policy with a clean state row first at offset 0, on
    different domains, chunk lengths and timesteps."""
    channels = pipeline.transformer.config.latent_channel
    action_dim = pipeline.transformer.config.action_dim
    generator = torch.Generator().manual_seed(seed)
    specs = [  # prompt, (latent frames, h, w), clean frames, action rows, clean steps, domain, offset, t
        ("push the block", (3, 2, 4), (0,), 8, (), 4, 1, 600.0),
        ("open the drawer", (2, 2, 2), (0,), 4, tuple(range(4)), 5, 1, 400.0),
        ("pick up the cup", (3, 2, 2), (0, 1, 2), 8, (), 8, 1, 800.0),
        ("close the gripper", (2, 4, 2), (0,), 5, (0,), 8, 0, 250.0),
    ]
    samples = []
    for prompt, (frames, h, w), clean, rows, clean_steps, domain, offset, timestep in specs:
        pixel_frames = (frames - 1) * pipeline.vae_scale_factor_temporal + 1
        ids, _ = pipeline.tokenize_prompt(
            prompt, num_frames=pixel_frames, height=h * 16, width=w * 16, action_mode="policy"
        )
        sigma = timestep / 1000
        x0 = torch.randn(channels, frames, h, w, generator=generator)
        x_t = sigma * torch.randn(channels, frames, h, w, generator=generator) + (1 - sigma) * x0
        a0 = torch.zeros(rows, action_dim)
        a0[:, :7] = torch.randn(rows, 7, generator=generator)  # a raw width of 7, zero-padded
        a_t = sigma * torch.randn(rows, action_dim, generator=generator) + (1 - sigma) * a0
        a_t[:, 7:] = 0
        samples.append(
            Cosmos3TrainingSample(
                ids, x0, x_t, timestep, clean, fps=10.0, action_x0=a0, action_noisy=a_t,
                action_condition_steps=clean_steps, domain_id=domain, action_start_offset=offset,
            )
        )  # fmt: skip
    return samples


def action_loss(outputs, samples, seed=2):
    """Masked MSE of vision and actions against fixed random targets, on the noisy frames and steps."""
    generator = torch.Generator().manual_seed(seed)
    total = loss_of(outputs.sample if hasattr(outputs, "sample") else [o.sample[0] for o in outputs], samples)
    actions = outputs.action if hasattr(outputs, "action") else [o.action[0] for o in outputs]
    for pred, sample in zip(actions, samples, strict=True):
        noisy = sample.noisy_action_steps()
        target = torch.randn(pred.shape, generator=generator)
        if noisy:
            total = total + (pred[noisy, :7] - target[noisy, :7]).square().mean()
    return total


@pytest.mark.parametrize("attention", ["segments", "mask"])
def test_action_samples_equal_per_sample_forward(action_pipeline, attention):
    """Vision and action velocities, and every gradient, of several action samples in one call equal
    upstream's forward one sample at a time (all three modes and a state row in the same batch)."""
    transformer = action_pipeline.transformer
    samples = make_action_samples(action_pipeline)
    reference = per_sample_outputs(transformer, action_pipeline, samples)
    transformer.zero_grad(set_to_none=True)
    action_loss(reference, samples).backward()
    reference_grads = {n: p.grad.clone() for n, p in transformer.named_parameters() if p.grad is not None}
    assert any(n.startswith("action_proj_in") for n in reference_grads)

    outputs = batched_outputs(transformer, pack_samples(action_pipeline, samples), attention=attention)
    assert_same(outputs.sample, [o.sample[0] for o in reference])
    assert_same(outputs.action, [o.action[0] for o in reference])
    # Upstream's convention: zeros at clean steps (forward dynamics: all of them; the state row).
    assert not outputs.action[1].any() and not outputs.action[3][0].any() and outputs.action[3][1:].any()
    transformer.zero_grad(set_to_none=True)
    action_loss(outputs, samples).backward()
    grads_now = {n: p.grad.clone() for n, p in transformer.named_parameters() if p.grad is not None}
    assert_same_grads(grads_now, reference_grads)


def test_action_positions_follow_the_frames(action_pipeline):
    """Action j sits on pixel frame j + 1 (offset 1, upstream's) or j (offset 0, a state row first); the domain
    picks the projection rows, so another domain changes the prediction."""
    samples = make_action_samples(action_pipeline)[:1]
    packed = pack_samples(action_pipeline, samples).kwargs
    shifted = pack_samples(action_pipeline, [dataclasses.replace(samples[0], action_start_offset=0)]).kwargs
    action_positions = packed["position_ids"][:, packed["action_sequence_indexes"]]
    shifted_positions = shifted["position_ids"][:, shifted["action_sequence_indexes"]]
    step = action_positions[0, 1] - action_positions[0, 0]
    torch.testing.assert_close(action_positions[0] - shifted_positions[0], step.expand(8), atol=2e-3, rtol=0)
    transformer = action_pipeline.transformer
    with torch.no_grad():
        one = transformer(**packed).action[0]
        other = transformer(
            **pack_samples(action_pipeline, [dataclasses.replace(samples[0], domain_id=9)]).kwargs
        ).action[0]
    assert not torch.allclose(one, other)


def test_repacking_new_noise_equals_packing_it(action_pipeline):
    """A sampler's next step (new tokens and timesteps, the same calls) repacked on the previous step's positions
    and indexes is exactly the batch `pack_samples` builds for it; samples laid out otherwise are refused."""
    samples = make_action_samples(action_pipeline)
    generator = torch.Generator().manual_seed(5)
    later = [
        dataclasses.replace(
            s, noisy=torch.randn(s.noisy.shape, generator=generator), timestep=s.timestep / 2,
            action_noisy=torch.randn(s.action_noisy.shape, generator=generator),
        )
        for s in samples
    ]  # fmt: skip
    expected = pack_samples(action_pipeline, later)
    repacked = repack(action_pipeline, pack_samples(action_pipeline, samples), later)
    assert repacked.kwargs.keys() == expected.kwargs.keys()
    for key, value in expected.kwargs.items():
        mine = repacked.kwargs[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(mine, value), key
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            assert all(torch.equal(a, b) for a, b in zip(mine, value, strict=True)), key
        else:
            assert mine == value, key
    assert (repacked.und_lengths, repacked.gen_lengths, repacked.prompts) == (
        expected.und_lengths, expected.gen_lengths, expected.prompts,
    )  # fmt: skip
    with pytest.raises(ValueError, match="not laid out as the packed batch"):
        repack(action_pipeline, expected, [dataclasses.replace(later[0], domain_id=9), *later[1:]])
