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


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    """Tiny diffusers pipelines of cosmos-train's diffusion families, each saved once per session and only
    read by tests: `tiny_pipeline("sd3")` -> its folder."""
    from cosmos_train.tiny_pipelines import save_tiny_pipeline

    root, built = tmp_path_factory.mktemp("tiny-pipelines"), {}

    def get(family: str):
        if family not in built:
            built[family] = save_tiny_pipeline(family, root / family)
        return built[family]

    return get


@pytest.fixture
def one_torch_thread():
    """In-process training on one thread: two threads per process spin against each other on a busy
    2-core machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
