"""SFT on TRL: learning, model families, freezing, export, logging, non-finite loss."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from PIL import Image
from sft_helpers import SHAPES, cli_in_process, losses, write_job
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

from cosmos_train import tiny_models as tiny
from cosmos_train.algorithms.sft.trainer import run_sft
from cosmos_train.jobs import read_job
from transformers_cosmos3 import Cosmos3ForConditionalGeneration


def _train(folder, model, overrides=None, **kwargs):
    job = read_job(write_job(folder, model, **kwargs), overrides)
    return run_sft(job)


@pytest.fixture(scope="module")
def reasoner(tmp_path_factory):
    return tiny.save_tiny_cosmos3_reasoner(tmp_path_factory.mktemp("reasoner") / "model")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, reasoner):
    folder = tmp_path_factory.mktemp("lora-run")
    # max_steps comes from an override, which the job record and the model card must show.
    return _train(folder, reasoner, ["train.max_steps=40"], train={"learning_rate": 1e-2, "save_steps": 20})


def _inputs(model_dir):
    processor = AutoProcessor.from_pretrained(model_dir)
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What color is the shape?"}]}
    ]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = Image.open(SHAPES / "images" / "blue_circle.png").convert("RGB")
    return processor(text=[text], images=[image], return_tensors="pt", return_mm_token_type_ids=True)


def test_lora_sft_of_cosmos3_reasoner_learns(lora_run):
    history = losses(lora_run)
    assert len(history) == 40 and all(torch.isfinite(torch.tensor(history)))
    first, last = sum(history[:5]) / 5, sum(history[-5:]) / 5
    assert last < 0.75 * first, f"loss did not fall enough: {first:.3f} -> {last:.3f}"
    accuracy = [e["mean_token_accuracy"] for e in lora_run.state.log_history if "mean_token_accuracy" in e]
    assert sum(accuracy[:5]) / 5 < 0.35 and sum(accuracy[-5:]) / 5 > 0.6, accuracy


def test_export_adapter_and_merged_reload_with_same_outputs(lora_run, reasoner, tmp_path):
    trained = lora_run.model.eval()
    inputs = _inputs(reasoner)
    with torch.no_grad():
        reference = trained(**inputs).logits
    run_dir = lora_run.args.output_dir

    adapter = tmp_path / "adapter"
    result = cli_in_process("export", run_dir, adapter)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (adapter / "adapter_config.json").is_file() and (adapter / "README.md").is_file()
    card = (adapter / "README.md").read_text()
    assert "cosmos-train" in card
    # The card shows the effective job: the --set override and absolute paths.
    assert "max_steps = 40" in card and "max_steps = 12" not in card
    assert f'path = "{SHAPES / "llava.json"}"' in card
    reloaded = PeftModel.from_pretrained(
        Cosmos3ForConditionalGeneration.from_pretrained(reasoner), adapter
    ).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, reference)

    merged = tmp_path / "merged"
    result = cli_in_process("export", run_dir, merged, "--merge-lora")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (merged / "adapter_config.json").exists()
    model = AutoModelForImageTextToText.from_pretrained(merged).eval()
    processor = AutoProcessor.from_pretrained(merged)  # the processor travelled with the export
    assert processor.tokenizer.chat_template
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, reference, rtol=1e-4, atol=1e-4)
    assert cli_in_process("export", run_dir, merged, "--merge-lora").returncode == 2  # refuses to overwrite


def test_lora_sft_of_cosmos3_edge_learns_and_exports(tmp_path):
    """Edge's reasoner (relu2 MLP, SigLIP2 ViT, its own processor), as transformers' own save writes it."""
    edge = tiny.save_tiny_model("cosmos3_edge", tmp_path / "edge")
    trainer = _train(tmp_path, edge, train={"max_steps": 60, "learning_rate": 1e-2, "save_steps": 60})
    history = losses(trainer)
    first, last = sum(history[:5]) / 5, sum(history[-5:]) / 5
    assert last < 0.75 * first, f"loss did not fall enough: {first:.3f} -> {last:.3f}"

    merged = tmp_path / "merged"
    assert cli_in_process("export", trainer.args.output_dir, merged, "--merge-lora").returncode == 0
    model = AutoModelForImageTextToText.from_pretrained(merged).eval()
    assert type(model).__name__ == "Cosmos3EdgeForConditionalGeneration"
    inputs = _inputs(merged)
    with torch.no_grad():
        torch.testing.assert_close(
            model(**inputs).logits, trainer.model.eval()(**inputs).logits, rtol=1e-4, atol=1e-4
        )


def test_checkpoints_are_marked_complete(lora_run):
    from cosmos_train.checkpoints import is_complete, latest_complete_checkpoint

    run_dir = lora_run.args.output_dir
    assert latest_complete_checkpoint(run_dir).name == "checkpoint-40"
    assert is_complete(f"{run_dir}/checkpoint-20")


def test_full_finetune_with_frozen_vision_tower(tmp_path, reasoner):
    before = Cosmos3ForConditionalGeneration.from_pretrained(reasoner).state_dict()
    trainer = _train(tmp_path, reasoner, lora=False, train={"max_steps": 3, "save_strategy": "no"})
    # Unfrozen, full fine-tuning moves the vision tower too...
    after = trainer.model.state_dict()
    assert not torch.equal(
        after["model.visual.blocks.0.attn.qkv.weight"], before["model.visual.blocks.0.attn.qkv.weight"]
    )

    # ...frozen, it stays bit-identical while the language model trains.
    (tmp_path / "frozen").mkdir()
    job_path = write_job(
        tmp_path / "frozen", reasoner, lora=False, train={"max_steps": 3, "save_strategy": "no"}
    )
    job = read_job(job_path, ["model.freeze=['vision']"])
    frozen = run_sft(job).model.state_dict()
    visual = [k for k in before if ".visual." in k]
    language = [k for k in before if "language_model.layers" in k]
    assert visual and all(torch.equal(frozen[k], before[k]) for k in visual)
    assert any(not torch.equal(frozen[k], before[k]) for k in language)


@pytest.mark.parametrize("family", ["qwen3_vl", "qwen2_5_vl"])
def test_vlm_families_image_sft(tmp_path, family):
    model = tiny.save_tiny_vlm(tmp_path / family, family)
    trainer = _train(tmp_path, model, train={"max_steps": 4, "save_strategy": "no"})
    history = losses(trainer)
    assert len(history) == 4 and all(map(torch.isfinite, torch.tensor(history)))


def test_video_sft_on_cosmos3_reasoner(tmp_path, reasoner):
    """The JSONL sample mixes image and video conversations; both go through the processor."""
    records = [json.loads(line) for line in (SHAPES / "chat.jsonl").read_text().splitlines()]
    assert any(
        part.get("type") == "video"
        for r in records
        for m in r["messages"]
        if isinstance(m["content"], list)
        for part in m["content"]
    )
    trainer = _train(
        tmp_path,
        reasoner,
        data="jsonl",
        train={"max_steps": 6, "per_device_train_batch_size": 8, "save_strategy": "no"},
    )
    assert all(map(torch.isfinite, torch.tensor(losses(trainer))))


def test_text_lm_sft(tmp_path):
    model = tiny.save_tiny_text_lm(tmp_path / "lm")
    (tmp_path / "text.jsonl").write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": w}]}
            )
            + "\n"
            for w in ["red", "green", "blue", "yellow"] * 4
        )
    )
    job_path = write_job(
        tmp_path, model, train={"max_steps": 20, "learning_rate": 1e-2, "save_strategy": "no"}
    )
    job = read_job(job_path, [f'data.path="{tmp_path / "text.jsonl"}"', 'data.format="jsonl"'])
    trainer = run_sft(job)
    history = losses(trainer)
    assert sum(history[-3:]) / 3 < 0.7 * sum(history[:3]) / 3
    assert isinstance(AutoModelForCausalLM.from_pretrained(trainer.args.output_dir), torch.nn.Module)


def test_tensorboard_logging(tmp_path, reasoner):
    trainer = _train(
        tmp_path, reasoner, train={"max_steps": 2, "save_strategy": "no", "report_to": ["tensorboard"]}
    )
    assert trainer.state.global_step == 2
    # transformers writes TensorBoard events under output_dir/runs/ (TENSORBOARD_LOGGING_DIR overrides).
    assert list((tmp_path / "run" / "runs").rglob("events.out.tfevents.*"))


def test_non_finite_loss_stops_with_clear_message_keeping_last_good_checkpoint(tmp_path, reasoner):
    # Half precision, Adam at learning rate 1 and no clipping: the loss overflows within a few steps.
    job = write_job(
        tmp_path,
        reasoner,
        train={"max_steps": 30, "save_steps": 1, "learning_rate": 1.0, "max_grad_norm": 0.0},
        extra="",
    )
    job.write_text(job.read_text().replace("[model]\n", '[model]\ndtype = "float16"\n'))
    job.write_text(job.read_text().replace("[train]\n", '[train]\nlr_scheduler_type = "constant"\n'))
    result = cli_in_process("sft", "--config", job)
    assert result.returncode == 1, result.stderr[-3000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "loss became" in error[0] and "last good checkpoint" in error[0]
    from cosmos_train.checkpoints import latest_complete_checkpoint

    last = latest_complete_checkpoint(tmp_path / "run")
    assert last is not None and str(last) in error[0]
    from safetensors.torch import load_file

    weights = load_file(last / "adapter_model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())
