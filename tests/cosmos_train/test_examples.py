"""What ships is what runs: every example the docs or a `--help` cite exists, every recipe validates,
and the tiny recipes train as shipped (through the real console script)."""

from __future__ import annotations

import json
import re
import statistics
import tomllib

import pytest
from sft_helpers import REPO, SHAPES, cli
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from cosmos_train import tiny_models as tiny
from cosmos_train.cli import app

FOLDERS = ("sft", "grpo", "diffusion_sft", "diffusion_rl", "action_sft", "policy_rl")
RECIPES = [path for folder in FOLDERS for path in sorted((REPO / "examples" / folder).glob("*.toml"))]


def kind_of(recipe) -> str:
    """The recipe's job kind, which is also its cosmos-train command."""
    return tomllib.loads(recipe.read_text())["kind"]


# Recipes that run offline as shipped, on the tiny model `make-tiny` writes.
TINY_RECIPES = {
    REPO / "examples" / "sft" / "tiny_qwen3_lora.toml": "qwen3",
    REPO / "examples" / "sft" / "tiny_cosmos3_lora.toml": "cosmos3",
    REPO / "examples" / "grpo" / "tiny_qwen3.toml": "qwen3",
    REPO / "examples" / "diffusion_sft" / "tiny_sd3_lora.toml": "sd3",
    REPO / "examples" / "diffusion_rl" / "tiny_sd3_nft.toml": "sd3",
}
# Shipped tiny recipes whose training the algorithm's own tests already run (same pipeline and settings):
# validated here, not trained twice.
TRAINED_ELSEWHERE = {
    REPO / "examples" / "diffusion_rl" / "tiny_sana_flow_grpo.toml": "test_flow_grpo.py",
    REPO / "examples" / "diffusion_rl" / "tiny_sana_ddrl.toml": "test_ddrl.py",
}
CITED = re.compile(r"examples/[\w./-]+\.(?:toml|py|sh|jsonl|json)")


def _help_texts() -> dict[str, str]:
    runner = CliRunner()
    texts = {"cosmos-train --help": runner.invoke(app, ["--help"]).stdout}
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        texts[f"cosmos-train {name} --help"] = runner.invoke(app, [name, "--help"]).stdout
    return texts


def test_every_cited_example_exists():
    docs = [REPO / "README.md", REPO / "DEVELOPERS.md", *REPO.glob("packages/*/README.md")]
    sources = {str(path.relative_to(REPO)): path.read_text() for path in docs}
    sources.update(_help_texts())
    cited = {(where, name) for where, text in sources.items() for name in CITED.findall(text)}
    assert any(name.endswith("tiny_qwen3_lora.toml") for _, name in cited)  # the scan sees the help texts
    missing = [(where, name) for where, name in cited if not (REPO / name).exists()]
    assert not missing, missing


# The tiny model of each recipe's family (`make-tiny` kinds), standing in for its checkpoint in validate-config.
STAND_IN_MODELS = {
    "sft/cosmos3_nano_lora.toml": "cosmos3",
    "sft/qwen3_vl_8b_full.toml": "qwen3_vl",
    "sft/tiny_cosmos3_lora.toml": "cosmos3",
    "sft/tiny_qwen3_lora.toml": "qwen3",
    "grpo/cosmos3_nano_video.toml": "cosmos3",
    "grpo/qwen3_math.toml": "qwen3",
    "grpo/tiny_qwen3.toml": "qwen3",
    "diffusion_sft/cosmos3_nano_lora.toml": "cosmos3_pipeline",
    "diffusion_sft/cosmos_predict2_5_lora.toml": "cosmos_predict2_5",
    "diffusion_sft/sana_lora.toml": "sana",
    "diffusion_sft/sd35_medium_lora.toml": "sd3",
    "diffusion_sft/tiny_sd3_lora.toml": "sd3",
    "diffusion_rl/cosmos_predict2_5_ddrl.toml": "cosmos_predict2_5",
    "diffusion_rl/sd35_medium_flow_grpo.toml": "sd3",
    "diffusion_rl/tiny_sana_ddrl.toml": "sana",
    "diffusion_rl/tiny_sana_flow_grpo.toml": "sana",
    "diffusion_rl/tiny_sd3_nft.toml": "sd3",
    "action_sft/cosmos3_policy_libero.toml": "cosmos3_action",
    "action_sft/cosmos3_policy_droid.toml": "cosmos3_action",
    "action_sft/cosmos3_forward_dynamics_droid.toml": "cosmos3_action",
    "policy_rl/tiny_reach2d_nft.toml": "cosmos3_action",
}


