"""Reward names and what a reward receives.

- An unknown reward name gets a did-you-mean (`cosmos_train.config.suggest`, as job keys do) wherever it is named:
  a job's `[rewards]` (`check_reward_name`, which `read_job` and `validate-config` reach), `reward-serve --rewards`
  and `--rewards-config`, and an enqueue's `reward_fn` at the reward service.
- The README's own-reward examples run as the trainers call them (`build_rewards` for a text reward, called as TRL
  calls it; `build_media_rewards` for an image/video reward, called as the diffusion RL trainers call it), read
  from the README itself so the documentation cannot drift from the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cosmos_train.cli import app as cli
from cosmos_train.rewards import RewardSpec, build_media_rewards, build_rewards, check_reward_name
from cosmos_train.rewards.remote import encode_request

README = Path(__file__).resolve().parents[2] / "README.md"


# --- did you mean -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "media", "nearest"),
    [
        ("acuracy", False, "accuracy"),
        ("formt", False, "format"),
        ("brightnes", True, "brightness"),
        ("jpeg_compressability", True, "jpeg_compressibility"),
    ],
)
def test_an_unknown_reward_name_suggests_the_nearest_builtin(name, media, nearest):
    builtins = "image/video built-ins are" if media else "built-ins are"
    with pytest.raises(ValueError) as raised:
        check_reward_name(name, media=media)
    message = str(raised.value)
    assert message.startswith(f"unknown reward '{name}' (did you mean '{nearest}'?); {builtins} ")
    assert "\n" not in message


def test_a_name_near_nothing_gets_no_suggestion():
    with pytest.raises(ValueError, match=r"^unknown reward 'zzz'; built-ins are accuracy, "):
        check_reward_name("zzz")


JOBS = {
    "grpo": (
        '[model]\nname_or_path = "model"\n[data]\nformat = "llava"\npath = "data.json"\n',
        "data.json",
        "[]",
    ),
    "nft": ('[model]\nname_or_path = "pipe"\n[data]\npath = "prompts.txt"\n', "prompts.txt", "a cat\n"),
}


@pytest.mark.parametrize(
    ("kind", "reward", "nearest"), [("grpo", "acuracy", "accuracy"), ("nft", "brightnes", "brightness")]
)
def test_a_job_with_a_misspelt_reward_names_the_nearest(tmp_path, kind, reward, nearest):
    """What a user meets: `validate-config` exits 2 with one line naming the file, `[rewards]` and the near miss."""
    sections, data, content = JOBS[kind]
    (tmp_path / data).write_text(content)
    job = tmp_path / "job.toml"
    job.write_text(f'kind = "{kind}"\n{sections}[rewards]\n{reward} = 1.0\n[train]\noutput_dir = "runs/x"\n')
    result = CliRunner().invoke(cli, ["validate-config", str(job)])
    assert result.exit_code == 2, result.output
    assert f"{job}: [rewards] unknown reward '{reward}' (did you mean '{nearest}'?);" in result.output
    assert "Traceback" not in result.output


def test_reward_serve_names_the_nearest_builtin(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "x")
    serve = ["reward-serve", "--token-env", "MY_TOKEN"]
    result = CliRunner().invoke(cli, [*serve, "--rewards", "brightness,colour_target"])
    assert result.exit_code == 2
    assert "unknown reward 'colour_target' (did you mean 'color_target'?)" in result.output
    table = tmp_path / "rewards.toml"
    table.write_text("[rewards]\njpeg_compresibility = { quality = 90 }\n")
    result = CliRunner().invoke(cli, [*serve, "--rewards", "", "--rewards-config", str(table)])
    assert result.exit_code == 2
    assert "unknown reward 'jpeg_compresibility' (did you mean 'jpeg_compressibility'?)" in result.output


def test_the_service_names_the_nearest_hosted_reward():
    from fastapi import HTTPException

    from cosmos_train.service.app import ServiceSettings, parse_enqueue

    hosted = {"brightness": None, "pickscore": None}
    media = np.zeros((1, 8, 8, 3), np.uint8)

    def refusal(reward: str) -> str:
        body = encode_request({"prompts": ["a"], "reward_fn": {reward: 1.0}, "media_type": "image"}, media)
        with pytest.raises(HTTPException) as raised:
            parse_enqueue(body, ServiceSettings(token=None), hosted)
        assert raised.value.status_code == 422
        return raised.value.detail

    assert refusal("pick_score") == (
        "unknown reward 'pick_score' (did you mean 'pickscore'?); this service hosts: brightness, pickscore"
    )
    assert refusal("ocr") == "unknown reward 'ocr'; this service hosts: brightness, pickscore"


# --- the README's own-reward examples -----------------------------------------------------------------


def readme_rewards_module() -> str:
    """The README's `my_rewards.py` example (the python block that starts with that comment)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    found = [block for block in blocks if block.startswith("# my_rewards.py")]
    assert len(found) == 1, "the README's my_rewards.py example is missing"
    return found[0]


