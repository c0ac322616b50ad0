"""Diffusion RL jobs default to what the references train with: their optimizer per kind (DiffusionNFT and FlowGRPO
AdamW at a constant 3e-4, weight decay 1e-4, clip 1; DDRL 1e-5 after 50 warm-up steps), SD3.5's 512 x 512 samples
with 128 T5 tokens, LoRA r32 / alpha 64 on both of SD3's attention streams, SANA's attn1 and attn2 with their
outputs, Cosmos's attention and MLP; a job's own values still win."""

from __future__ import annotations

import diffusion_rl_helpers
import pytest
from diffusion_rl_helpers import write_rl_job

from cosmos_train.algorithms.diffusion_rl.schema import DiffusionRolloutSection, RLLoraSection, rl_sample_size
from cosmos_train.config import PipelineSection
from cosmos_train.diffusion.loading import load_adapter, prepare_training
from cosmos_train.jobs import read_job

tiny = diffusion_rl_helpers.tiny  # fixtures
_one_thread = diffusion_rl_helpers._one_thread

OPTIMIZER = (
    "learning_rate",
    "lr_scheduler_type",
    "weight_decay",
    "max_grad_norm",
    "warmup_steps",
    "adam_beta2",
)


def optimizer_of(job) -> tuple:
    values = {key: getattr(job.args, key) for key in OPTIMIZER}
    values["lr_scheduler_type"] = values["lr_scheduler_type"].value  # transformers' SchedulerType
    return tuple(values.values())


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("nft", (3e-4, "constant", 1e-4, 1.0, 0, 0.999)),
        ("flow-grpo", (3e-4, "constant", 1e-4, 1.0, 0, 0.999)),
        ("ddrl", (1e-5, "constant_with_warmup", 1e-4, 1.0, 50, 0.99)),
    ],
)
def test_each_kind_trains_with_its_references_optimizer(tmp_path, tiny, kind, expected):
    job_file = write_rl_job(tmp_path, tiny("sana"), kind=kind)
    text = job_file.read_text().replace("learning_rate = 0.01\n", "").replace("warmup_steps = 0\n", "")
    job_file.write_text(text)
    assert optimizer_of(read_job(job_file)) == expected
    assert read_job(job_file, ["train.learning_rate=0.001"]).args.learning_rate == 1e-3  # the job's own wins


def test_sd3_rl_samples_at_512_with_128_tokens(tmp_path, tiny):
    adapter = load_adapter(str(tiny("sd3")))
    sd3 = type(adapter), adapter.default_size()
    assert rl_sample_size(DiffusionRolloutSection(), *sd3) == (512, 512, None)
    assert rl_sample_size(DiffusionRolloutSection(height=64, width=96), *sd3) == (64, 96, None)
    assert rl_sample_size(DiffusionRolloutSection(height=64), *sd3) == (64, 64, None)  # width: as height
    job_file = write_rl_job(tmp_path, tiny("sd3"), kind="nft")
    job_file.write_text(job_file.read_text().replace("max_sequence_length = 16\n", ""))
    config = read_job(job_file).config
    assert config.text_tokens(type(adapter)) == 128
    sana = load_adapter(str(tiny("sana")))  # other families: the pipeline's own size
    assert rl_sample_size(DiffusionRolloutSection(), type(sana), sana.default_size()) == sana.default_size()


@pytest.mark.parametrize(
    ("family", "adapted"),
    [
        ("sd3", {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                 "attn.add_v_proj", "attn.to_add_out"}),
        ("sana", {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k",
                  "attn2.to_v", "attn2.to_out.0"}),
        ("cosmos_predict2_5", {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q",
                               "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ff.net.0.proj", "ff.net.2"}),
    ],
)  # fmt: skip
def test_default_lora_targets_are_the_references(tiny, family, adapted):
    adapter = load_adapter(PipelineSection(name_or_path=str(tiny(family)), trust_remote_code=True))
    lora = prepare_training(adapter, RLLoraSection())
    assert (lora["r"], lora["alpha"]) == (32, 64)
    wrapped = {
        name.split(".", 2)[-1]  # the module's path inside its transformer block
        for name, module in adapter.transformer.named_modules()
        if hasattr(module, "lora_A") and name.startswith("transformer_blocks.")
    }
    assert wrapped == adapted


def test_the_whole_pipeline_goes_to_the_process_device(tmp_path, tiny):
    """The Trainer moves only the transformer; the VAE and text encoders must follow it to the process's device
    (on a GPU they stayed on the CPU and the first prompt encoding failed). The meta device stands in for CUDA."""
    from types import SimpleNamespace

    import torch

    from cosmos_train.algorithms.diffusion.trainer import load_for_training

    job = read_job(write_rl_job(tmp_path, tiny("sd3"), kind="nft"))
    elsewhere = SimpleNamespace(args=SimpleNamespace(seed=0, device=torch.device("meta")), config=job.config)
    adapter, _ = load_for_training(elsewhere)
    devices = {
        p.device.type for m in [adapter.transformer, *adapter.frozen_modules()] for p in m.parameters()
    }
    assert devices == {"meta"}
