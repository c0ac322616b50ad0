"""`[train]` is validated from a snapshot of the TRL / transformers config classes' fields (`trainer_fields.json`),
so a malformed job is refused before torch, transformers and TRL import. The snapshot must be what the installed
classes give, and an installed version it was not taken from must fall back to the classes themselves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from cosmos_train.config import trainer_fields as tf
from cosmos_train.kinds import job_kinds

EXAMPLES = Path(__file__).parents[2] / "examples"
HEAVY = ("torch", "transformers", "trl", "diffusers", "deepspeed", "accelerate", "peft")


def test_the_snapshot_is_the_installed_classes():
    shipped = json.loads(tf.SNAPSHOT.read_text())
    assert shipped == tf.snapshot(), (
        "trainer_fields.json is stale for the installed trl / transformers: "
        "uv run python scripts/update-trainer-fields.py"
    )


@pytest.mark.parametrize("reference", tf.SNAPSHOT_CLASSES)
def test_annotations_survive_the_json(reference):
    """Decoding an encoded annotation gives one that encodes the same (nothing is lost on the way)."""
    for name, encoded in json.loads(tf.SNAPSHOT.read_text())["classes"][reference]:
        assert tf.encode(tf.decode(encoded)) == encoded, name


def test_another_installed_version_reads_the_classes(monkeypatch):
    """A snapshot taken from other versions is not used: the fields come from importing the class."""
    expected = tf.trainer_fields("trl:GRPOConfig")
    tf._snapshot_for_installed.cache_clear()
    monkeypatch.setattr(tf, "installed_versions", lambda: {"trl": "0.0.1", "transformers": "0.0.1"})
    imported = []
    real_import = tf._import
    monkeypatch.setattr(tf, "_import", lambda reference: imported.append(reference) or real_import(reference))
    try:
        assert [name for name, _ in tf.trainer_fields("trl:GRPOConfig")] == [name for name, _ in expected]
        assert imported == ["trl:GRPOConfig"]
    finally:
        tf._snapshot_for_installed.cache_clear()


def test_a_toml_value_cannot_be_a_class_the_field_takes():
    """`parallelism_config` takes an accelerate object: no job-file value is one, as with the class itself."""
    from pydantic import TypeAdapter, ValidationError

    fields = dict(tf.trainer_fields("transformers:TrainingArguments"))
    adapter = TypeAdapter(fields["parallelism_config"])
    assert adapter.validate_python(None) is None
    with pytest.raises(ValidationError, match="takes a ParallelismConfig object"):
        adapter.validate_python({"dp_replicate_size": 1})


def test_a_malformed_job_is_refused_before_the_heavy_imports(tmp_path):
    """Each kind's command and validate-config refuse a bad `[train]` value with torch, transformers, TRL and
    diffusers unimported (they take about 4 s to import on a 2-core machine; the refusal takes a fraction of one)."""
    examples = {}
    for path in sorted(EXAMPLES.rglob("*.toml")):
        examples.setdefault(tomllib.loads(path.read_text()).get("kind"), str(path))
    jobs = [(kind, examples[kind]) for kind in job_kinds()]
    script = textwrap.dedent(
        f"""
        import sys
        from typer.testing import CliRunner
        from cosmos_train.cli import build_app
        app = build_app()
        for kind, path in {jobs!r}:
            for command in (["validate-config", path], [kind, "-c", path]):
                result = CliRunner().invoke(app, [*command, "--set", "train.learning_rate=fast"])
                assert result.exit_code == 2, (command, result.output)
                assert "[train] learning_rate: Input should be a valid number" in result.output, result.output
        print(sorted(name for name in {HEAVY!r} if name in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_a_wrong_value_is_refused_before_the_model_is_looked_up(tmp_path, monkeypatch):
    """Family defaults need the pipeline's `model_index.json` (a download for a hub id, retried for ~25 s offline);
    a wrong value or an unknown key is refused first, since no default can change it."""
    import cosmos_train.model_sources as model_sources
    from cosmos_train.config import ConfigError
    from cosmos_train.jobs import read_job

    looked_up = []
    monkeypatch.setattr(
        model_sources, "pipeline_index", lambda *args, **kwargs: looked_up.append(args) or 1 / 0
    )
    job = EXAMPLES / "diffusion_rl" / "tiny_sd3_nft.toml"
    for override, message in (
        ("train.learning_rate=fast", "[train] learning_rate: Input should be a valid number"),
        ("rollout.heigth=64", "[rollout] unknown key 'heigth' (did you mean 'height'?)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            read_job(job, [override, "model.name_or_path=some-org/some-pipeline"], kind="nft")
    assert looked_up == []
