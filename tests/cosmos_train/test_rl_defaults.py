"""Diffusion RL jobs default to what the references train with: their optimizer per kind (DiffusionNFT and FlowGRPO
AdamW at a constant 3e-4, weight decay 1e-4, clip 1; DDRL 1e-5 after 50 warm-up steps), SD3.5's 512 x 512 samples
with 128 T5 tokens, LoRA r32 / alpha 64 on both of SD3's attention streams (`attn`, not the second attention `attn2`
of SD3.5's dual-attention blocks), SANA's attn1 and attn2 with their outputs, Cosmos's attention and MLP; each kind's
evaluation guidance and DDRL's noise per rollout as their references; a job's own values still win."""

from __future__ import annotations

import diffusion_rl_helpers
import pytest
from diffusion_rl_helpers import PROMPTS, write_rl_job

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


def test_nft_takes_cosmos_rls_values_for_its_families(tmp_path, tiny):
    """cosmos-rl's NFT configs: Cosmos-Predict2.5 kl_beta 1 and 12 samples per prompt, SANA LoRA r 4 / alpha 4;
    SD3 keeps DiffusionNFT's, a job's own values win, and an absent [lora] stays absent (full fine-tuning)."""

    def config(family, overrides=(), lora=True):
        job_file = write_rl_job(tmp_path / family, tiny(family), kind="nft", lora=lora)
        text = (
            job_file.read_text().replace("samples_per_prompt = 4\n", "").replace("r = 16\nalpha = 32\n", "")
        )
        job_file.write_text(text)
        return read_job(job_file, list(overrides)).config

    cosmos = config("cosmos_predict2_5")
    assert (cosmos.nft.kl_beta, cosmos.rollout.samples_per_prompt, cosmos.lora.r) == (1.0, 12, 32)
    sana = config("sana")
    assert (sana.nft.kl_beta, sana.rollout.samples_per_prompt, sana.lora.r, sana.lora.alpha) == (
        1e-4,
        24,
        4,
        4,
    )
    sd3 = config("sd3")
    assert (sd3.nft.kl_beta, sd3.rollout.samples_per_prompt, sd3.lora.r, sd3.lora.alpha) == (1e-4, 24, 32, 64)
    own = config("cosmos_predict2_5", ["nft.kl_beta=0.01", "rollout.samples_per_prompt=4", "lora.r=8"])
    assert (own.nft.kl_beta, own.rollout.samples_per_prompt, own.lora.r) == (0.01, 4, 8)
    assert config("sana", lora=False).lora is None


# What sizes SD3.5-Medium's configs (stabilityai/stable-diffusion-3.5-medium, transformer/ and vae/ config.json).
SD35_MEDIUM_CONFIGS = {
    "transformer": {"sample_size": 128, "patch_size": 2, "pos_embed_max_size": 384},
    "vae": {"block_out_channels": [128, 256, 512, 512]},
}


def test_sd3_rl_samples_at_512_with_128_tokens(tmp_path, tiny):
    """The references' 512 x 512 for SD3.5-Medium (its own size 1024); a smaller pipeline samples at its own size,
    and no default is ever larger than its transformer can position-embed."""
    from cosmos_train.diffusion.families.sd3 import StableDiffusion3Adapter as SD3

    sd35_medium = SD3.configured_size(SD35_MEDIUM_CONFIGS)
    assert sd35_medium == ((1024, 1024, None), 384 * 2 * 8)
    assert rl_sample_size(DiffusionRolloutSection(), SD3, *sd35_medium) == (512, 512, None)
    assert rl_sample_size(DiffusionRolloutSection(), SD3, (None, None, None), 96) == (96, 96, None)
    adapter = load_adapter(str(tiny("sd3")))
    sd3 = type(adapter), adapter.default_size(), adapter.max_sample_side()
    assert sd3[1:] == (
        (32, 32, None),
        32 * 2 * 2,
    )  # sample_size 16 x VAE 2; pos_embed_max_size 32 x patch 2 x VAE 2
    assert rl_sample_size(DiffusionRolloutSection(), *sd3) == (32, 32, None)
    assert rl_sample_size(DiffusionRolloutSection(height=64, width=96), *sd3) == (64, 96, None)
    assert rl_sample_size(DiffusionRolloutSection(height=64), *sd3) == (64, 64, None)  # width: as height
    job_file = write_rl_job(tmp_path, tiny("sd3"), kind="nft")
    job_file.write_text(job_file.read_text().replace("max_sequence_length = 16\n", ""))
    config = read_job(job_file).config
    assert config.text_tokens(type(adapter)) == 128
    sana = load_adapter(str(tiny("sana")))  # other families: the pipeline's own size
    assert rl_sample_size(DiffusionRolloutSection(), type(sana), sana.default_size()) == sana.default_size()


SD3_ATTENTION = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                 "attn.add_v_proj", "attn.to_add_out"}  # fmt: skip


