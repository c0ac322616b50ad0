"""Shared offline fixtures: the tiny Cosmos3 model in every checkpoint layout, built once per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session")
def tiny_layouts(tmp_path_factory):
    """{layout: folder} for one tiny Cosmos3 model with action heads."""
    from diffusers_cosmos3 import testing as tiny

    return tiny.save_tiny_cosmos3_layouts(tmp_path_factory.mktemp("tiny-cosmos3"), action=True)
