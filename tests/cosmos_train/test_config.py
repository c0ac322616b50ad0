"""Job files: the shared job base (kinds, schemas, paths, overrides, the effective record) and the SFT
schema's mapping onto TRL's SFTConfig. The malformed-job fuzz is in test_config_fuzz.py, a toy algorithm added
through the registry in test_registry.py."""

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field
from transformers import TrainingArguments
from typer.testing import CliRunner

from cosmos_train import config as job_config
from cosmos_train import tiny_models as tiny
from cosmos_train.cli import app
from cosmos_train.config import ConfigError, JobPath, JobSchema, ModelSection, Section, trainer_section
from cosmos_train.jobs import read_job
from cosmos_train.kinds import JobKind, job_kinds, register, unregister

GOOD = """
[model]
name_or_path = "model"
freeze = ["vision"]

[lora]
r = 8

[data]
format = "llava"
path = "data/llava.json"
media_dir = "data"

[train]
output_dir = "runs/x"
learning_rate = 1e-3
max_steps = 5

[launch]
backend = "zero2"
"""


LLAVA = '[{"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]}]'


def _write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "llava.json").write_text(LLAVA)
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")  # a model folder: its weights are never read here
    path = tmp_path / name
    path.write_text(text)
    return path


READ_ONLY = r"""
import sys
import torch.distributed as dist
from transformers.integrations import is_deepspeed_zero3_enabled
from cosmos_train.jobs import read_job
from cosmos_train import memory

job = read_job(sys.argv[1])
read, backend = memory.read_job(sys.argv[1])
estimate = memory.estimate(read, 2, backend)
print("STATE", is_deepspeed_zero3_enabled(), dist.is_initialized(), job.settings.deepspeed, job.config.launch.backend)
"""


def test_reading_a_zero3_job_sets_no_process_wide_state(tmp_path):
    """Reading a ZeRO-3 job (and estimating its memory) leaves transformers' DeepSpeed config and torch's process
    group alone: the trainer config with the backend's settings (`Job.args`) is built when a run asks for it."""
    text = GOOD.replace('backend = "zero2"', 'backend = "zero3"').replace('freeze = ["vision"]\n', "")
    path = _write(tmp_path, 'kind = "sft"\n' + text)
    tiny.save_tiny_text_lm(tmp_path / "model")
    result = subprocess.run([sys.executable, "-c", READ_ONLY, str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    state = next(line for line in result.stdout.splitlines() if line.startswith("STATE"))
    assert state == "STATE False False None zero3", state


def _error(tmp_path, text, overrides=None, kind="sft") -> str:
    with pytest.raises(ConfigError) as info:
        read_job(_write(tmp_path, text), overrides, kind)
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "job.toml") in message or message.startswith("--set")
    return message


def test_good_job_maps_onto_sft_config(tmp_path):
    job = read_job(_write(tmp_path, GOOD), kind="sft")
    assert job.kind.name == "sft" and job.config.kind == "sft"  # no `kind` key: the command's kind
    args = job.args
    assert args.learning_rate == 1e-3 and args.max_steps == 5
    assert args.assistant_only_loss is False  # cosmos-train masks the loss itself ([data] train_on)
    assert args.deepspeed.endswith("zero2.json") and Path(args.deepspeed).is_file()
    # Relative paths are relative to the job file.
    assert args.output_dir == str(tmp_path / "runs" / "x")
    assert job.config.data.path == str(tmp_path / "data" / "llava.json")
    assert job.config.model.name_or_path == str(tmp_path / "model")  # a folder beside the job file
    # On this CPU-only machine the job defaults to use_cpu (else each launched process trains alone).
    assert args.use_cpu is True and args.bf16 is False
    assert read_job(_write(tmp_path, GOOD), ["train.use_cpu=false"], "sft").args.use_cpu is False


def test_train_on_is_a_data_choice_not_a_trl_switch(tmp_path):
    assert read_job(_write(tmp_path, GOOD), ["data.train_on=all"], "sft").config.data.train_on == "all"
    assert "[train] assistant_only_loss is set by the job" in _error(
        tmp_path, GOOD, ["train.assistant_only_loss=true"]
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("r = 8", "rank = 8"), "[lora] unknown key 'rank' (did you mean 'r'?)"),
        (
            GOOD.replace("media_dir", "media_folder"),
            "[data] unknown key 'media_folder' (did you mean 'media_dir'?)",
        ),
        (
            GOOD.replace("learning_rate", "learning_rat"),
            "[train] unknown key 'learning_rat' (did you mean 'learning_rate'?)",
        ),
        (GOOD.replace("[launch]", "[lanch]"), "unknown section [lanch] (did you mean 'launch'?)"),
        (GOOD.replace('backend = "zero2"', 'backend = "zero4"'), "[launch] backend"),
        (GOOD.replace('format = "llava"', 'format = "csv"'), "[data] format"),
        (GOOD.replace('name_or_path = "model"', ""), "[model] missing key 'name_or_path'"),
        (GOOD.replace('output_dir = "runs/x"', ""), "[train] missing key 'output_dir'"),
        (GOOD.replace("max_steps = 5", "max_length = 5"), "[train] max_length is set by the job"),
        (GOOD + "\n[extra]\n", "unknown section [extra]"),
        ("[model\n", "invalid TOML"),
        (GOOD.replace('"zero2"', '"zero2"\n[train.x]'), "[train] unknown key 'x'"),
        ('kind = "grpo"\n' + GOOD, "kind 'grpo' is not a sft job; run `cosmos-train grpo` instead"),
        (GOOD.replace('"vision"', '"(vision"'), "[model] freeze: '(vision' is not a valid regex"),
        (GOOD.replace("max_steps = 5", 'lr_scheduler_type = "cosin"'), "(did you mean 'cosine'?)"),
        (
            GOOD.replace('path = "data/llava.json"', 'path = "nope.json"'),
            "[data] path nope.json does not exist",
        ),
    ],
)
def test_bad_jobs_name_file_section_and_key(tmp_path, text, expected):
    assert expected in _error(tmp_path, text)


