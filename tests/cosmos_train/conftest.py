"""Fixtures of the cosmos-train tests (the shims' tests never import cosmos_train)."""

import pytest


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    """Tiny diffusers pipelines of cosmos-train's diffusion families, each saved once per session and only
    read by tests: `tiny_pipeline("sd3")` -> its folder."""
    from cosmos_train.tiny_models.pipelines import save_tiny_pipeline

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
