"""Greedy generation through vLLM from a raw framework checkpoint equals transformers' greedy output."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

from vllm_helpers import NEW_TOKENS, PROMPTS, transformers_greedy

from vllm_cosmos3 import ANY_LAYOUT_ARCH


def test_vllm_greedy_matches_transformers(tiny_reasoner, checkpoints):
    from vllm import LLM, SamplingParams

    model, tokenizer = tiny_reasoner
    prompts = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    expected = []
    for ids in prompts:
        tokens, gap = transformers_greedy(model, ids)
        # Ties would make the comparison depend on float rounding rather than on the weights.
        assert gap > 1e-4, f"near-tie in the reference ({gap}); pick other prompts"
        expected.append(tokens)

    # Text only: vLLM then builds the text tower alone (test_vllm_loading covers the ViT).
    llm = LLM(
        model=str(checkpoints["framework"]),
        hf_overrides={"architectures": [ANY_LAYOUT_ARCH]},
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
        enforce_eager=True,
        limit_mm_per_prompt={"image": 0, "video": 0},
        seed=0,
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    generated = [list(output.outputs[0].token_ids) for output in outputs]
    assert generated == expected
