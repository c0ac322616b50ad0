from pathlib import Path

import pytest
import torch

from cosmos_train.tiny_models import save_tiny_model
from diffusers_cosmos3 import testing as diffusers_tiny
from transformers_cosmos3 import testing as tiny


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
    plain = diffusers_tiny.build_transformer(tokenizer)
    action = diffusers_tiny.build_transformer(tokenizer, action=True)
    sound = diffusers_tiny.build_transformer(tokenizer, sound=True)
    assert not hasattr(plain, "action_proj_in") and not hasattr(plain, "audio_proj_in")
    assert action.action_proj_in.fc.weight.shape[0] == 32  # one row per embodiment domain
    assert sound.audio_proj_in.in_features == diffusers_tiny.SOUND_DIM
    assert tiny.build_vision_encoder().config.out_hidden_size == tiny.TINY.hidden
    # Random, not default-initialised, weights: zero-initialised parameters would hide mapping bugs.
    assert action.action_modality_embed.abs().sum() > 0
    assert not torch.equal(plain.layers[0].self_attn.to_q.weight, plain.layers[0].self_attn.add_q_proj.weight)


@pytest.mark.parametrize(
    ("kind", "model_type", "vision"),
    [
        ("qwen3", "qwen3", False),
        ("qwen3_vl", "qwen3_vl", True),
        ("qwen2_5_vl", "qwen2_5_vl", True),
        ("cosmos3", "cosmos3_omni", True),
    ],
)
def test_save_tiny_model_loads_back_with_auto_classes(tmp_path, kind, model_type, vision):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    folder = save_tiny_model(kind, tmp_path / kind)
    model_class = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = model_class.from_pretrained(folder)
    assert model.config.model_type == model_type
    tokenizer = (
        AutoProcessor.from_pretrained(folder).tokenizer if vision else AutoTokenizer.from_pretrained(folder)
    )
    ids = tokenizer("hello", return_tensors="pt").input_ids
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_save_tiny_model_names_the_kinds_on_an_unknown_one(tmp_path):
    with pytest.raises(ValueError, match="qwen3, qwen3_vl, qwen2_5_vl, cosmos3"):
        save_tiny_model("llama", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_tiny_pipelines_load_in_plain_diffusers(tiny_pipeline):
    """Without cosmos-train imported: a component of its own ships as a diffusers custom component."""
    import subprocess
    import sys

    from cosmos_train.tiny_models.pipelines import PIPELINES

    code = (
        "import sys\n"
        "from diffusers import DiffusionPipeline\n"
        "for folder in sys.argv[1:]:\n"
        "    pipeline = DiffusionPipeline.from_pretrained(folder, trust_remote_code=True)\n"
        "    print(type(pipeline).__name__)\n"
        "assert not any(name.startswith('cosmos_train') for name in sys.modules)\n"
    )
    folders = [str(tiny_pipeline(family)) for family in sorted(PIPELINES)]
    for folder in folders:
        assert "cosmos_train" not in (Path(folder) / "model_index.json").read_text()
    result = subprocess.run(
        [sys.executable, "-c", code, *folders], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.stdout.split()) == len(folders)