def test_overrides_apply_and_are_validated(tmp_path):
    job = read_job(
        _write(tmp_path, GOOD), ["train.max_steps=7", "lora.r=4", "data.system_prompt=Be brief."], "sft"
    )
    assert job.config.train.max_steps == 7 and job.args.max_steps == 7 and job.config.lora.r == 4
    assert job.config.data.system_prompt == "Be brief."
    assert "[train] unknown key 'max_stepz'" in _error(tmp_path, GOOD, ["train.max_stepz=1"])
    assert "[train] max_steps: Input should be a valid integer" in _error(
        tmp_path, GOOD, ["train.max_steps=ten"]
    )
    assert "section.key=value" in _error(tmp_path, GOOD, ["max_steps"])


def test_the_job_record_is_the_effective_job_and_reruns_identically(tmp_path):
    """The record saved with a run holds --set values and absolute paths, and reads back to the same job."""
    job = read_job(_write(tmp_path, GOOD), ["train.max_steps=7", "data.system_prompt=Be brief."], "sft")
    record = job.record()
    values = tomllib.loads(record)
    assert values["kind"] == "sft" and values["train"]["max_steps"] == 7
    assert values["data"]["system_prompt"] == "Be brief."
    assert values["data"]["path"] == str(tmp_path / "data" / "llava.json")
    assert values["train"]["output_dir"] == str(tmp_path / "runs" / "x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "record.toml").write_text(record)
    again = read_job(elsewhere / "record.toml")  # its kind is in it; absolute paths: any folder will do
    assert again.config == job.config
    assert again.args.to_dict() == job.args.to_dict()


def _cli(*args, cwd=None):
    exe = Path(sys.executable).with_name("cosmos-train")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_validate_config_command(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["validate-config", str(_write(tmp_path, 'kind = "sft"\n' + GOOD))])
    assert ok.exit_code == 0, ok.output
    assert "ok (sft job)" in ok.stdout
    ok = runner.invoke(app, ["validate-config", "--kind", "sft", str(_write(tmp_path, GOOD))])
    assert ok.exit_code == 0 and "ok (sft job)" in ok.stdout, ok.output
    unnamed = runner.invoke(app, ["validate-config", str(_write(tmp_path, GOOD))])
    assert unnamed.exit_code == 2 and "no kind: add a top-level kind" in unnamed.stderr, unnamed.output
    missing = runner.invoke(
        app, ["validate-config", "--kind", "sft", str(_write(tmp_path, GOOD)), "--set", "data.path=nope.json"]
    )
    assert missing.exit_code == 2 and "nope.json does not exist" in missing.stderr
    # The real console script: exit code 2, one line on stderr, no traceback.
    bad = _cli("validate-config", "--kind", "sft", _write(tmp_path, GOOD.replace("r = 8", "rank = 8")))
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "did you mean 'r'" in bad.stderr
    assert "Traceback" not in bad.stderr


# A second trainer's schema, as a new trainer file would declare it: the job base must serve it unchanged.
class ToySection(Section):
    weights: Annotated[str, JobPath()]
    base: Annotated[str, JobPath(hub_id=True)] = "org/base-model"
    steps: int = Field(1, gt=0)


class ToyJob(JobSchema):
    model: ModelSection
    toy: ToySection
    train: trainer_section(TrainingArguments, name="ToyTrain", overrides={"output_dir": (str, ...)})

    def training_arguments(self, source, launch=True):
        return job_config.build_training_arguments(TrainingArguments, self.train, source)


TOY = """kind = "toy"
[model]
name_or_path = "model"
[toy]
weights = "w.safetensors"
base = "base"
[train]
output_dir = "out"
learning_rate = 0.5
"""


@pytest.fixture
def toy_kind():
    register(
        JobKind("toy", schema=f"{__name__}:ToyJob", run=f"{__name__}:ToyJob", family="language", help="Toy.")
    )
    yield
    unregister("toy")
    assert "toy" not in job_kinds()


def test_any_registered_schema_gets_paths_errors_and_validate_config(tmp_path, toy_kind):
    (tmp_path / "base").mkdir()
    job = read_job(_write(tmp_path, TOY))
    assert isinstance(job.config, ToyJob) and isinstance(job.args, TrainingArguments)
    assert job.config.toy.weights == str(tmp_path / "w.safetensors")  # marked path: always resolved
    assert job.config.toy.base == str(tmp_path / "base")  # hub id or path: resolved when it exists
    assert job.args.output_dir == str(tmp_path / "out") and job.args.learning_rate == 0.5
    (tmp_path / "base").rmdir()
    assert read_job(_write(tmp_path, TOY)).config.toy.base == "base"  # no such folder: kept as a hub id

    assert "[toy] steps: Input should be greater than 0 (got 0)" in _error(
        tmp_path, TOY, ["toy.steps=0"], None
    )
    assert "[toy] unknown key 'step' (did you mean 'steps'?)" in _error(tmp_path, TOY, ["toy.step=1"], None)
    assert "[train] per_device_train_batch_size: Input should be greater than 0" in _error(
        tmp_path, TOY, ["train.per_device_train_batch_size=0"], None
    )
    assert "unknown section [data]" in _error(tmp_path, TOY, ["data.path=x"], None)

    runner = CliRunner()
    result = runner.invoke(app, ["validate-config", str(_write(tmp_path, TOY))])
    assert result.exit_code == 0 and "ok (toy job)" in result.stdout, result.output
    # A trainer's command refuses a job of another kind, naming the right command.
    result = runner.invoke(app, ["sft", "-c", str(_write(tmp_path, TOY))])
    assert result.exit_code == 2
    assert "kind 'toy' is not a sft job; run `cosmos-train toy` instead" in result.stderr
