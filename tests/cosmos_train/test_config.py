"""Job files: strict validation with one-line errors, overrides, and the validate-config command."""

import subprocess
import sys
from pathlib import Path

import pytest

from cosmos_train.config import ConfigError, load_job_config
from cosmos_train.jobs import read_job
from cosmos_train.trainers.sft_config import build_sft_config

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


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def _error(tmp_path, text, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        job = read_job(_write(tmp_path, text), overrides)
        build_sft_config(job.config, job.source)
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "job.toml") in message
    return message


def test_good_job_maps_onto_sft_config(tmp_path):
    job = read_job(_write(tmp_path, GOOD))
    args = build_sft_config(job.config, job.source)
    assert args.learning_rate == 1e-3 and args.max_steps == 5
    assert args.assistant_only_loss is True
    assert args.deepspeed.endswith("zero2.json") and Path(args.deepspeed).is_file()
    # Relative paths are relative to the job file.
    assert args.output_dir == str(tmp_path / "runs" / "x")
    assert job.config.data.path == str(tmp_path / "data" / "llava.json")
    assert job.config.model.name_or_path == "model"  # no such folder: kept as a hub id


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
    ],
)
def test_bad_jobs_name_file_section_and_key(tmp_path, text, expected):
    assert expected in _error(tmp_path, text)


def test_overrides_apply_and_are_validated(tmp_path):
    job = read_job(_write(tmp_path, GOOD), ["train.max_steps=7", "lora.r=4", "data.system_prompt=Be brief."])
    assert job.config.train["max_steps"] == 7 and job.config.lora.r == 4
    assert job.config.data.system_prompt == "Be brief."
    assert "[train] unknown key 'max_stepz'" in _error(tmp_path, GOOD, ["train.max_stepz=1"])
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        load_job_config(_write(tmp_path, GOOD), ["max_steps"])


def _cli(*args, cwd=None):
    exe = Path(sys.executable).with_name("cosmos-train")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_validate_config_command(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "llava.json").write_text("[]")
    ok = _cli("validate-config", _write(tmp_path, GOOD))
    assert ok.returncode == 0, ok.stderr
    bad = _cli("validate-config", _write(tmp_path, GOOD.replace("r = 8", "rank = 8")))
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "did you mean 'r'" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = _cli("validate-config", _write(tmp_path, GOOD), "--set", "data.path=nope.json")
    assert missing.returncode == 2 and "nope.json does not exist" in missing.stderr
