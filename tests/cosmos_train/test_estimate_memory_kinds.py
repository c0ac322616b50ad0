"""`cosmos-train estimate-memory` gives every registered job kind (`cosmos_train.kinds.job_kinds()`) an estimate with
the parts its trainer holds, on a tiny model's configuration alone (no weights, no data, no training):

- every kind: the trained weights, their gradients, AdamW's state, the trained module's frozen part and the
  activations;
- a diffusion kind: each frozen pipeline module (the tiny SD3's VAE and three text encoders);
- the copies of the trained weights its trainer keeps (`cosmos_train.memory`'s docstring): GRPO with beta > 0
  under full fine-tuning TRL's whole reference model; diffusion kinds the EMA when `ema_decay` is set, DiffusionNFT
  its old policy, and diffusion RL under full fine-tuning the frozen reference of a KL term (a LoRA reaches its
  base by disabling its adapters: no copy).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.kinds import job_kinds

BASE = {"trained weights", "gradients", "optimizer (AdamW)", "frozen: trained module", "activations"}
PIPELINE = {"frozen: vae", "frozen: text_encoder", "frozen: text_encoder_2", "frozen: text_encoder_3"}
COSMOS3_PIPELINE = {"frozen: vae"}  # its text encoder is the transformer's own reasoner tower
EMA, OLD_POLICY, KL_REFERENCE, TRL_REFERENCE = (
    "copies: EMA",
    "copies: old policy",
    "copies: KL reference",
    "copies: reference model",
)

# case: (kind, LoRA, {section: {key: value}} added to the kind's smallest job, the copies its trainer keeps)
CASES = {
    "sft-full": ("sft", False, {}, set()),
    "sft-lora": ("sft", True, {}, set()),
    "grpo-full-kl": ("grpo", False, {"train": {"beta": 0.04}}, {TRL_REFERENCE}),
    "grpo-lora-kl": ("grpo", True, {"train": {"beta": 0.04}}, set()),
    "grpo-full-no-kl": ("grpo", False, {"train": {"beta": 0.0}}, set()),
    "diffusion-sft-full-ema": ("diffusion-sft", False, {"diffusion": {"ema_decay": 0.9}}, {EMA}),
    "diffusion-sft-lora": ("diffusion-sft", True, {}, set()),
    "nft-lora": ("nft", True, {"nft": {"ema_decay": 0.9}}, {EMA, OLD_POLICY}),
    "nft-full-kl": (
        "nft",
        False,
        {"nft": {"ema_decay": 0.9, "kl_beta": 1e-4}},
        {EMA, OLD_POLICY, KL_REFERENCE},
    ),
    # FlowGRPO keeps its reference's EMA by default.
    "flow-grpo-full-kl": ("flow-grpo", False, {"flow_grpo": {"kl_beta": 0.04}}, {EMA, KL_REFERENCE}),
    "flow-grpo-lora-kl": ("flow-grpo", True, {"flow_grpo": {"ema_decay": 0.9, "kl_beta": 0.04}}, {EMA}),
    "ddrl-full": ("ddrl", False, {"ddrl": {"ema_decay": 0.9, "kl_beta": 0.01}}, {EMA, KL_REFERENCE}),
    "ddrl-lora": ("ddrl", True, {"ddrl": {"kl_beta": 0.01}}, set()),
    "action-sft-full-ema": ("action-sft", False, {"action": {"ema_decay": 0.9}}, {EMA}),
    "action-sft-lora": ("action-sft", True, {}, set()),
    "policy-rl-nft-full-kl": (
        "policy-rl",
        False,
        {"nft": {"ema_decay": 0.9, "kl_beta": 1e-4}},
        {EMA, OLD_POLICY, KL_REFERENCE},
    ),
    "policy-rl-flow-grpo-lora": (
        "policy-rl",
        True,
        {"rl": {"algorithm": "flow-grpo"}, "flow_grpo": {"kl_beta": 0.04}},
        {EMA},
    ),
}


def _toml(value) -> str:
    return json.dumps(value)  # strings, numbers, booleans: the same in TOML


def smallest_job(kind: str, model: Path, folder: Path) -> dict[str, dict]:
    """The sections of a small job of `kind`; its data do not exist (the estimate reads none)."""
    absent = folder / "absent"
    train = {"output_dir": str(folder / "run"), "per_device_train_batch_size": 2, "report_to": "none"}
    if kind in ("sft", "grpo"):
        sections = {"data": {"format": "jsonl", "path": f"{absent}.jsonl"}}
        if kind == "sft":
            sections["data"]["max_length"] = 64
        else:
            sections["rewards"] = {"length": 1.0}
            train |= {"num_generations": 2, "max_completion_length": 16}
    elif kind == "diffusion-sft":
        sections = {"data": {"path": str(absent), "format": "folder", "height": 32, "width": 32}}
    elif kind == "action-sft":
        sections = {
            "data": {
                "path": str(absent),
                "cameras": ["observation.images.top"],
                "action_columns": ["action"],
            },
            "action": {"domain": "pusht", "chunk_size": 4, "resolution_tier": 256},
        }
    elif kind == "policy-rl":
        sections = {
            "env": {"factory": "absent_env:make"},
            "rollout": {"seeds": [1, 2], "samples_per_start": 2, "sampling_steps": 2, "train_samples": 2,
                        "train_batch_size": 2},
        }  # fmt: skip
    else:
        rollout = {"samples_per_prompt": 2, "sampling_steps": 2, "train_batch_size": 2}
        if kind == "ddrl":  # data items, at [data]'s size
            sections = {"data": {"path": str(absent), "format": "folder", "height": 32, "width": 32}}
        else:
            sections = {"data": {"path": f"{absent}.txt"}}
            rollout |= {"height": 32, "width": 32}
        sections |= {"rewards": {"brightness": 1.0}, "rollout": rollout}
    return {"model": {"name_or_path": str(model)}, **sections, "train": train}


def write_job(folder: Path, kind: str, model: Path, lora: bool, settings: dict) -> Path:
    sections = smallest_job(kind, model, folder)
    if lora:
        sections["lora"] = {"r": 4, "alpha": 8}
    for section, values in settings.items():
        sections[section] = sections.get(section, {}) | values
    text = f'kind = "{kind}"\n' + "".join(
        f"[{name}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in values.items())
        for name, values in sections.items()
    )
    job = folder / "job.toml"
    job.write_text(text)
    return job


@pytest.fixture(scope="module")
def configs(tmp_path_factory, tiny_pipeline):
    """{family: a folder of configuration files only}: a tiny Qwen3's config.json, and the tiny SD3 pipeline's
    model_index.json with each component's config.json."""
    from transformers import Qwen3Config

    root = tmp_path_factory.mktemp("configs")
    Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        dtype="float32",
    ).save_pretrained(root / "language")
    for family, pipeline in (
        ("diffusion", tiny_pipeline("sd3")),
        ("action", tiny_pipeline("cosmos3_action")),
    ):
        for path in pipeline.rglob("*"):
            if path.name in ("config.json", "model_index.json"):
                target = root / family / path.relative_to(pipeline)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
    assert not [path for path in root.rglob("*") if path.suffix in (".safetensors", ".bin")]
    return root


