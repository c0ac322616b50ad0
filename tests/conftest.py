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


@pytest.fixture(scope="session")
def edge_layouts(tmp_path_factory):
    """{layout: folder} for one tiny Cosmos3 Edge model (relu2 text MLP, SigLIP2 ViT)."""
    from diffusers_cosmos3 import testing as tiny

    return tiny.save_tiny_cosmos3_layouts(tmp_path_factory.mktemp("tiny-edge"), family="cosmos3_edge")


@pytest.fixture(scope="session")
def family_layouts(tiny_layouts, edge_layouts):
    """{reasoner family: {layout: folder}}: Nano-shaped (`cosmos3_omni`) and Edge (`cosmos3_edge`)."""
    return {"cosmos3_omni": tiny_layouts, "cosmos3_edge": edge_layouts}
