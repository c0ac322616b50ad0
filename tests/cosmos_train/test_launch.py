"""One job file under every launcher and backend, as real runs on CPU (gloo).

The reference is a plain single-process run with gradient_accumulation_steps=2. Under accelerate's
sharding, rank r of a 2-process run takes global batches r, r+2, ... of the same seeded order, and a
1-process run with 2 accumulation steps takes batches 2k and 2k+1 in step k; with the loss normalised
by the tokens of the whole global batch, both make the same updates. So a 2-process run with one
accumulation step must reproduce the reference, and a run that silently trained one process alone
(on half the data per step) would be far off (about 2e-2 on the weights here).

Without GPUs the jobs set `[train] use_cpu = true`: otherwise accelerate finds no device, and each
launched process trains alone (DDP) or sizes its DeepSpeed batch for one process.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from launch_helpers import BIN, error_tail, finish, free_port, start, two_processes
from peft import PeftModel
from sft_helpers import SHAPES, cli_in_process, losses, write_job
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from cosmos_train import tiny_models as tiny
from cosmos_train.algorithms.sft.trainer import run_sft
from cosmos_train.checkpoints import is_complete
from cosmos_train.jobs import read_job
from cosmos_train.launch import ACCELERATE_CONFIG
from transformers_cosmos3 import Cosmos3ForConditionalGeneration

# Most of its tests launch two ranks; the rest share its module fixtures (tests/conftest.py).
pytestmark = pytest.mark.two_ranks

STEPS = 4
# Global batch 4 in every run: 2 per device x 2 accumulation steps, or 2 per device x 2 processes.
TRAIN = {
    "max_steps": STEPS,
    "save_steps": STEPS,
    "per_device_train_batch_size": 2,
    "learning_rate": 5e-3,
    "use_cpu": True,
}
RECORDS = len(json.loads((SHAPES / "llava.json").read_text()))
ONE_PROCESS = ["--num_processes", 1, "--num_machines", 1, "--mixed_precision", "no", "--dynamo_backend", "no"]


@dataclass
class Run:
    output: Path  # the job's output_dir

    @property
    def state(self) -> dict:
        return json.loads((self.output / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())

    def history(self, key: str) -> list[float]:
        return [entry[key] for entry in self.state["log_history"] if key in entry]


def _run(label: str, launcher: list, folder: Path, model: Path, train: dict, overrides=()) -> Run:
    folder.mkdir()
    job = write_job(folder, model, lora=False, train=TRAIN | train)
    sets = [arg for override in overrides for arg in ("--set", override)]
    stdout, stderr = finish(start([*launcher, "sft", "--config", job, *sets]), label)
    assert "trained model saved to" in stdout, f"{label}: no final message\n{error_tail(stderr)}"
    return Run(folder / "run")


def _accelerate(*flags) -> list:
    return [BIN / "accelerate", "launch", *flags]


def _reasoner_weights(folder: Path) -> dict[str, torch.Tensor]:
    return Cosmos3ForConditionalGeneration.from_pretrained(folder).state_dict()


def _assert_same_training(
    run: Run, reference: Run, weights: dict, reference_weights: dict, rtol: float, atol: float
) -> None:
    for key in ("loss", "grad_norm"):
        got, want = run.history(key), reference.history(key)
        assert len(got) == len(want) == STEPS, (key, got, want)
        torch.testing.assert_close(
            torch.tensor(got),
            torch.tensor(want),
            rtol=rtol,
            atol=atol,
            msg=lambda m, key=key: f"{key} per step differs from the reference: {m}",
        )
    assert weights.keys() == reference_weights.keys()
    for name, tensor in weights.items():
        torch.testing.assert_close(
            tensor,
            reference_weights[name],
            rtol=rtol,
            atol=atol,
            msg=lambda m, name=name: f"{name} differs from the reference: {m}",
        )


def _rng_states(run: Run) -> list[str]:
    """The checkpoint's RNG state files: one per rank (`rng_state_<rank>.pth`) when several ranks ran."""
    return sorted(p.name for p in (run.output / f"checkpoint-{STEPS}").glob("rng_state*.pth"))