def write_robot_stand_in(root):
    """One LeRobot dataset with the cameras and columns the action recipes read (LIBERO's and DROID's names and
    widths), one episode long enough for DROID's 32-action chunk."""
    import numpy as np

    from cosmos_train.data.lerobot import write_lerobot_dataset

    rng, frames = np.random.default_rng(0), 34
    cameras = [
        "observation.images.image", "observation.images.wrist_image", "observation.image.wrist_image_left",
        "observation.image.exterior_image_1_left", "observation.image.exterior_image_2_left",
    ]  # fmt: skip
    widths = {
        "action": 7, "action.joint_position": 7, "action.gripper_position": 1,
        "observation.state.joint_positions": 7, "observation.state.gripper_position": 1,
        "observation.state.cartesian_position": 6,
    }  # fmt: skip
    episode = {
        "task": "put the bowl on the plate",
        "frames": {camera: rng.integers(0, 256, (frames, 16, 16, 3), dtype=np.uint8) for camera in cameras},
        "columns": {
            name: rng.standard_normal((frames, width)).astype(np.float32) for name, width in widths.items()
        },
    }
    return write_lerobot_dataset(root, [episode], fps=15)


def _name(recipe) -> str:
    return f"{recipe.parent.name}/{recipe.name}"


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory, tiny_pipeline):
    """{make-tiny kind: folder} for the recipes' families, and short video pairs."""
    from diffusion_helpers import write_video_pairs

    root = tmp_path_factory.mktemp("stand-ins")
    folders = {}
    for kind in sorted(set(STAND_IN_MODELS.values())):
        family = tiny.PIPELINE_KINDS.get(kind)
        folders[kind] = tiny_pipeline(family) if family else tiny.save_tiny_model(kind, root / kind)
    folders["video_pairs"] = write_video_pairs(root / "video_pairs", frames=9, size=16)
    folders["lerobot"] = write_robot_stand_in(root / "lerobot")
    return folders


def _stand_ins(recipe, stand_ins) -> list[str]:
    """`--set` overrides for what a recipe needs and this machine lacks: its model (the tiny one of its family),
    its data (local files, or a hub dataset that validate-config would download), a multi-GPU backend, and vLLM
    (not in this env). Video data is replaced by 9-frame clips."""
    job = tomllib.loads(recipe.read_text())
    kind = STAND_IN_MODELS[_name(recipe)]
    values = {"model.name_or_path": stand_ins[kind], "launch.backend": "ddp"}
    if kind == "cosmos_predict2_5":
        values["model.trust_remote_code"] = "true"  # the tiny one ships its stand-in safety checker's code
    # A policy-rl recipe names its base and environment beside the repository; only its model stands in.
    if recipe in TINY_RECIPES or recipe in TRAINED_ELSEWHERE or job.get("kind") == "policy-rl":
        return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    if "eval" in job:  # held-out prompts
        values["eval.path"] = REPO / "examples" / "data" / "prompts" / "colors.txt"
    if job.get("kind") == "action-sft":
        values["data.path"] = stand_ins["lerobot"]
    for section in ("data",) if job.get("kind") != "action-sft" else ():
        pairs = job.get(section, {})
        if job.get("kind") in ("nft", "flow-grpo") and section == "data":
            values["data.path"] = REPO / "examples" / "data" / "prompts" / "colors.txt"
        elif "height" in pairs:  # image/video pairs
            video = "num_frames" in pairs
            values[f"{section}.path"] = (
                stand_ins["video_pairs"] if video else REPO / "examples" / "data" / "pairs"
            )
            values[f"{section}.format"] = "folder"
            # The stand-in's size: a tiny transformer positions far fewer patches than the real checkpoint.
            values[f"{section}.height"] = values[f"{section}.width"] = 32
            if video:
                values[f"{section}.num_frames"] = 9
        elif section == "data":
            values |= {"data.path": SHAPES / "llava.json", "data.format": "llava", "data.media_dir": SHAPES}
    if job.get("kind") == "grpo":
        values["train.use_vllm"] = "false"
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def test_every_recipe_has_a_stand_in_model():
    assert sorted(STAND_IN_MODELS) == sorted(_name(recipe) for recipe in RECIPES)


