import pytest

from transformers_cosmos3.layouts import (
    Layout,
    canonical_names,
    detect_layout,
    from_layout,
    is_generator_key,
    to_layout,
)

CANONICAL = [
    "embed_tokens.weight",
    "layers.3.self_attn.to_q.weight",
    "layers.3.self_attn.norm_k.weight",
    "layers.3.self_attn.add_q_proj.weight",
    "layers.3.self_attn.to_add_out.weight",
    "layers.3.self_attn.norm_added_q.weight",
    "layers.3.mlp_moe_gen.down_proj.weight",
    "layers.3.input_layernorm_moe_gen.weight",
    "norm.weight",
    "norm_moe_gen.weight",
    "lm_head.weight",
    "proj_in.bias",
    "proj_out.weight",
    "time_embedder.linear_1.weight",
    "time_embedder.linear_2.bias",
    "action_proj_in.fc.weight",
    "action_proj_out.bias.weight",
    "action_modality_embed",
    "audio_proj_in.weight",
    "audio_modality_embed",
    "blocks.0.attn.qkv.weight",
    "merger.linear_fc1.weight",
    "deepstack_merger_list.0.norm.weight",
    "patch_embed.proj.weight",
    "pos_embed.weight",
]


@pytest.mark.parametrize("layout", list(Layout))
def test_every_layout_round_trips_and_is_one_to_one(layout):
    renamed = [to_layout(k, layout) for k in CANONICAL]
    assert len(set(renamed)) == len(CANONICAL)
    stored = [k.removeprefix("net.") for k in renamed]
    assert [from_layout(k, layout) for k in stored] == CANONICAL


def test_framework_names_match_the_framework():
    assert to_layout("layers.3.self_attn.add_q_proj.weight", "framework") == (
        "net.language_model.model.layers.3.self_attn.q_proj_moe_gen.weight"
    )
    assert to_layout("proj_in.bias", "framework") == "net.vae2llm.bias"
    assert to_layout("time_embedder.linear_2.bias", "framework") == "net.time_embedder.mlp.2.bias"
    assert to_layout("action_proj_in.fc.weight", "framework") == "net.action2llm.fc.weight"
    assert to_layout("audio_modality_embed", "framework") == "net.sound_modality_embed"
    assert (
        to_layout("blocks.0.attn.qkv.weight", "framework")
        == "net.language_model.visual.blocks.0.attn.qkv.weight"
    )


def test_transformers_and_vllm_names():
    assert to_layout("layers.3.self_attn.to_q.weight", "transformers") == (
        "model.language_model.layers.3.self_attn.q_proj.weight"
    )
    assert to_layout("blocks.0.attn.qkv.weight", "transformers") == "model.visual.blocks.0.attn.qkv.weight"
    assert to_layout("lm_head.weight", "vllm") == "language_model.lm_head.weight"
    assert to_layout("merger.linear_fc1.weight", "vllm") == "visual.merger.linear_fc1.weight"


def test_generator_keys_are_told_apart():
    generator = {k for k in CANONICAL if is_generator_key(k)}
    assert "layers.3.self_attn.to_q.weight" not in generator
    assert "lm_head.weight" not in generator
    assert {"layers.3.self_attn.add_q_proj.weight", "norm_moe_gen.weight", "proj_in.bias"} <= generator
    assert "layers.3.mlp_moe_gen.down_proj.weight" in generator


def test_detect_layout_and_ema_choice():
    keys = [to_layout(k, "framework") for k in CANONICAL]
    keys += [k.replace("net.", "net_ema.", 1) for k in keys]
    assert detect_layout(keys) is Layout.FRAMEWORK
    ema = canonical_names(keys)
    assert all(k.startswith("net_ema.") for k in ema) and sorted(ema.values()) == sorted(CANONICAL)
    regular = canonical_names(keys, prefer_ema=False)
    assert all(k.startswith("net.") for k in regular)
    with pytest.raises(ValueError, match="not a Cosmos3 checkpoint"):
        detect_layout(["foo.bar"])
