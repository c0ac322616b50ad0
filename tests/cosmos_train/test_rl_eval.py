"""`[eval]` during diffusion RL: before training, every N steps and at the end, the held-out prompts sampled by the
pipeline's own sampler with the EMA weights, scored by the job's rewards, logged as `eval/reward` and
`eval/<reward>`, written under `output_dir/eval/step_N/`, and the reward curves drawn to `output_dir/curves.png`."""

from __future__ import annotations

import json

import diffusion_rl_helpers
import numpy as np
import pytest
import torch
from diffusion_rl_helpers import PROMPTS, write_rl_job

from cosmos_train.diffusion.media_io import write_samples
from cosmos_train.jobs import read_job
from cosmos_train.rewards import RewardSpec, build_media_rewards

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

EVAL = f'\n[eval]\npath = "{PROMPTS}"\nevery = 2\nsampling_steps = 4\nmax_prompts = 3\nseed = 5\n'


def test_evaluation_during_nft(tmp_path, tiny):
    trainer = read_job(
        write_rl_job(tmp_path, tiny("sd3"), kind="nft", train={"max_steps": 3}, extra=EVAL)
    ).run()
    evaluations = [entry for entry in trainer.state.log_history if "eval/reward" in entry]
    assert [entry["step"] for entry in evaluations] == [0, 2, 3]  # before training, every 2 steps, the end
    assert all(
        entry["eval/reward"] == entry["eval/brightness"] for entry in evaluations
    )  # one reward, weight 1
    train_logs = [entry["step"] for entry in trainer.state.log_history if "reward" in entry]
    assert train_logs == [1, 2, 3]  # an evaluation at a logging step keeps that step's train log

    run = tmp_path / "run"
    for step in (0, 2, 3):
        assert (run / "eval" / f"step_{step}" / "grid.png").is_file()
    samples = json.loads((run / "eval" / "step_3" / "samples.json").read_text())
    prompts = PROMPTS.read_text().splitlines()[:3]
    assert [sample["prompt"] for sample in samples] == prompts
    assert np.mean([sample["reward"] for sample in samples]) == evaluations[-1]["eval/reward"]
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The logged value is the reward of the pipeline's own samples (EMA weights, prompt i from seed + i), without
    # guidance as DiffusionNFT evaluates (the pipeline's own default is 7).
    brightness = build_media_rewards([RewardSpec("brightness", 1.0, {})])[0]
    with trainer.weights_for_export():
        media = trainer.adapter.generate(prompts, 32, 32, num_inference_steps=4, seed=5, guidance_scale=1.0)
    uint8 = (media * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    assert np.mean(brightness(uint8, prompts)) == evaluations[-1]["eval/reward"]
    assert trainer.evaluation.evaluate(3) == evaluations[-1]["eval/reward"]  # deterministic


def test_video_evaluations_are_mp4s(tmp_path):
    import av

    frames = np.zeros((2, 5, 16, 16, 3), dtype=np.uint8)
    frames[1] += 200
    write_samples(tmp_path, frames, [{"prompt": "a", "reward": 0.0}, {"prompt": "b", "reward": 1.0}], fps=8)
    for index in range(2):
        with av.open(str(tmp_path / f"{index:03d}.mp4")) as container:
            decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        assert len(decoded) == 5 and abs(decoded[0].mean() - frames[index].mean()) < 8
    assert json.loads((tmp_path / "samples.json").read_text())[1] == {"prompt": "b", "reward": 1.0}


def test_geneval_evaluation_per_task_with_its_own_rewards(tmp_path, tiny):
    """`[eval]` with GenEval records: `samples_per_prompt` samples each, scored by `[eval.rewards]` (not the job's),
    a mean per task (`eval/reward/<tag>`), and the training seconds so far. GenEval-mini's reward, by import path
    (`benchmarks/` is on the tests' sys.path)."""
    from domains.geneval_mini import Vocabulary, all_prompts, write_metadata

    geneval = "domains.geneval_mini.evaluator:geneval_mini"
    records = [r for r in all_prompts(Vocabulary()) if r["tag"] in ("counting", "colors")][::3]
    held_out = write_metadata(tmp_path / "test_metadata.jsonl", records)
    extra = (
        f'\n[eval]\npath = "{held_out}"\nevery = 2\nsampling_steps = 2\nsamples_per_prompt = 2\n'
        f'[eval.rewards]\n"{geneval}" = {{ weight = 1.0, strict = true }}\nbrightness = 0.5\n'
    )
    trainer = read_job(
        write_rl_job(tmp_path, tiny("sd3"), kind="nft", train={"max_steps": 2}, extra=extra)
    ).run()
    evaluations = [entry for entry in trainer.state.log_history if "eval/reward" in entry]
    assert [entry["step"] for entry in evaluations] == [0, 2]
    # Training is rewarded by the job's reward (brightness); only the evaluation by GenEval-mini.
    assert [e["step"] for e in trainer.state.log_history if "rewards/brightness" in e] == [1, 2]
    last = evaluations[-1]
    assert last["eval/reward"] == pytest.approx(
        np.mean([s[geneval] + 0.5 * s["brightness"] for s in _samples(tmp_path, 2)])
    )
    samples = _samples(tmp_path, 2)
    assert [s["prompt"] for s in samples] == [r["prompt"] for r in records for _ in range(2)]
    assert {s[geneval] for s in samples} <= {0.0, 1.0}  # strict: GenEval's score
    for tag in ("counting", "colors"):
        assert last[f"eval/reward/{tag}"] == pytest.approx(
            np.mean([s["reward"] for s in samples if s["tag"] == tag])
        )
    assert evaluations[0]["eval/train_seconds"] < evaluations[1]["eval/train_seconds"]
    # Evaluations are left out of the training seconds: step 0's evaluation happened before any training.
    assert evaluations[0]["eval/train_seconds"] < 1.0


def _samples(tmp_path, step: int) -> list[dict]:
    return json.loads((tmp_path / "run" / "eval" / f"step_{step}" / "samples.json").read_text())


def test_batched_generation_matches_one_prompt_at_a_time(tiny):
    """SD3 samples `generation_batch` prompts per pipeline call, each from its own generator: the same pictures."""
    from cosmos_train.diffusion.loading import load_adapter

    adapter = load_adapter(str(tiny("sd3")))
    prompts = ["a red square", "a blue circle", "a green triangle"]
    batched = adapter.generate(prompts, 32, 32, num_inference_steps=3, seed=4)
    adapter.generation_batch = 1
    single = adapter.generate(prompts, 32, 32, num_inference_steps=3, seed=4)
    assert batched.shape == single.shape == (3, 3, 32, 32)
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=0)
