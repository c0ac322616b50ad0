"""Greedy-generation reference shared by the vLLM tests (imported from tests/, which is on pytest's path)."""

import torch

PROMPTS = [
    "Hello world",
    "The cat sat on the",
    "<|im_start|>user\nWhat is Cosmos?<|im_end|>\n<|im_start|>assistant\n",
]
NEW_TOKENS = 12


def transformers_greedy(model, prompt_ids):
    """Greedy tokens past any EOS (as vLLM's `ignore_eos`), and the smallest top-1/top-2 logit gap met."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=0)
    # transformers fills a None `eos_token_id` from the model's generation config (a saved folder has one).
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            generation_config=config,
            output_scores=True,
            return_dict_in_generate=True,
        )
    gap = min((scores.topk(2).values[0, 0] - scores.topk(2).values[0, 1]).item() for scores in out.scores)
    tokens = out.sequences[0, len(prompt_ids) :].tolist()
    assert len(tokens) == NEW_TOKENS
    return tokens, gap