def _assert_world_size(run: Run, world_size: int, accumulation: int) -> None:
    """The trainer's own epoch count: step 1 consumed per_device x processes x accumulation records."""
    first_epoch = run.state["log_history"][0]["epoch"]
    batch = TRAIN["per_device_train_batch_size"] * world_size * accumulation
    assert math.isclose(first_epoch, batch / RECORDS, rel_tol=1e-6), (
        f"step 1 reached epoch {first_epoch}, expected {batch}/{RECORDS} for {world_size} process(es)"
    )


@pytest.fixture(scope="module")
def reasoner(tmp_path_factory):
    return tiny.save_tiny_cosmos3_reasoner(tmp_path_factory.mktemp("reasoner") / "model")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, reasoner):
    """`cosmos-train sft` on one process, gradient_accumulation_steps=2: full fine-tuning of the reasoner."""
    folder = tmp_path_factory.mktemp("launch") / "reference"
    return _run(
        "cosmos-train sft", [BIN / "cosmos-train"], folder, reasoner, {"gradient_accumulation_steps": 2}
    )


@pytest.fixture(scope="module")
def reference_weights(reference):
    return _reasoner_weights(reference.output)


def test_plain_cli_single_process(reference, reference_weights, reasoner):
    checkpoint = reference.output / f"checkpoint-{STEPS}"
    assert is_complete(checkpoint)
    assert _rng_states(reference) == ["rng_state.pth"]
    _assert_world_size(reference, world_size=1, accumulation=2)
    history = reference.history("loss")
    assert len(history) == STEPS and all(map(math.isfinite, history)), history
    before = _reasoner_weights(reasoner)
    assert all(
        not torch.equal(reference_weights[k], before[k]) for k in before if "language_model.layers" in k
    )


def test_accelerate_launch_console_script(tmp_path, reasoner, reference, reference_weights):
    """One process under `accelerate launch` trains as the plain CLI. The module form (`-m cosmos_train`) is what
    the multi-process launches below use."""
    launcher = _accelerate(*ONE_PROCESS, BIN / "cosmos-train")
    run = _run(
        "accelerate launch cosmos-train",
        launcher,
        tmp_path / "job",
        reasoner,
        {"gradient_accumulation_steps": 2},
    )
    _assert_same_training(
        run, reference, _reasoner_weights(run.output), reference_weights, rtol=1e-5, atol=1e-6
    )


@pytest.mark.slow
def test_ddp_two_processes_equal_one_process_with_accumulation(
    tmp_path, reasoner, reference, reference_weights
):
    run = _run(
        "2-process DDP", two_processes(), tmp_path / "job", reasoner, {"gradient_accumulation_steps": 1}
    )
    checkpoint = run.output / f"checkpoint-{STEPS}"
    assert _rng_states(run) == ["rng_state_0.pth", "rng_state_1.pth"]  # each rank saved its own: 2 ran
    assert is_complete(checkpoint)
    _assert_world_size(run, world_size=2, accumulation=1)
    _assert_same_training(
        run, reference, _reasoner_weights(run.output), reference_weights, rtol=1e-5, atol=1e-6
    )


CPU_ONLY = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the use_cpu default is for CPU-only machines"
)
TRAIN_WITHOUT_USE_CPU = {key: value for key, value in TRAIN.items() if key != "use_cpu"}


@CPU_ONLY
def test_cpu_only_machine_defaults_to_use_cpu(tmp_path, reasoner):
    job_path = write_job(tmp_path, reasoner, lora=False, train=TRAIN_WITHOUT_USE_CPU)
    args = read_job(job_path).args
    assert args.use_cpu is True and args.bf16 is False, (args.use_cpu, args.bf16)
    assert read_job(job_path, ["train.use_cpu=false"]).args.use_cpu is False  # a default the job may change


