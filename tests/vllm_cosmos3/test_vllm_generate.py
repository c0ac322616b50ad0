"""Greedy generation through vLLM from a raw framework checkpoint equals transformers' greedy output."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here; run scripts/test-vllm.sh (builds .venv-vllm)")

import torch

from vllm_cosmos3 import ANY_LAYOUT_ARCH

PROMPTS = [
    "Hello world",
    "The cat sat on the",
    "<|im_start|>user\nWhat is Cosmos?<|im_end|>\n<|im_start|>assistant\n",
]
NEW_TOKENS = 12


def transformers_greedy(model, prompt_ids):
    """Greedy tokens, and the smallest top-1/top-2 logit gap met on the way."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            generation_config=config,
            output_scores=True,
            return_dict_in_generate=True,
        )
    gap = min((scores.topk(2).values[0, 0] - scores.topk(2).values[0, 1]).item() for scores in out.scores)
    return out.sequences[0, len(prompt_ids) :].tolist(), gap


def test_vllm_greedy_matches_transformers(tiny_reasoner, checkpoints):
    from vllm import LLM, SamplingParams

    model, tokenizer = tiny_reasoner
    prompts = [tokenizer(prompt).input_ids for prompt in PROMPTS]
    expected = []
    for ids in prompts:
        tokens, gap = transformers_greedy(model, ids)
        # Ties would make the comparison depend on float rounding rather than on the weights.
        assert gap > 1e-4, f"near-tie in the reference ({gap}); pick other prompts"
        assert len(tokens) == NEW_TOKENS
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
