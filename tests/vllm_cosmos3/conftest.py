"""Tiny Cosmos3 reasoner checkpoints in every layout, and a way to load one with vLLM on the CPU.

These run only in the vLLM env (scripts/test-vllm.sh); each test module skips itself elsewhere.
Nothing heavy is imported at module level, so the main env collects this folder cheaply.
"""

import dataclasses
import os

# Before vLLM is imported: engine in this process (no spawned engine core), a small CPU KV cache.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

# vLLM's CPU attention kernels take head sizes of 32 and up (transformers_cosmos3.testing's TINY has 16).
HEAD_DIM = 32
MROPE_SECTION = (8, 4, 4)  # head_dim / 2 rotary pairs over t/h/w

# Generator-tower tensors under their canonical (diffusers) names, as a Cosmos3 checkpoint holds
# them beside the reasoner: {name: shape}. The reasoner must never see any of them.
GENERATOR_TENSORS = {
    "proj_in.weight": (64, 32),
    "proj_out.weight": (32, 64),
    "time_embedder.linear_1.weight": (64, 256),
    "time_embedder.linear_2.weight": (64, 64),
    "norm_moe_gen.weight": (64,),
    "action_proj_in.weight": (32, 64, 64),
    "action_modality_embed": (64,),
    "audio_proj_out.weight": (64, 64),
    "audio_modality_embed": (64,),
    **{
        f"layers.{n}.{part}.weight": (64, 64)
        for n in range(2)
        for part in (
            "self_attn.add_q_proj",
            "self_attn.add_k_proj",
            "self_attn.add_v_proj",
            "self_attn.to_add_out",
            "mlp_moe_gen.gate_proj",
        )
    },
    **{
        f"layers.{n}.{part}.weight": (32,)
        for n in range(2)
        for part in ("self_attn.norm_added_q", "self_attn.norm_added_k", "input_layernorm_moe_gen")
    },
}


@pytest.fixture(scope="session")
def generator_tensors():
    return GENERATOR_TENSORS


@pytest.fixture(scope="session")
def tiny_reasoner():
    """(transformers Cosmos3OmniForConditionalGeneration with random weights, tokenizer), float32."""
    from transformers_cosmos3.testing import TINY, build_reasoner, build_tokenizer

    tokenizer = build_tokenizer()
    sizes = dataclasses.replace(TINY, head_dim=HEAD_DIM, mrope_section=MROPE_SECTION)
    return build_reasoner(tokenizer, sizes=sizes), tokenizer


def _canonical_tensors(model):
    """The reasoner's weights plus generator tensors, all under canonical names."""
    import torch

    from transformers_cosmos3.layouts import Layout, from_layout

    tensors = {from_layout(k, Layout.TRANSFORMERS): v.detach().clone() for k, v in model.state_dict().items()}
    generator = torch.Generator().manual_seed(1)
    for name, shape in GENERATOR_TENSORS.items():
        tensors[name] = torch.randn(shape, generator=generator)
    return tensors


def _write(folder, tensors, model, tokenizer, max_shard_bytes=5 * 1024**3):
    """config.json, tokenizer and `tensors` ({subfolder or "": {name: tensor}}) in `folder`."""
    from transformers_cosmos3.checkpoint import save_sharded

    folder.mkdir(parents=True)
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for sub, part in tensors.items():
        save_sharded(part, folder / sub, max_shard_bytes=max_shard_bytes)
    return folder


