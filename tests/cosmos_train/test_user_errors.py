"""What a new user trips on (issue 32), each refused or explained in one line naming the file, section or key:
a misspelt section, an output_dir that is a file, a reward module that does not import, `export --overwrite` onto
a folder that is not an export, a truncated weights file in a checkpoint (export names it; resume passes over it
and says so), and diffusion model cards that carry absolute paths and their job."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from sft_helpers import cli_in_process

from cosmos_train.checkpoints import latest_complete_checkpoint, mark_complete

JOB = """kind = "{kind}"
[model]
name_or_path = "model"
[data]
format = "llava"
path = "data.json"
media_dir = "."
{rewards}[train]
output_dir = "{output_dir}"
max_steps = 2
report_to = "none"
"""
LLAVA = '[{"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]}]'


def _job(folder: Path, kind: str = "sft", output_dir: str = "run", rewards: str = "") -> Path:
    """A job that passes validate-config: a model folder found by its config (validate-config loads no weights)."""
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "data.json").write_text(LLAVA)
    job = folder / "job.toml"
    job.write_text(JOB.format(kind=kind, output_dir=output_dir, rewards=rewards))
    return job


def _one_line(result, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, (
        result.stderr
    )
    return lines[0]


# --- 1. a misspelt section -----------------------------------------------------------------------------------


def test_a_misspelt_section_gets_a_did_you_mean_in_the_file_as_with_set(tmp_path):
    job = _job(tmp_path)
    assert cli_in_process("validate-config", job).returncode == 0
    job.write_text(job.read_text().replace("[train]", "[trian]"))
    line = _one_line(cli_in_process("validate-config", job))
    assert str(job) in line and "unknown section [trian]" in line and "did you mean 'train'" in line, line
    job.write_text(job.read_text().replace("[trian]", "[train]"))
    line = _one_line(cli_in_process("validate-config", job, "--set", "trian.seed=1"))
    assert "unknown section [trian]" in line and "did you mean 'train'" in line, line


def test_a_missing_section_with_an_unrelated_extra_one_is_still_missing(tmp_path):
    job = _job(tmp_path)
    job.write_text(job.read_text().replace("[train]", "[zzzzz]"))
    line = _one_line(cli_in_process("validate-config", job))
    assert "missing section [train]" in line, line


# --- 2. an output_dir that is a file -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate-config", "sft"])
def test_an_output_dir_that_is_a_file_is_refused_before_the_run(tmp_path, command):
    (tmp_path / "results.txt").write_text("a file")
    for output_dir, says in (("results.txt", "is a file"), ("results.txt/run", "which is a file")):
        job = _job(tmp_path, output_dir=output_dir)
        args = ["validate-config", job] if command == "validate-config" else [command, "-c", job]
        line = _one_line(cli_in_process(*args))
        assert f"{job}: [train] output_dir {tmp_path / output_dir}" in line and says in line, line
    assert (tmp_path / "results.txt").read_text() == "a file"


# --- 3. a reward module that does not import ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "text", "says"),
    [
        (
            "user_reward_syntax",
            "def score(completions, **kw):\n    return [1.0 for c in completions\n",
            "line 2",
        ),
        ("user_reward_import", "import os\nimport no_such_dependency_zz\n", "No module named"),
        ("user_reward_from", "from os import no_such_name_zz\n", "cannot import name"),
    ],
)
def test_a_reward_module_that_fails_to_import_is_one_line_naming_its_file(tmp_path, module, text, says):
    (tmp_path / f"{module}.py").write_text(text)
    job = _job(tmp_path, kind="grpo", rewards=f'[rewards]\n"{module}:score" = 1.0\n')
    line = _one_line(cli_in_process("validate-config", job))
    assert f"[rewards] {module}:score" in line and f"{tmp_path / module}.py, line" in line and says in line, (
        line
    )


def test_load_reference_names_the_file_and_line_of_a_syntax_error(tmp_path, monkeypatch):
    from cosmos_train.errors import BadReferenceError
    from cosmos_train.references import load_reference

    (tmp_path / "syntax_on_path_zz.py").write_text("x = 1\ny = (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BadReferenceError, match=r"syntax_on_path_zz\.py, line 2"):
        load_reference("syntax_on_path_zz:x")


# --- 4. export --overwrite replaces only an export ------------------------------------------------------------


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("export loaded a model before refusing")

    monkeypatch.setattr("cosmos_train.export.load_model", refuse)
    monkeypatch.setattr("cosmos_train.diffusion.loading.load_adapter", refuse)


def _weights(path: Path, truncate: bool = False) -> Path:
    save_file({"weight": torch.zeros(64)}, str(path))
    if truncate:
        path.write_bytes(path.read_bytes()[:100])
    return path


def _language_checkpoint(folder: Path, truncate: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    _weights(folder / "model.safetensors", truncate)
    return folder


def _diffusion_checkpoint(folder: Path, truncate: bool = False) -> Path:
    """A diffusion run's checkpoint as export sees it before loading: its run's job record and its weights."""
    folder.mkdir(parents=True)
    (folder.parent / "cosmos_train_job.toml").write_text('kind = "nft"\n')
    _weights(folder / "model.safetensors", truncate)
    return folder


@pytest.mark.parametrize("make", [_language_checkpoint, _diffusion_checkpoint], ids=["language", "diffusion"])
def test_overwrite_refuses_a_folder_that_is_not_an_export(tmp_path, no_model_loading, make):
    checkpoint = make(tmp_path / "run" / "checkpoint-2")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    line = _one_line(cli_in_process("export", checkpoint, out, "--overwrite"))
    assert str(out) in line and "not a previous export" in line, line
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "precious"


def test_a_previous_export_is_recognised(tmp_path):
    from cosmos_train.export import check_destination, is_export

    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "README.md").write_text(
        "---\nlibrary_name: diffusers\nbase_model: x\ntags: [cosmos-train, nft]\n---\n"
    )
    (previous / "lora").mkdir()
    (tmp_path / "empty").mkdir()
    assert is_export(previous) and is_export(tmp_path / "empty")
    check_destination(previous, overwrite=True)
    (previous / "README.md").write_text("# my notes\n")
    assert not is_export(previous)
    with pytest.raises(FileExistsError, match="not a previous export"):
        check_destination(previous, overwrite=True)


# --- 5. diffusion model cards: absolute paths, and the job ---------------------------------------------------


@pytest.mark.usefixtures("one_torch_thread")
def test_a_diffusion_lora_card_has_absolute_paths_and_the_job(tmp_path, tiny_pipeline, monkeypatch):
    from diffusion_rl_helpers import write_rl_job
    from safetensors.torch import save_model

    from cosmos_train.config import LoraSection, PipelineSection
    from cosmos_train.diffusion.loading import load_adapter, prepare_training
    from cosmos_train.jobs import JOB_RECORD, read_job

    job = read_job(write_rl_job(tmp_path, tiny_pipeline("sd3"), kind="nft"))
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    (run / JOB_RECORD).write_text(job.record())
    # The checkpoint's weights as a run saves them: the transformer with its LoRA, as export rebuilds it.
    adapter = load_adapter(PipelineSection.model_validate(job.config.model.model_dump()))
    prepare_training(adapter, LoraSection.model_validate(job.config.lora.model_dump()))
    save_model(adapter.transformer, str(checkpoint / "model.safetensors"))

    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second time over the first export, which --overwrite replaces
        result = cli_in_process("export", "run/checkpoint-1", "exported", "--overwrite")
        assert result.returncode == 0, result.stderr
    card = (tmp_path / "exported" / "README.md").read_text()
    assert f'"{tmp_path / "exported" / "lora"}"' in card, card
    assert '"exported/lora"' not in card and f'from_pretrained("{tiny_pipeline("sd3")}")' in card, card
    assert "## Training job" in card and job.record() in card, card


# --- 6 and 7. a truncated weights file: export names it, resume passes over it and says so ---------------------


@pytest.mark.parametrize("make", [_language_checkpoint, _diffusion_checkpoint], ids=["language", "diffusion"])
def test_export_names_a_truncated_weights_file(tmp_path, no_model_loading, make):
    checkpoint = make(tmp_path / "run" / "checkpoint-2", truncate=True)
    line = _one_line(cli_in_process("export", checkpoint, tmp_path / "out"))
    assert f"{checkpoint / 'model.safetensors'}: unreadable weights file" in line, line
    assert not (tmp_path / "out").exists()


class _Trainer:
    """What `train_and_save` asks of a trainer, recording where it resumed from."""

    def __init__(self):
        self.accelerator = SimpleNamespace(
            is_main_process=True, num_processes=1, wait_for_everyone=lambda: None
        )
        self.resumed_from = "not called"

    def train(self, resume_from_checkpoint=None):
        self.resumed_from = resume_from_checkpoint

    def save_model(self, output_dir):
        pass


def _resume(output_dir: Path, caplog) -> tuple[str | None, str]:
    from cosmos_train.algorithms.common import train_and_save

    job = SimpleNamespace(
        args=SimpleNamespace(output_dir=str(output_dir)),
        config=SimpleNamespace(train=SimpleNamespace(resume_from_checkpoint=True)),
        record=lambda: "# a job\n",
    )
    trainer = _Trainer()
    with caplog.at_level(logging.INFO, logger="cosmos_train"):
        train_and_save(trainer, job)
    return trainer.resumed_from, caplog.text


def _checkpoint(run: Path, step: int, complete: bool = True, truncate: bool = False) -> Path:
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    _weights(folder / "model.safetensors", truncate)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if complete:
        mark_complete(folder, step)
    return folder


def test_resume_passes_over_a_truncated_checkpoint_and_says_why(tmp_path, caplog):
    run = tmp_path / "run"
    good = _checkpoint(run, 2)
    truncated = _checkpoint(run, 4, truncate=True)
    assert latest_complete_checkpoint(run) == good
    resumed, log = _resume(run, caplog)
    assert resumed == str(good), log
    assert f"not resuming from {truncated}: unreadable {truncated / 'model.safetensors'}" in log, log
    assert f"resuming from {good}" in log, log


def test_resume_says_which_incomplete_checkpoints_it_skipped(tmp_path, caplog):
    run = tmp_path / "run"
    good = _checkpoint(run, 2)
    half_written = _checkpoint(run, 4, complete=False)
    resumed, log = _resume(run, caplog)
    assert resumed == str(good), log
    assert f"not resuming from {half_written}: no COMPLETE marker" in log, log
    assert f"resuming from {good}" in log, log
    from cosmos_train.checkpoints import resumable_checkpoint

    assert resumable_checkpoint(run) == (
        good,
        [(half_written, "no COMPLETE marker (its save did not finish)")],
    )