def test_every_registered_kind_has_cases():
    assert {kind for kind, *_ in CASES.values()} == set(job_kinds())


@pytest.mark.parametrize("case", list(CASES))
def test_every_kind_gets_an_estimate_with_its_parts(tmp_path, configs, case):
    from typer.testing import CliRunner

    from cosmos_train.cli import app

    kind, lora, settings, copies = CASES[case]
    family = job_kinds()[kind].family
    folder = (
        "action" if kind in ("action-sft", "policy-rl") else family
    )  # action-sft trains Cosmos3 pipelines with action heads
    job = write_job(tmp_path, kind, configs / folder, lora, settings)
    shown = CliRunner().invoke(app, ["estimate-memory", str(job), "--json"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    (estimate,) = json.loads(shown.stdout)
    assert estimate["kind"] == kind and estimate["lora"] == lora
    parts = estimate["bytes_per_device"]
    frozen_modules = {"diffusion": PIPELINE, "action": COSMOS3_PIPELINE}.get(folder, set())
    expected = BASE | frozen_modules | copies
    assert set(parts) == expected, f"{case}: parts {sorted(parts)}, expected {sorted(expected)}"
    assert all(parts[name] > 0 for name in expected - {"frozen: trained module"}), parts
    trained, frozen = estimate["parameters"]["trained"], estimate["parameters"]["frozen"]
    assert trained > 0 and (frozen > trained if lora else True)
    assert (parts["frozen: trained module"] > 0) == lora or family == "diffusion"
    # One process, no DeepSpeed: the copies are whole. A diffusion copy holds the trained parameters in float32;
    # TRL's reference is the whole model (under full fine-tuning, the trained weights).
    for name in copies:
        assert parts[name] == (parts["trained weights"] if family == "language" else 4 * trained), (
            name,
            parts,
        )
    # The peak: everything else, plus the larger of gradients and activations, or both where the job accumulates
    # gradients (the diffusion RL kinds' micro-batches: their schema sets the accumulation).
    from cosmos_train import memory

    accumulates = memory.read_job(job)[0].settings.gradient_accumulation_steps > 1
    rest = sum(size for name, size in parts.items() if name not in ("gradients", "activations"))
    both = rest + parts["gradients"] + parts["activations"]
    either = rest + max(parts["gradients"], parts["activations"])
    assert estimate["peak_bytes_per_device"] == (both if accumulates else either)


def test_the_action_heads_train_in_full_beside_a_lora_or_the_generator(tmp_path, configs, tiny_pipeline):
    """action-sft's trained parameters, as estimated from configs alone, are what its trainer trains: the real
    tiny transformer's LoRA factors (or its generator) plus the action heads."""
    from diffusers import Cosmos3OmniTransformer
    from peft import LoraConfig
    from typer.testing import CliRunner

    from cosmos_train.cli import app
    from cosmos_train.diffusion.families.cosmos3 import Cosmos3Adapter
    from diffusers_cosmos3.actions import ACTION_HEAD

    def transformer():
        return Cosmos3OmniTransformer.from_pretrained(
            tiny_pipeline("cosmos3_action"), subfolder="transformer"
        )

    def heads(model):
        return sum(p.numel() for n, p in model.named_parameters() if ACTION_HEAD.search(n))

    full = transformer()
    Cosmos3Adapter.prepare_full_finetuning(type("Adapter", (), {"transformer": full})())
    generator = sum(
        p.numel() for n, p in full.named_parameters() if p.requires_grad and not ACTION_HEAD.search(n)
    )
    lora = transformer()
    lora.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=list(Cosmos3Adapter.lora_target_modules)))
    factors = sum(p.numel() for n, p in lora.named_parameters() if "lora_" in n)
    for use_lora, expected in ((False, generator + heads(full)), (True, factors + heads(lora))):
        folder = tmp_path / str(use_lora)
        folder.mkdir()
        job = write_job(folder, "action-sft", configs / "action", use_lora, {})
        shown = CliRunner().invoke(app, ["estimate-memory", str(job), "--json"], catch_exceptions=False)
        assert json.loads(shown.stdout)[0]["parameters"]["trained"] == expected, use_lora