@CPU_ONLY
@pytest.mark.slow
def test_multi_gpu_launch_without_use_cpu_is_one_two_rank_job(tmp_path, reasoner):
    """The documented `accelerate launch --multi_gpu` command on a job that leaves use_cpu unset: the
    two processes must form one job of world size 2, not two jobs of one process each."""
    launcher = _accelerate(
        "--multi_gpu", "--num_processes", 2, "--num_machines", 1, "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", free_port(), "-m", "cosmos_train",
    )  # fmt: skip
    folder = tmp_path / "job"
    folder.mkdir()
    job = write_job(folder, reasoner, lora=False, train=TRAIN_WITHOUT_USE_CPU)
    stdout, stderr = finish(start([*launcher, "sft", "--config", job]), "accelerate launch --multi_gpu")
    assert "trained model saved to" in stdout, error_tail(stderr)
    run = Run(folder / "run")
    assert _rng_states(run) == ["rng_state_0.pth", "rng_state_1.pth"]  # each rank saved its own: 2 ran
    _assert_world_size(run, world_size=2, accumulation=1)
    assert len(run.history("loss")) == STEPS


@pytest.mark.slow
def test_multi_node_command_form(tmp_path, reasoner, reference, reference_weights):
    """Two "machines" of one process each on localhost, launched as on a cluster, one command per machine."""
    port = free_port()
    folder = tmp_path / "job"
    folder.mkdir()
    job = write_job(folder, reasoner, lora=False, train=TRAIN | {"gradient_accumulation_steps": 1})
    machines = []
    for rank in (0, 1):
        flags = [
            "--config_file", ACCELERATE_CONFIG, "--num_machines", 2, "--num_processes", 2,
            "--machine_rank", rank, "--main_process_ip", "127.0.0.1", "--main_process_port", port,
        ]  # fmt: skip
        machines.append(start(_accelerate(*flags, "-m", "cosmos_train", "sft", "-c", job)))
    for rank, machine in enumerate(machines):
        finish(machine, f"machine_rank {rank}")
    run = Run(folder / "run")
    assert _rng_states(run) == ["rng_state_0.pth", "rng_state_1.pth"]  # each rank saved its own: 2 ran
    _assert_world_size(run, world_size=2, accumulation=1)
    _assert_same_training(
        run, reference, _reasoner_weights(run.output), reference_weights, rtol=1e-5, atol=1e-6
    )


def _zero_shards(run: Run) -> dict[str, list[str]]:
    step = run.output / f"checkpoint-{STEPS}" / f"global_step{STEPS}"
    assert step.is_dir(), f"no DeepSpeed checkpoint in {step.parent}: {sorted(os.listdir(step.parent))}"
    return {
        kind: sorted(p.name for p in step.glob(f"*zero_pp_rank_*_{kind}_states.pt"))
        for kind in ("optim", "model")
    }


@pytest.mark.slow
def test_zero2_two_processes(tmp_path, reasoner, reference, reference_weights):
    run = _run(
        "ZeRO-2",
        two_processes(),
        tmp_path / "job",
        reasoner,
        {"gradient_accumulation_steps": 1},
        ["launch.backend=zero2"],
    )
    # One optimizer-state partition per rank: DeepSpeed ZeRO really ran, on 2 ranks.
    assert _zero_shards(run)["optim"] == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)]
    assert is_complete(run.output / f"checkpoint-{STEPS}")
    assert all(map(math.isfinite, run.history("loss")))
    _assert_world_size(run, world_size=2, accumulation=1)
    weights = _reasoner_weights(run.output)  # the final model reloads through the shim
    # DeepSpeed reduces flattened, partitioned gradients in another order: equal up to rounding.
    _assert_same_training(run, reference, weights, reference_weights, rtol=1e-4, atol=5e-5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["zero2", "zero3"])
