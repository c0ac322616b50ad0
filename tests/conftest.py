"""Shared offline fixtures: the tiny Cosmos3 model in every checkpoint layout, built once per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


def pytest_collection_modifyitems(config, items):
    """For pytest-xdist's `--dist loadgroup` (scripts/test.sh runs `-n 2`): a module's tests share one worker, so its
    module fixtures are built once; the tests that launch two ranks share another, so that no two launches put four
    ranks on the machine at once; the slow tests start first."""
    if config.pluginmanager.hasplugin("xdist"):  # not in the vLLM environment
        for item in items:
            group = "two_ranks" if item.get_closest_marker("two_ranks") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
    # The slow tests first (a stable sort), so that the workers' last tests are short ones and they end together.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
