"""vLLM's own Cosmos3 Edge class reads the Edge diffusers export this project writes.

This is what `cosmos3-convert --to vllm` advises for Edge (which has no separate vLLM layout): the
export's tensors reach the right vLLM parameters, checked by value against the transformers reasoner.
"""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import torch


@pytest.fixture(scope="module")
def loaded(vllm_state, edge_export):
    model, folder = edge_export
    native_arch = {"architectures": ["Cosmos3EdgeForConditionalGeneration"]}  # vLLM's own class, not ours
    return model.state_dict(), vllm_state(folder, hf_overrides=native_arch)


def test_text_tower_reaches_vllm_by_value(loaded):
    native, state = loaded
    embed = native["model.language_model.embed_tokens.weight"]
    assert torch.equal(state["language_model.model.embed_tokens.weight"][: embed.shape[0]], embed)
    assert torch.equal(state["language_model.lm_head.weight"][: embed.shape[0]], native["lm_head.weight"])
    # vLLM splits each checkpoint layer into an attention layer (2N) and an MLP layer (2N + 1).
    for n in range(2):
        fc1 = native[f"model.language_model.layers.{n}.mlp.fc1.weight"]
        assert torch.equal(state[f"language_model.model.layers.{2 * n + 1}.mixer.up_proj.weight"], fc1)
        qkv = torch.cat([native[f"model.language_model.layers.{n}.self_attn.{x}_proj.weight"] for x in "qkv"])
        assert torch.equal(state[f"language_model.model.layers.{2 * n}.mixer.qkv_proj.weight"], qkv)


def test_vision_tower_and_projector_reach_vllm_by_value(loaded):
    native, state = loaded
    projector = native["model.projector.linear_fc1.weight"]
    assert torch.equal(state["visual.projector.linear_fc1.weight"], projector)
    vision = [name for name in state if name.startswith("visual.encoder.")]
    assert vision and all(state[name].numel() for name in vision)
