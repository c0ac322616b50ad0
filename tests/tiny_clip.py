"""A tiny random CLIP (model + processor) built offline from transformers' real classes and saved with
`save_pretrained`, for the scorer rewards' tests. The tokenizer is a byte-level BPE built in memory with the
`tokenizers` library; every sequence ends with `<|endoftext|>`, where CLIP's text tower pools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {symbol: index for index, symbol in enumerate(sorted(ByteLevel.alphabet()))}
    vocab["<|endoftext|>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.model_max_length = 32
    return tokenizer


def save_tiny_clip(folder: Path, seed: int = 0) -> Path:
    """A random CLIP (hidden 32, 2 layers, 16 x 16 images, 8-pixel patches) and its processor in `folder`."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    config = CLIPConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 32,
            "eos_token_id": eos,
            "pad_token_id": eos,
            "bos_token_id": eos,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 16,
            "patch_size": 8,
        },
        projection_dim=16,
    )
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    with torch.no_grad():  # random everywhere, so a misread tensor changes every score
        for parameter in model.parameters():
            parameter.normal_(0, 0.2)
        model.logit_scale.fill_(np.log(20.0))
    image_processor = CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
