"""GRPO on tiny offline models: learning on toy tasks (text, image prompts), video prompts reaching both the
rollout and the loss forward unchanged, TRL's variants, dynamic sampling, and failing rewards.

The toy task is `examples/grpo/toy_rewards.py:lowercase`, the fraction of lowercase letters in the
completion: a tiny random model starts near 0.1 and learns it within seconds. The text-LM proof is the
shipped recipe, run as shipped (`test_examples.py`); here the same task is learnt on image prompts and
through the remote reward service.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from grpo_helpers import TOY_REWARD, grpo_job
from sft_helpers import REPO, SHAPES
from transformers import AutoProcessor, TrainerCallback
from typer.testing import CliRunner

from cosmos_train import tiny_models as tiny
from cosmos_train.algorithms.grpo.trainer import EpochSeededRepeatSampler, _merge_rollouts, run_grpo
from cosmos_train.cli import app
from cosmos_train.data import load_video
from cosmos_train.errors import RunError
from cosmos_train.jobs import read_job
from cosmos_train.rewards import RewardError

LEARN = {
    "max_steps": 20,
    "learning_rate": 1e-2,
    "per_device_train_batch_size": 8,
    "num_generations": 8,
    "max_completion_length": 16,
    "beta": 0.0,
}


@pytest.fixture(autouse=True)
def _toy_rewards_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples" / "grpo"))


@pytest.fixture(scope="module")
def text_lm(tmp_path_factory):
    return tiny.save_tiny_text_lm(tmp_path_factory.mktemp("grpo") / "qwen3")


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return tiny.save_tiny_vlm(tmp_path_factory.mktemp("grpo") / "qwen3_vl")


@pytest.fixture(scope="module")
def video_prompts(tmp_path_factory):
    """Two video questions and one image question, LLaVA style, with reference answers."""
    path = tmp_path_factory.mktemp("grpo-data") / "video.json"
    records = [
        {"video": "clip.mp4", "conversations": [{"from": "human", "value": "<video>\nWhat moves?"}, {"from": "gpt", "value": "A"}]},
        {"video": "clip.mp4", "conversations": [{"from": "human", "value": "What color?\n<video>"}, {"from": "gpt", "value": "B"}]},
        {"image": "images/red_square.png", "conversations": [{"from": "human", "value": "<image>\nShape?"}, {"from": "gpt", "value": "C"}]},
    ]  # fmt: skip
    path.write_text(json.dumps(records))
    return path


def rewards_of(trainer) -> list[float]:
    return [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]


def assert_learned(rewards: list[float], margin: float = 0.15) -> None:
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + margin, rewards


def test_vlm_grpo_learns_on_image_prompts(tmp_path, vlm):
    job = grpo_job(tmp_path, vlm, data=SHAPES / "llava.json", data_format="llava", train=LEARN)
    trainer = run_grpo(read_job(job))
    assert_learned(rewards_of(trainer))


def test_vlm_lora_shared_prompt_rollouts_with_several_prompts(tmp_path, vlm):
    """Under PEFT the multimodal RoPE offsets live one module deeper; each prompt's must reach its K samples."""
    train = {"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 2}
    job = grpo_job(
        tmp_path, vlm, data=SHAPES / "llava.json", data_format="llava", train=train, extra="[lora]\nr = 4\n"
    )
    trainer = run_grpo(read_job(job))
    assert trainer.rollout.shared_prompt and trainer.state.global_step == 1


class _RecordVisionInputs(TrainerCallback):
    """Every call of the vision tower: (gradients on, patches, grids). Generation encodes the media before
    its first forward, so the tower, not the model's forward, sees what both the rollout and the loss use."""

    def __init__(self):
        self.calls = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def record(module, call_args, call_kwargs):
            patches = call_args[0] if call_args else call_kwargs["hidden_states"]
            grids = call_args[1] if len(call_args) > 1 else call_kwargs["grid_thw"]
            self.calls.append((torch.is_grad_enabled(), patches.detach().clone(), grids.clone()))

        model.model.visual.register_forward_pre_hook(record, with_kwargs=True)


@pytest.mark.parametrize("family", ["qwen3_vl", "cosmos3"])
def test_prompt_videos_reach_rollout_and_loss_forward_unchanged(tmp_path, family, vlm, video_prompts):
    model = vlm if family == "qwen3_vl" else tiny.save_tiny_model("cosmos3", tmp_path / "cosmos3")
    recorder = _RecordVisionInputs()
    job = grpo_job(
        tmp_path, model, data=video_prompts, data_format="llava",
        # log_completions: TRL logs the prompts, which hold decoded clips during the rollout.
        train={"max_steps": 3, "per_device_train_batch_size": 3, "num_generations": 3, "beta": 0.04,
               "log_completions": True},
    )  # fmt: skip
    run_grpo(read_job(job), callbacks=[recorder])

    # The clip as the model's own processor encodes it from our decoded frames (fps 2, at most 4 frames).
    processor = AutoProcessor.from_pretrained(model)
    clip = load_video(SHAPES / "clip.mp4", fps=2.0, max_frames=4, min_frames=2)
    expected = processor.video_processor(
        videos=[clip.frames], video_metadata=[clip.metadata()], do_sample_frames=False, return_tensors="pt"
    )
    video, video_grid = expected["pixel_values_videos"], expected["video_grid_thw"][0]

    seen = {True: 0, False: 0}  # videos seen with gradients (loss) and without (rollout, reference)
    for with_grad, patches, grids in recorder.calls:
        for item, grid in zip(torch.split(patches, grids.prod(dim=-1).tolist()), grids, strict=True):
            if grid[0] > 1:  # a clip (an image has one temporal patch)
                assert torch.equal(grid, video_grid) and torch.equal(item, video)
                seen[with_grad] += 1
    assert seen[True] and seen[False], seen


def test_variants_run_through_trl_options(tmp_path, text_lm):
    """GRPO, DAPO (clip-higher, token-level loss, overlong shaping, dynamic sampling), Dr. GRPO, GSPO, KL."""
    variants = {
        "grpo": {"loss_type": "grpo"},
        "dapo": {"loss_type": "dapo", "epsilon_high": 0.28, "mask_truncated_completions": False},
        "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "gspo": {"importance_sampling_level": "sequence", "loss_type": "grpo", "steps_per_generation": 2},
        "kl": {"beta": 0.1},
    }
    for name, settings in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        rewards = {TOY_REWARD: 1.0} | (
            {"overlong": "{ weight = 0.5, soft_punish_cache = 4 }"} if name == "dapo" else {}
        )
        extra = "[rollout]\ndynamic_sampling = true\n" if name == "dapo" else ""
        trainer = run_grpo(read_job(grpo_job(folder, text_lm, rewards=rewards, train=settings, extra=extra)))
        logs = [entry for entry in trainer.state.log_history if "loss" in entry]
        assert len(logs) == 3 and all(math.isfinite(entry["loss"]) for entry in logs), name
        assert "reward" in logs[0], name
        for key, value in settings.items():
            assert getattr(trainer.args, key) == value, (name, key)
        if name == "dapo":
            assert "rewards/overlong/mean" in logs[0] and "dynamic_sampling/dropped_groups" in logs[0]
        if name == "kl":
            assert trainer.ref_model is not None and any(entry["kl"] > 0 for entry in logs)
        if name == "gspo":
            assert trainer.importance_sampling_level == "sequence"


def test_dynamic_sampling_trains_only_on_groups_with_reward_spread(tmp_path, text_lm, monkeypatch):
    """Color questions get a constant reward (no spread); with dynamic sampling only the shape questions'
    groups reach the loss, and the dropped groups are logged."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "split_rewards.py").write_text(
        "from toy_rewards import lowercase\n"
        "def lowercase_unless_color(prompts, completions, **kw):\n"
        "    scores = lowercase(completions)\n"
        "    return [0.5 if 'color' in str(p) else s for p, s in zip(prompts, scores)]\n"
    )
    train = {"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4}
    batches = []

    def run(dynamic: bool):
        folder = tmp_path / f"dynamic-{dynamic}"
        folder.mkdir()
        extra = f"[rollout]\ndynamic_sampling = {str(dynamic).lower()}\nmax_resample_rounds = 6\n"
        job = grpo_job(
            folder, text_lm, rewards={"split_rewards:lowercase_unless_color": 1.0}, train=train, extra=extra
        )
        trainer = run_grpo(read_job(job))
        batches.append(trainer._buffered_inputs[0])
        return trainer

    filtered = run(True)
    dropped = [
        entry["dynamic_sampling/dropped_groups"] for entry in filtered.state.log_history if "reward" in entry
    ]
    assert sum(dropped) > 0
    assert (batches[0]["advantages"] != 0).all()
    run(False)
    assert (batches[1]["advantages"] == 0).any()  # without the filter, flat groups train with zero advantage


def test_dynamic_sampling_stops_rather_than_train_on_groups_without_spread(tmp_path, text_lm, monkeypatch):
    """DAPO never fills a batch with zero-spread groups (their tokens would count in the loss's denominator): when
    `max_resample_rounds` extra rounds leave it short, the run stops with one line saying why, before a step."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "flat_reward.py").write_text(
        "def same(completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    extra = "[rollout]\ndynamic_sampling = true\nmax_resample_rounds = 2\n"
    job = grpo_job(tmp_path, text_lm, rewards={"flat_reward:same": 1.0}, train={"max_steps": 2}, extra=extra)
    with pytest.raises(RunError) as raised:
        run_grpo(read_job(job))
    message = str(raised.value)
    assert message.startswith(
        "[rollout] dynamic_sampling: after 2 extra rounds at step 0, 1 of the batch's 1 "
    )
    assert "max_resample_rounds" in message and "\n" not in message
    assert not list((tmp_path / "run").glob("checkpoint-*"))


def test_merge_rollouts_repads_prompts_left_and_completions_right():
    first = {
        "prompt_ids": torch.tensor([[9, 1], [2, 3]]),
        "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
        "completion_ids": torch.tensor([[5], [6]]),
        "completion_mask": torch.tensor([[1], [1]]),
        "advantages": torch.tensor([1.0, -1.0]),
        "prompt_media": [{"a": 1}, {"a": 2}],
        "num_items_in_batch": torch.tensor(2),
    }
    second = {
        "prompt_ids": torch.tensor([[4, 4, 4]]),
        "prompt_mask": torch.tensor([[1, 1, 1]]),
        "completion_ids": torch.tensor([[7, 8]]),
        "completion_mask": torch.tensor([[1, 1]]),
        "advantages": torch.tensor([0.5]),
        "prompt_media": [{"a": 3}],
        "num_items_in_batch": torch.tensor(2),
    }
    merged = _merge_rollouts([(first, [1]), (second, [0])], pad_token_id=9)
    assert merged["prompt_ids"].tolist() == [[9, 2, 3], [4, 4, 4]]
    assert merged["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[6, 9], [7, 8]]
    assert merged["completion_mask"].tolist() == [[1, 0], [1, 1]]
    assert merged["advantages"].tolist() == [-1.0, 0.5]
    assert merged["prompt_media"] == [{"a": 2}, {"a": 3}]


@pytest.mark.parametrize("failure", ["raises", "nan"])
def test_failing_reward_stops_the_run_naming_reward_and_completion(tmp_path, text_lm, monkeypatch, failure):
    monkeypatch.syspath_prepend(str(tmp_path))
    bad = "raise ValueError('cannot score')" if failure == "raises" else "return float('nan')"
    module = f"bad_rewards_{failure}"  # one module per case: the import system caches modules by name
    (tmp_path / f"{module}.py").write_text(
        "def flaky(completions, **kw):\n"
        "    def one(c):\n"
        f"        if len(c[0]['content']) > 2: {bad}\n"
        "        return 1.0\n"
        "    return [one(c) for c in completions]\n"
    )
    job = grpo_job(tmp_path, text_lm, rewards={f"{module}:flaky": 1.0})
    with pytest.raises(RewardError) as raised:
        run_grpo(read_job(job))
    message = str(raised.value)
    assert f"reward '{module}:flaky'" in message and "completion 0: '" in message
    assert ("cannot score" in message) if failure == "raises" else ("nan" in message)
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_reward_returning_the_wrong_number_of_values_stops_the_run_in_one_line(
    tmp_path, text_lm, monkeypatch
):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "short_rewards.py").write_text("def one_value(completions, **kw):\n    return [1.0]\n")
    job = grpo_job(tmp_path, text_lm, rewards={"short_rewards:one_value": 1.0})
    result = CliRunner().invoke(app, ["grpo", "-c", str(job)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "reward 'short_rewards:one_value' returned 1 values for 4 completions" in errors[0]


def test_shared_prompt_rollouts_take_one_token_prompts(tmp_path, text_lm):
    """Every prompt one token long: nothing to prefill before the last token, so TRL's own generation runs."""
    data = tmp_path / "letters.jsonl"
    data.write_text("".join(json.dumps({"prompt": letter}) + "\n" for letter in "abcd"))
    trainer = run_grpo(read_job(grpo_job(tmp_path, text_lm, data=data, train={"max_steps": 1})))
    assert trainer.rollout.shared_prompt and trainer.state.global_step == 1
    assert all(len(trainer.processing_class(letter).input_ids) == 1 for letter in "abcd")


def test_grpo_learns_from_a_remote_reward(tmp_path, text_lm, monkeypatch):
    """The toy reward hosted by an HTTP reward service (the contract's test double), scored asynchronously."""
    from reward_service_double import serve

    with serve(token="secret") as service:
        monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", service.enqueue_url)
        monkeypatch.setenv("REMOTE_REWARD_FETCH_URL", service.fetch_url)
        monkeypatch.setenv("REMOTE_REWARD_TOKEN", "secret")
        trainer = run_grpo(
            read_job(grpo_job(tmp_path, text_lm, rewards={"remote:lowercase": 1.0}, train=LEARN))
        )
        batches = service.enqueued
    assert_learned(rewards_of(trainer))
    assert len(batches) == LEARN["max_steps"]
    assert len(batches[0]["header"]["completions"]) == LEARN["per_device_train_batch_size"]
    assert batches[0]["header"]["metadata"]["solution"]  # the reference answers travel as metadata


def test_remote_reward_service_down_fails_before_the_model_loads(tmp_path, text_lm, monkeypatch):
    import socket

    import cosmos_train.algorithms.grpo.trainer as grpo_trainer

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", f"http://127.0.0.1:{port}/api/reward/enqueue")
    monkeypatch.setenv("REMOTE_REWARD_FETCH_URL", f"http://127.0.0.1:{port}/api/reward/pull")
    monkeypatch.setattr(grpo_trainer, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    job = grpo_job(tmp_path, text_lm, rewards={"remote:lowercase": 1.0})
    result = CliRunner().invoke(app, ["grpo", "--config", str(job)])
    assert result.exit_code == 1, result.output
    message = result.stderr.strip()
    assert message.startswith("error: ") and message.count("\n") == 0, message
    assert f"127.0.0.1:{port} is not reachable" in message and "REMOTE_REWARD_ENQUEUE_URL" in message


def test_an_epochs_prompt_order_does_not_depend_on_the_epochs_before():
    """What a resumed process relies on: its fresh sampler, set to the checkpoint's epoch, draws that epoch's
    order (TRL's sampler draws every epoch from one generator, so a fresh one replays epoch 0's)."""
    from trl.trainer.utils import RepeatSampler

    def sampler():
        return EpochSeededRepeatSampler(range(7), mini_repeat_count=2, batch_size=3, repeat_count=2, seed=0)

    running = sampler()
    orders = []
    for epoch in range(3):
        running.set_epoch(epoch)
        orders.append(list(running))
    fresh = sampler()
    fresh.set_epoch(2)
    assert list(fresh) == orders[2] and orders[1] != orders[0]
    trl = RepeatSampler(range(7), mini_repeat_count=2, batch_size=3, repeat_count=2, seed=0)
    assert orders[0] == list(trl)  # epoch 0 keeps TRL's order


@pytest.mark.parametrize("family", ["qwen3", "qwen3_vl", "cosmos3"])
def test_shared_prompt_rollouts_equal_trl_generation_when_greedy(
    tmp_path, family, text_lm, vlm, video_prompts
):
    """One prefill per distinct prompt, its cache repeated for the group: greedy completions equal TRL's own
    generation (each prompt prefilled K times) token for token, text and video prompts alike."""
    from cosmos_train.algorithms.grpo.trainer import build_grpo_trainer

    model = {"qwen3": text_lm, "qwen3_vl": vlm}.get(family) or tiny.save_tiny_model(
        "cosmos3", tmp_path / "c3"
    )
    data = (
        {"data": SHAPES / "text.jsonl"}
        if family == "qwen3"
        else {"data": video_prompts, "data_format": "llava"}
    )
    trainer = build_grpo_trainer(
        read_job(grpo_job(tmp_path, model, **data, train={"max_completion_length": 12}))
    )
    trainer.generation_config.do_sample = False
    trainer.generation_kwargs["do_sample"] = False
    rows = [trainer.train_dataset[i] for i in (0, 1) for _ in range(3)]  # two prompts, three samples each
    prompts = [trainer._decoded_prompt(row) if trainer._is_vlm else row["prompt"] for row in rows]

    outputs = {}
    for shared in (True, False):
        trainer.rollout = trainer.rollout.model_copy(update={"shared_prompt": shared})
        _, completion_ids, *_ = trainer._generate(prompts)
        outputs[shared] = completion_ids
    assert outputs[True] == outputs[False]
    assert all(len(ids) == 12 for ids in outputs[True])  # random weights rarely stop early: a full comparison


@pytest.mark.two_ranks
@pytest.mark.slow
def test_two_process_grpo_with_video_prompts_and_dynamic_sampling(tmp_path, vlm, video_prompts):
    """Real 2-process DDP (gloo): groups stay on their rank, ranks resample in lockstep (video questions get a
    flat reward, so a rank holding one must draw again while the other may be done), media travel per row."""
    import os
    import socket
    import subprocess
    import sys

    (tmp_path / "flat_video.py").write_text(
        "from toy_rewards import lowercase\n"
        "def reward(prompts, completions, **kw):\n"
        "    scores = lowercase(completions)\n"
        "    return [0.5 if \"'video'\" in str(p) else s for p, s in zip(prompts, scores)]\n"
    )
    job = grpo_job(
        tmp_path, vlm, data=video_prompts, data_format="llava", rewards={"flat_video:reward": 1.0},
        train={"max_steps": 3, "per_device_train_batch_size": 4, "num_generations": 4, "use_cpu": True},
        extra="[rollout]\ndynamic_sampling = true\nmax_resample_rounds = 8\n",
    )  # fmt: skip
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    launcher = Path(sys.executable).with_name("accelerate")
    command = [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
               "-m", "cosmos_train", "grpo", "-c", job]  # fmt: skip
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "examples" / "grpo"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    state = json.loads((tmp_path / "run" / "checkpoint-3" / "trainer_state.json").read_text())
    logs = [entry for entry in state["log_history"] if "reward" in entry]
    assert len(logs) == 3
    assert sum(entry["dynamic_sampling/dropped_groups"] for entry in logs) > 0
    assert (tmp_path / "run" / "model.safetensors").is_file()
