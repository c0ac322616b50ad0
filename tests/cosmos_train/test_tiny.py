import torch

from cosmos_train import tiny


def test_tokenizer_has_chat_template_and_vision_tokens():
    tokenizer = tiny.build_tokenizer()
    for token in tiny.SPECIAL_TOKENS:
        ids = tokenizer.convert_tokens_to_ids(token)
        assert isinstance(ids, int) and ids != tokenizer.unk_token_id
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "héllo"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>héllo<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids) == text  # byte-level: every string round-trips


def test_variants_build_with_their_heads():
    tokenizer = tiny.build_tokenizer()
    plain = tiny.build_transformer(tokenizer)
    action = tiny.build_transformer(tokenizer, action=True)
    sound = tiny.build_transformer(tokenizer, sound=True)
    assert not hasattr(plain, "action_proj_in") and not hasattr(plain, "audio_proj_in")
    assert action.action_proj_in.fc.weight.shape[0] == 32  # one row per embodiment domain
    assert sound.audio_proj_in.in_features == tiny.SOUND_DIM
    assert tiny.build_vision_encoder().config.out_hidden_size == tiny.TINY.hidden
    # Random, not default-initialised, weights: zero-initialised parameters would hide mapping bugs.
    assert action.action_modality_embed.abs().sum() > 0
    assert not torch.equal(plain.layers[0].self_attn.to_q.weight, plain.layers[0].self_attn.add_q_proj.weight)