@pytest.mark.parametrize("recipe", RECIPES, ids=_name)
def test_recipe_validates(recipe, stand_ins):
    """Every recipe validates, model and data included, with a tiny model of its family and stand-in data
    where it names a real checkpoint and data this machine lacks."""
    result = CliRunner().invoke(app, ["validate-config", str(recipe), *_stand_ins(recipe, stand_ins)])
    assert result.exit_code == 0, result.output
    assert f"ok ({kind_of(recipe)} job)" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(TINY_RECIPES), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_tiny_recipe_trains_as_shipped(tmp_path, recipe):
    """Through the real console script; the tiny model is built in process (`make-tiny` does the same)."""
    kind = kind_of(recipe)
    model = tiny.save_tiny_model(TINY_RECIPES[recipe], tmp_path / "model")
    run = tmp_path / "run"
    result = cli(
        kind, "-c", recipe, "--set", f"model.name_or_path={model}", "--set", f"train.output_dir={run}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = json.loads((checkpoints[-1] / "trainer_state.json").read_text())["log_history"]
    if kind == "sft":
        losses = [entry["loss"] for entry in history if "loss" in entry]
        assert len(losses) == 6 and losses[-1] < 0.8 * losses[0], losses
        assert (run / "adapter_config.json").is_file()
    elif kind in ("nft", "flow-grpo", "ddrl"):
        rewards = [entry["reward"] for entry in history if "reward" in entry]
        assert len(rewards) >= 5 and rewards[-1] > rewards[0], rewards
        step = checkpoints[-1].name.split("-")[1]
        assert (run / "safetensors" / f"step_{step}").is_dir()
    elif kind == "diffusion-sft":
        losses = [entry["loss"] for entry in history if "loss" in entry]
        assert len(losses) == 6 and all(loss == loss for loss in losses), losses
        step = checkpoints[-1].name.split("-")[1]
        assert (run / "safetensors" / f"step_{step}" / "lora" / "pytorch_lora_weights.safetensors").is_file()
        assert (run / "samples" / f"step_{step}" / "grid.png").is_file()
    else:
        rewards = [entry["reward"] for entry in history if "reward" in entry]
        assert len(rewards) == 20, rewards
        assert statistics.mean(rewards[-5:]) > statistics.mean(rewards[:5]) + 0.15, rewards
        assert (run / "model.safetensors").is_file()
    assert (run / "cosmos_train_job.toml").is_file()


def test_make_tiny_writes_a_loadable_model(tmp_path):
    result = CliRunner().invoke(app, ["make-tiny", "qwen3", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "m").config.model_type == "qwen3"


def test_make_tiny_refuses_unknown_kinds_and_existing_folders(tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(app, ["make-tiny", "llama", str(tmp_path / "m")])
    assert unknown.exit_code == 2 and f"expected one of {', '.join(tiny.KINDS)}" in unknown.stderr
    # Its help lists every kind it builds, each with its description.
    listed = runner.invoke(app, ["make-tiny", "--help"]).stdout
    assert all(kind in listed and description in listed for kind, description in tiny.KINDS.items())
    existing = runner.invoke(app, ["make-tiny", "qwen3", str(tmp_path)])
    assert existing.exit_code == 2 and "already exists" in existing.stderr


def test_a_copied_examples_folder_keeps_working(tmp_path, stand_ins):
    """`cp -r examples/ elsewhere`: no links to break, and the sample data equal the package's own copy."""
    import filecmp
    import shutil

    from cosmos_train.samples import pairs_dir, shapes_dir

    assert not [path for path in (REPO / "examples").rglob("*") if path.is_symlink()]
    for ours, packaged in (
        (REPO / "examples" / "data" / "pairs", pairs_dir()),
        (REPO / "examples" / "data" / "shapes", shapes_dir()),
    ):
        compared = filecmp.dircmp(ours, packaged)
        assert not (compared.left_only or compared.right_only or compared.diff_files), ours
        assert all(filecmp.cmp(ours / name, packaged / name, shallow=False) for name in compared.common_files)
    copy = shutil.copytree(REPO / "examples", tmp_path / "examples", symlinks=True)
    recipe = copy / "diffusion_sft" / "tiny_sd3_lora.toml"
    result = CliRunner().invoke(
        app, ["validate-config", str(recipe), "--set", f"model.name_or_path={stand_ins['sd3']}"]
    )
    assert result.exit_code == 0, result.output