def test_zero_job_as_one_plain_process(tmp_path, reasoner, reference, reference_weights, backend):
    """`cosmos-train sft -c job.toml` with a ZeRO backend and no launcher: the same job on one process, as the
    README says (DeepSpeed would otherwise look for MPI)."""
    run = _run(
        f"{backend}, one plain process",
        [BIN / "cosmos-train"],
        tmp_path / "job",
        reasoner,
        {"gradient_accumulation_steps": 2},
        [f"launch.backend={backend}"],
    )
    assert _zero_shards(run)["optim"] == ["zero_pp_rank_0_mp_rank_00_optim_states.pt"]
    _assert_world_size(run, world_size=1, accumulation=2)
    weights = _reasoner_weights(run.output)
    _assert_same_training(run, reference, weights, reference_weights, rtol=1e-4, atol=5e-5)


def _text_data(path: Path) -> Path:
    """16 chat records whose answers differ in length, so ranks see different token counts."""
    words = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Say {word} {n} times."},
                {"role": "assistant", "content": " ".join([word] * n)},
            ]
        }
        for n, word in zip([1, 2, 3, 4] * 4, words * 2, strict=True)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.slow
def test_zero3_two_processes_saves_full_weights(tmp_path):
    """ZeRO-3 partitions the parameters themselves; the saved model must still be whole (on the tiny Qwen3
    text LM; the Cosmos3 reasoner's ZeRO-3 tests follow)."""
    lm = tiny.save_tiny_text_lm(tmp_path / "lm")
    text = [f'data.path="{_text_data(tmp_path / "text.jsonl")}"', 'data.format="jsonl"']
    run = _run(
        "ZeRO-3",
        two_processes(),
        tmp_path / "zero3",
        lm,
        {"gradient_accumulation_steps": 1},
        [*text, "launch.backend=zero3"],
    )
    shards = _zero_shards(run)
    assert shards["model"] == [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in (0, 1)], shards
    assert shards["optim"] == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)], shards
    assert is_complete(run.output / f"checkpoint-{STEPS}")
    assert all(map(math.isfinite, run.history("loss")))

    initial = AutoModelForCausalLM.from_pretrained(lm).state_dict()
    model, info = AutoModelForCausalLM.from_pretrained(run.output, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched tensors
    saved = model.state_dict()
    assert saved.keys() == initial.keys()
    for name, tensor in saved.items():
        assert tensor.shape == initial[name].shape and tensor.numel() > 0, (name, tensor.shape)
        assert torch.isfinite(tensor).all(), name

    # The same job on one process with 2 accumulation steps, in this process.
    folder = tmp_path / "one"
    folder.mkdir()
    job = read_job(
        write_job(
            folder, lm, lora=False, train=TRAIN | {"gradient_accumulation_steps": 2, "save_strategy": "no"}
        ),
        text,
    )
    trainer = run_sft(job)
    torch.testing.assert_close(
        torch.tensor(run.history("loss")), torch.tensor(losses(trainer)), rtol=1e-4, atol=1e-5
    )
    expected = trainer.model.state_dict()
    for name, tensor in saved.items():
        assert not torch.equal(tensor, initial[name]), f"{name} did not train"
        torch.testing.assert_close(
            tensor,
            expected[name],
            rtol=1e-4,
            atol=5e-5,
            msg=lambda m, name=name: f"{name} differs from the 1-process run: {m}",
        )


def test_fsdp_backend_config(tmp_path, reasoner, monkeypatch):
    """FSDP cannot run on CPUs (accelerate enables it only for device-backed runs; on CPU it would be plain
    DDP), so this checks what a GPU run would use: FSDP2 with full-state saves, wrapping the decoder
    layers (and vision blocks) that accelerate finds in each supported model family."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    from cosmos_train.config import ConfigError

    job_path = write_job(tmp_path, reasoner, lora=False, train=TRAIN)
    with pytest.raises(ConfigError, match="needs GPUs"):  # refused here rather than silently run as DDP
        read_job(job_path, ["launch.backend=fsdp"])
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    args = read_job(job_path, ["launch.backend=fsdp"]).args
    expected = {
        "fsdp_version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",  # run_sft saves a plain from_pretrained folder
        "cpu_ram_efficient_loading": False,
        "activation_checkpointing": False,
    }
    assert expected.items() <= args.fsdp_plugin_args.items(), args.fsdp_plugin_args
    lm = tiny.save_tiny_text_lm(tmp_path / "lm")
    families = {
        "Cosmos3 reasoner": (
            Cosmos3ForConditionalGeneration.from_pretrained(reasoner),
            {"Qwen3VLTextDecoderLayer", "Qwen3VLVisionBlock"},
        ),
        "Qwen3 text LM": (AutoModelForCausalLM.from_pretrained(lm), {"Qwen3DecoderLayer"}),
    }
    for family, (model, layers) in families.items():
        plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
        plugin.set_auto_wrap_policy(model)  # raises if a layer class to wrap is not in the model
        wrapped = {cls.__name__ for cls in plugin.auto_wrap_policy.keywords["transformer_layer_cls"]}
        assert wrapped == layers, (family, wrapped)
        assert any(type(m).__name__ in layers for m in model.modules()), family


@pytest.mark.slow
def test_zero3_two_processes_cosmos3_full_fine_tune(tmp_path, reasoner, reference, reference_weights):
    """The Cosmos3 reasoner loads under ZeRO-3 (its weight-name listing builds no model inside
    `zero.Init`), and the final model keeps the transformers names: the strict shim reloads it, trained
    as the 1-process reference was."""
    run = _run(
        "ZeRO-3 reasoner",
        two_processes(),
        tmp_path / "job",
        reasoner,
        {"gradient_accumulation_steps": 1},
        ["launch.backend=zero3"],
    )
    assert _zero_shards(run)["model"] == [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in (0, 1)]
    _assert_world_size(run, world_size=2, accumulation=1)
    weights = _reasoner_weights(run.output)
    _assert_same_training(run, reference, weights, reference_weights, rtol=1e-4, atol=5e-5)


@pytest.mark.slow
def test_zero3_two_processes_cosmos3_lora(tmp_path, reasoner):
    """LoRA on the Cosmos3 reasoner under ZeRO-3: the adapter and its merged export reload with the
    weights of the same job trained on one process with 2 accumulation steps (in this process)."""
    folder = tmp_path / "zero3"
    folder.mkdir()
    job = write_job(folder, reasoner, train=TRAIN | {"gradient_accumulation_steps": 1})
    stdout, stderr = finish(
        start([*two_processes(), "sft", "--config", job, "--set", "launch.backend=zero3"]), "ZeRO-3 LoRA"
    )
    # Quiet by default (issue 32): no library deprecation warnings, one per collective on every rank before.
    assert "FutureWarning" not in stdout + stderr and "DeprecationWarning" not in stdout + stderr, stderr[
        -2000:
    ]
    run = Run(folder / "run")
    assert _zero_shards(run)["model"] == [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in (0, 1)]

    (tmp_path / "one").mkdir()
    one = TRAIN | {"gradient_accumulation_steps": 2, "save_strategy": "no"}
    trainer = run_sft(read_job(write_job(tmp_path / "one", reasoner, train=one)))
    torch.testing.assert_close(
        torch.tensor(run.history("loss")), torch.tensor(losses(trainer)), rtol=1e-4, atol=1e-5
    )
    held = trainer.model.state_dict()
    adapter = PeftModel.from_pretrained(Cosmos3ForConditionalGeneration.from_pretrained(reasoner), run.output)
    lora = {name: tensor for name, tensor in adapter.state_dict().items() if ".lora_" in name}
    assert lora and lora.keys() <= held.keys()
    for name, tensor in lora.items():
        torch.testing.assert_close(
            tensor, held[name], rtol=1e-4, atol=5e-5, msg=lambda m, n=name: f"{n}: {m}"
        )

    result = cli_in_process("export", run.output, tmp_path / "merged", "--merge-lora")
    assert result.returncode == 0, result.stderr[-2000:]
    merged, info = AutoModelForImageTextToText.from_pretrained(tmp_path / "merged", output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched tensors
    expected = trainer.model.merge_and_unload().state_dict()
    assert merged.state_dict().keys() == expected.keys()
    for name, tensor in merged.state_dict().items():
        torch.testing.assert_close(
            tensor, expected[name], rtol=1e-4, atol=5e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