@pytest.fixture
def my_rewards(tmp_path, monkeypatch):
    """The README's example written beside a job file, as a user would: its folder is the job's search path."""
    (tmp_path / "my_rewards.py").write_text(readme_rewards_module())
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_reference leaves the search path on sys.path
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    yield tmp_path
    sys.modules.pop("my_rewards", None)


def test_the_readme_examples_are_three_lines_each():
    functions = re.split(r"\n(?=def )", readme_rewards_module().strip())[1:]
    assert [len(f.strip().splitlines()) for f in functions] == [3, 3]


def test_the_readme_text_reward_runs_as_grpo_calls_it(my_rewards):
    """As TRL calls a reward: keyword arguments, plain or chat completions, the dataset's columns."""
    comment = readme_rewards_module().splitlines()[0]
    assert '"my_rewards:ends_with_solution" = 1.0' in comment
    (reward,) = build_rewards([RewardSpec("my_rewards:ends_with_solution", 1.0, {})], search_path=my_rewards)
    columns = {"prompts": ["2+2?", "3+3?"], "completion_ids": [[1], [2]], "solution": ["4", "6"]}
    assert reward(completions=["so 4", "so 5"], **columns) == [1.0, 0.0]
    chat = [[{"role": "assistant", "content": "it is 4"}], [{"role": "assistant", "content": "6"}]]
    assert reward(completions=chat, **columns, trainer_state=None) == [1.0, 1.0]


def test_the_readme_image_reward_runs_as_diffusion_rl_calls_it(my_rewards):
    """As the diffusion RL trainers call it (`MediaReward`): uint8 B x H x W x C images, B x T x H x W x C
    videos, the prompts, and per-sample metadata or None."""
    comment = readme_rewards_module().splitlines()[0]
    assert '"my_rewards:redness" = 1.0' in comment
    (reward,) = build_media_rewards([RewardSpec("my_rewards:redness", 1.0, {})], search_path=my_rewards)
    images = np.zeros((2, 4, 4, 3), np.uint8)
    images[0, ..., 0] = 255  # red
    images[1] = 255  # white
    assert reward(images, ["a", "b"], [{"tag": "x"}, {"tag": "y"}]) == [1.0, 0.0]
    videos = np.zeros((2, 3, 4, 4, 3), np.uint8)
    videos[0, ..., 0] = 255
    assert reward(videos, ["a", "b"], None) == [1.0, 0.0]


def test_the_readme_names_what_a_reward_receives():
    text = " ".join(README.read_text().split())  # wrapping aside
    for phrase in (
        "`f(completions, **columns) -> list[float]`",
        "`f(media, prompts, metadata, **parameters) -> list[float]`",
        "numpy uint8 array, `B x H x W x C` for images and `B x T x H x W x C` for videos",
    ):
        assert phrase in text, phrase
