"""One registry of job kinds: a new algorithm is its own files plus one entry (`tests/toy_algorithm/`), and then
has a command, validates, trains through the shared run function, and exports, with no edit to cosmos-train. A
kind may also be named by a dotted path in the job file or come from an installed package's entry point, and a
model adapter by a dotted path. (The fuzz suite covers a registered kind too: test_config_fuzz.py.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
from diffusion_helpers import model_section
from sft_helpers import REPO
from toy_algorithm import TOY_KIND
from typer.testing import CliRunner

from cosmos_train.cli import build_app
from cosmos_train.jobs import read_job
from cosmos_train.kinds import job_kinds, register, unregister

PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def toy_registered():
    register(TOY_KIND)
    yield TOY_KIND
    unregister(TOY_KIND.name)


def toy_job(folder: Path, model: Path, kind: str | None = "toy-rl", steps: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = (f'kind = "{kind}"\n' if kind else "") + model_section(model)
    text += "[lora]\nr = 4\nalpha = 16\n"
    text += f'[data]\npath = "{PROMPTS}"\n[rewards]\nbrightness = 1.0\n'
    text += "[rollout]\nsamples_per_prompt = 2\nsampling_steps = 2\ntrain_batch_size = 4\nheight = 32\nwidth = 32\n"
    text += "max_sequence_length = 16\n[toy]\ntimesteps = 1\nema_decay = 0.5\n"
    text += f'[train]\noutput_dir = "{folder / "run"}"\nlearning_rate = 1e-3\nmax_steps = {steps}\n'
    text += 'per_device_train_batch_size = 2\nsave_steps = 1\nlogging_steps = 1\nreport_to = "none"\n'
    (folder / "job.toml").write_text(text)
    return folder / "job.toml"


def test_a_registered_algorithm_has_a_command_validates_trains_and_exports(
    tmp_path, tiny_pipeline, toy_registered
):
    model = tiny_pipeline("sd3")
    app = build_app()
    runner = CliRunner()
    assert "toy-rl" in runner.invoke(app, ["--help"]).stdout
    assert "reward-weighted flow matching" in runner.invoke(app, ["toy-rl", "--help"]).stdout

    job = toy_job(tmp_path, model, kind=None)  # the command names the kind
    checked = runner.invoke(app, ["validate-config", "--kind", "toy-rl", str(job)])
    assert checked.exit_code == 0 and "ok (toy-rl job)" in checked.stdout, checked.output
    trained = runner.invoke(app, ["toy-rl", "-c", str(job)])
    assert trained.exit_code == 0, trained.output
    run = tmp_path / "run"
    assert tomllib.loads((run / "cosmos_train_job.toml").read_text())["kind"] == "toy-rl"
    assert (run / "checkpoint-2" / "ema.safetensors").is_file()

    exported = runner.invoke(app, ["export", str(run), str(tmp_path / "export")])
    assert exported.exit_code == 0, exported.output
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(model)
    pipe.load_lora_weights(tmp_path / "export" / "lora")
    assert any("lora" in name for name, _ in pipe.transformer.named_parameters())


def test_a_kind_named_by_a_dotted_path_runs_with_cosmos_train_run(tmp_path, tiny_pipeline):
    """No registration at all: the job file names the entry, and its record keeps the name for export."""
    assert "toy-rl" not in job_kinds()
    job = toy_job(tmp_path, tiny_pipeline("sd3"), kind="toy_algorithm:TOY_KIND", steps=1)
    assert read_job(job).kind.trainer_class().__name__ == "ToyTrainer"
    app = build_app()
    trained = CliRunner().invoke(app, ["run", "-c", str(job)])
    assert trained.exit_code == 0, trained.output
    record = tomllib.loads((tmp_path / "run" / "cosmos_train_job.toml").read_text())
    assert record["kind"] == "toy_algorithm:TOY_KIND"
    exported = CliRunner().invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "export")])
    assert exported.exit_code == 0 and (tmp_path / "export" / "lora").is_dir(), exported.output

    wrong = toy_job(tmp_path / "wrong", tiny_pipeline("sd3"), kind="toy_algorithm:NO_SUCH_KIND")
    result = CliRunner().invoke(app, ["run", "-c", str(wrong)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "kind 'toy_algorithm:NO_SUCH_KIND': toy_algorithm has no 'NO_SUCH_KIND'" in result.stderr


def test_an_installed_packages_entry_point_adds_a_command(tmp_path, monkeypatch):
    """A package that declares `[project.entry-points."cosmos_train.kinds"]` gets its command: here a
    distribution's metadata on sys.path, as pip would install it."""
    info = tmp_path / "toy_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cosmos_train.kinds]\ntoy-rl = toy_algorithm:TOY_KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert job_kinds()["toy-rl"] is TOY_KIND
    help_text = CliRunner().invoke(build_app(), ["--help"]).stdout
    assert "toy-rl" in help_text and "Toy RL" in help_text


def test_a_broken_plugin_is_skipped_with_a_warning(tmp_path, monkeypatch, caplog):
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cosmos_train.kinds]\nbroken = no_such_plugin_module:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = job_kinds()
    assert "broken" not in kinds and "sft" in kinds
    assert "skipping job kind broken from no_such_plugin_module:KIND" in caplog.text


def test_an_adapter_named_by_a_dotted_path_is_the_one_used(tmp_path, tiny_pipeline):
    from cosmos_train.algorithms.diffusion.trainer import load_for_training
    from cosmos_train.config import ConfigError

    job = toy_job(tmp_path, tiny_pipeline("sd3"), kind="toy_algorithm:TOY_KIND")
    text = job.read_text().replace(
        "[lora]", 'adapter = "toy_algorithm.toy_adapter:CountingSD3Adapter"\n[lora]', 1
    )
    job.write_text(text)
    adapter, _ = load_for_training(read_job(job))
    assert type(adapter).__name__ == "CountingSD3Adapter"
    with torch.no_grad():
        adapter.encode_prompts(["a red square"])
    assert adapter.prompts_encoded == 1

    job.write_text(text.replace("CountingSD3Adapter", "NoSuchAdapter"))
    with pytest.raises(ConfigError, match=r"\[model\] adapter 'toy_algorithm.toy_adapter:NoSuchAdapter'"):
        read_job(job)