@pytest.fixture(scope="session")
def checkpoints(tiny_reasoner, tmp_path_factory):
    """{layout: folder} of the same tiny reasoner (plus generator tensors), written through the key table.

    `export`: diffusers export (flat keys in transformer/ and vision_encoder/), the one layout
    native vLLM reads. `framework`: `net_ema.` holds the model, `net.` a perturbed copy, plus
    trainer state outside both. `save_pretrained`: what transformers itself writes.
    """
    import torch

    from transformers_cosmos3.layouts import Layout, is_vision_key, to_layout

    model, tokenizer = tiny_reasoner
    root = tmp_path_factory.mktemp("cosmos3-layouts")
    canonical = _canonical_tensors(model)
    folders = {}

    folders["export"] = _write(
        root / "export",
        {
            "transformer": {k: v for k, v in canonical.items() if not is_vision_key(k)},
            "vision_encoder": {k: v for k, v in canonical.items() if is_vision_key(k)},
        },
        model,
        tokenizer,
    )

    for layout in (Layout.TRANSFORMERS, Layout.FLAT, Layout.VLLM):
        renamed = {to_layout(k, layout): v for k, v in canonical.items()}
        # The flat one in several shards with an index, as large checkpoints come.
        shard = 64 * 1024 if layout is Layout.FLAT else 5 * 1024**3
        folders[layout.value] = _write(
            root / layout.value, {"": renamed}, model, tokenizer, max_shard_bytes=shard
        )

    generator = torch.Generator().manual_seed(2)
    framework = {to_layout(k, Layout.FRAMEWORK, "net_ema."): v for k, v in canonical.items()}
    framework |= {
        to_layout(k, Layout.FRAMEWORK, "net."): v + 0.01 * torch.randn(v.shape, generator=generator)
        for k, v in canonical.items()
    }
    framework["trainer.step"] = torch.tensor([1234.0])
    folders["framework"] = _write(root / "framework", {"": framework}, model, tokenizer)

    model.save_pretrained(root / "save_pretrained")
    tokenizer.save_pretrained(root / "save_pretrained")
    folders["save_pretrained"] = root / "save_pretrained"
    return folders


@pytest.fixture(scope="session")
def vllm_state():
    """load(folder, **engine_args) -> {name: tensor} of the model vLLM's own loader builds from `folder`.

    vLLM's config resolution, model registry and DefaultModelLoader (weight files, the model's
    load_weights, the check that every parameter was loaded), without an engine. The state is taken
    before process_weights_after_loading, which on the CPU repacks linear weights into oneDNN
    handles and leaves empty `.weight` tensors behind.
    """
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.plugins import load_general_plugins
    from vllm.utils.torch_utils import set_default_torch_dtype

    load_general_plugins()

    def load(folder, **engine_args):
        args = EngineArgs(
            model=str(folder), dtype="float32", max_model_len=256, enforce_eager=True, **engine_args
        )
        config = args.create_engine_config()
        with set_current_vllm_config(config):
            if not parallel_state.model_parallel_is_initialized():
                store = folder.parent / f".dist-{os.getpid()}"
                parallel_state.init_distributed_environment(
                    world_size=1,
                    rank=0,
                    local_rank=0,
                    distributed_init_method=f"file://{store}",
                    backend="gloo",
                )
                parallel_state.ensure_model_parallel_initialized(1, 1)
            loader = get_model_loader(config.load_config)
            with set_default_torch_dtype(config.model_config.dtype), torch.device("cpu"):
                model = loader.create_model(vllm_config=config, model_config=config.model_config)
            loader.load_weights(model, config.model_config)
        return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}

    return load


@pytest.fixture(scope="session")
def edge_export(tmp_path_factory):
    """(native transformers Cosmos3 Edge reasoner, its diffusers export): flat text tower and generator
    tensors in transformer/, the ViT and projector in vision_encoder/, written through the key table.

    The generator tensors leave out sound heads: vLLM's Edge class has no rule that drops them.
    """
    from transformers_cosmos3.layouts import is_vision_key
    from transformers_cosmos3.testing import TINY, build_reasoner, build_tokenizer

    tokenizer = build_tokenizer()
    sizes = dataclasses.replace(TINY, head_dim=HEAD_DIM, mrope_section=MROPE_SECTION)
    model = build_reasoner(tokenizer, sizes=sizes, family="cosmos3_edge")
    canonical = {k: v for k, v in _canonical_tensors(model).items() if not k.startswith("audio_")}
    folder = _write(
        tmp_path_factory.mktemp("cosmos3-edge") / "export",
        {
            "transformer": {k: v for k, v in canonical.items() if not is_vision_key(k)},
            "vision_encoder": {k: v for k, v in canonical.items() if is_vision_key(k)},
        },
        model,
        tokenizer,
    )
    return model, folder