@pytest.fixture(scope="module")
def dual_attention_sd3(tmp_path_factory):
    """The tiny SD3 with an SD3.5-Medium dual-attention block (`dual_attention_layers`: a second, image-only
    attention `attn2` beside `attn`) as its first block."""
    from diffusers import SD3Transformer2DModel

    from cosmos_train.tiny_models.pipelines import build_sd3

    pipeline = build_sd3()
    config = {key: value for key, value in pipeline.transformer.config.items() if not key.startswith("_")}
    pipeline.transformer = SD3Transformer2DModel(**config | {"dual_attention_layers": (0,)})
    folder = tmp_path_factory.mktemp("sd3-dual-attention")
    pipeline.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("family", "adapted"),
    [
        ("sd3", SD3_ATTENTION),
        # DiffusionNFT, FlowGRPO and cosmos-rl target `attn.*` only: the dual-attention blocks' attn2 stays frozen.
        ("sd3_dual_attention", SD3_ATTENTION),
        ("sana", {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k",
                  "attn2.to_v", "attn2.to_out.0"}),
        ("cosmos_predict2_5", {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q",
                               "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ff.net.0.proj", "ff.net.2"}),
    ],
)  # fmt: skip
def test_default_lora_targets_are_the_references(request, tiny, family, adapted):
    path = request.getfixturevalue("dual_attention_sd3") if family == "sd3_dual_attention" else tiny(family)
    adapter = load_adapter(PipelineSection(name_or_path=str(path), trust_remote_code=True))
    lora = prepare_training(adapter, RLLoraSection())
    assert (lora["r"], lora["alpha"]) == (32, 64)
    modules = dict(adapter.transformer.named_modules())
    wrapped = {
        name.split(".", 2)[-1]  # the module's path inside its transformer block
        for name, module in modules.items()
        if hasattr(module, "lora_A") and name.startswith("transformer_blocks.")
    }
    assert wrapped == adapted
    if family == "sd3_dual_attention":  # the block has the second attention, and it is left out
        assert "transformer_blocks.0.attn2.to_q" in modules
        assert not any(hasattr(module, "lora_A") for name, module in modules.items() if ".attn2." in name)


@pytest.mark.parametrize(
    ("kind", "guidance"),
    # DiffusionNFT evaluates without guidance (config/nft.py: sample.guidance_scale = 1.0), FlowGRPO at its
    # rollouts' 4.5 (config/grpo.py); cosmos-rl's DDRL has no scored evaluation: the pipeline's own.
    [("nft", 1.0), ("flow-grpo", 4.5), ("ddrl", None)],
)
def test_each_kind_evaluates_at_its_references_guidance(tmp_path, tiny, kind, guidance):
    job_file = write_rl_job(tmp_path, tiny("sana"), kind=kind, extra=f'\n[eval]\npath = "{PROMPTS}"\n')
    assert read_job(job_file).config.eval.guidance_scale == guidance
    own = read_job(job_file, ["eval.guidance_scale=3.0"])
    assert own.config.eval.guidance_scale == 3.0  # the job's own wins


def test_ddrl_draws_each_rollout_its_own_noise(tmp_path, tiny):
    """cosmos-rl's DDRL configs (Cosmos-Predict2.5 2B-720 and 14B-720) set `use_same_seed = false`."""
    job_file = write_rl_job(tmp_path, tiny("sana"), kind="ddrl")
    assert read_job(job_file).config.ddrl.use_same_seed is False
    assert read_job(job_file, ["ddrl.use_same_seed=true"]).config.ddrl.use_same_seed is True


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


def test_a_small_sd3_samples_at_a_size_it_can_take(tmp_path, tiny):
    """Issue 32: an NFT job on a small SD3 with no `[rollout]` size sampled at the references' 512 x 512, more than
    its transformer can position-embed, and crashed after encoding its prompts. The default now fits it."""
    from cosmos_train.algorithms.diffusion_rl.trainer import build_diffusion_rl_trainer

    job_file = write_rl_job(tmp_path, tiny("sd3"), kind="nft")
    job_file.write_text(job_file.read_text().replace("height = 32\n", "").replace("width = 32\n", ""))
    trainer = build_diffusion_rl_trainer(read_job(job_file))
    assert trainer.size == (32, 32, None)  # the pipeline's own size, below the 512 default and its 128 limit


@pytest.mark.parametrize(("kind", "key"), [("nft", "rollout"), ("ddrl", "data")])
def test_a_size_the_transformer_cannot_take_is_refused_in_one_line(tmp_path, tiny, kind, key):
    """A side above what the transformer can position-embed (tiny SD3: 128) is refused by validate-config and at
    job start, naming the key that set it, before anything loads."""
    from sft_helpers import cli_in_process

    job_file = write_rl_job(tmp_path, tiny("sd3"), kind=kind)
    for command in (["validate-config", str(job_file)], [kind, "-c", str(job_file)]):
        result = cli_in_process(*command, "--set", f"{key}.height=256")
        assert result.returncode == 2, (result.stdout, result.stderr)
        error = result.stderr.strip().splitlines()[-1]
        assert f"[{key}] height 256 is larger than" in error and f"set [{key}] height <= 128" in error, error
