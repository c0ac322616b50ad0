"""Every job-file key says what it is, and the references made from those descriptions are current: each
command's `--help`, docs/job-files.md and the README's key tables."""

from __future__ import annotations

import pytest
from sft_helpers import REPO
from typer.testing import CliRunner

from cosmos_train.cli import app
from cosmos_train.config.reference import markdown, reference, with_key_tables
from cosmos_train.kinds import BUILTIN_KINDS

KINDS = {kind.name: kind for kind in BUILTIN_KINDS}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_key_and_section_is_described(kind):
    for section in reference(KINDS[kind].schema_class()):
        assert section.summary, (kind, section.name)
        for key in section.keys:
            assert key.description, (kind, section.name, key.name)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_commands_help_lists_its_job_keys(kind):
    help_text = CliRunner().invoke(app, [kind, "--help"]).stdout
    for section in reference(KINDS[kind].schema_class()):
        if section.name:
            assert f"[{section.name}]" in help_text, (kind, section.name)
        for key in section.keys:
            assert f"{key.name} (" in help_text and key.description[:40] in help_text, (kind, key.name)


def test_the_written_references_are_current():
    """Regenerate with `python -m cosmos_train.config.reference` when this fails."""
    assert (REPO / "docs" / "job-files.md").read_text() == markdown(KINDS)
    readme = (REPO / "README.md").read_text()
    assert readme.count("<!-- job-keys ") >= 4
    assert with_key_tables(readme, KINDS) == readme
