"""The README's "How much memory" table: `cosmos_train.memory` estimates (not measurements) for real model shapes on
8 x 80 GB, LoRA and full fine-tuning, under DDP and ZeRO-3.

    OMP_NUM_THREADS=1 python benchmarks/memory_table.py                   # prints a Markdown table
    OMP_NUM_THREADS=1 python benchmarks/memory_table.py --write-configs   # rewrites examples/model_configs/

Nothing is downloaded: the job files name the hub models, and each is estimated with its configuration shipped under
examples/model_configs/ (real shapes, written by `--write-configs`; JSON only, no weights) in place of the hub
model, as `cosmos-train estimate-memory JOB --model-config examples/model_configs/NAME` does; the estimate builds the
models on the meta device. Workloads (bf16 mixed precision):
- SFT: 8 conversations of 2048 tokens per device, gradient checkpointing on (TRL's default);
- GRPO: 8 completions of 512 tokens (+ 512 prompt tokens assumed) per device, checkpointing on, beta 0;
- diffusion SFT: 4 images of 1024 x 1024 per device, checkpointing on;
- DiffusionNFT: training forwards of the job's default 8 samples of 512 x 512, checkpointing on, EMA and old
  policy kept.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GB80 = 80 * 10**9  # an "80 GB" H100/A100: 80 GB, about 74.5 GiB usable before the CUDA context
PROCESSES = 8
CHATS = REPO / "examples" / "data" / "shapes" / "text.jsonl"
PROMPTS = REPO / "examples" / "data" / "prompts" / "colors.txt"

CONFIGS = REPO / "examples" / "model_configs"

QWEN3 = {
    # folder: (hidden, layers, heads, kv heads, intermediate, tied embeddings)
    "qwen3-1.7b": (2048, 28, 16, 8, 6144, True),
    "qwen3-8b": (4096, 36, 32, 8, 12288, False),
}
# The table's rows: name -> (family, the hub model the jobs name, its folder under examples/model_configs/).
MODELS = {
    "Qwen3-1.7B": ("language", "Qwen/Qwen3-1.7B", "qwen3-1.7b"),
    "Qwen3-8B (the text tower of Qwen3-VL-8B / Cosmos3-Nano's reasoner)": (
        "language",
        "Qwen/Qwen3-8B",
        "qwen3-8b",
    ),
    "SD3.5-Medium (MMDiT 2.2B; CLIP-L, CLIP-G, T5-XXL, VAE)": (
        "diffusion",
        "stabilityai/stable-diffusion-3.5-medium",
        "sd3.5-medium",
    ),
}
KINDS = {"language": ("sft", "grpo"), "diffusion": ("diffusion-sft", "nft")}
COLUMNS = [(lora, backend) for lora in (True, False) for backend in ("ddp", "zero3")]


def write_qwen3(folder: Path, hidden, layers, heads, kv_heads, intermediate, tied) -> Path:
    from transformers import Qwen3Config

    Qwen3Config(
        vocab_size=151936,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=128,
        intermediate_size=intermediate,
        tie_word_embeddings=tied,
        dtype="bfloat16",
    ).save_pretrained(folder)
    return folder


def write_sd3_5_medium(folder: Path) -> Path:
    """SD3.5-Medium's model_index.json and component configs: its MMDiT and VAE (benchmarks/gpu/run.py's), CLIP-L,
    CLIP-G and T5-XXL at their real sizes."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel

    sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))
    from run import SD3_5_MEDIUM
    from transformers import CLIPTextConfig, T5Config

    for name, cls, config in (
        ("transformer", SD3Transformer2DModel, SD3_5_MEDIUM["transformer"]),
        ("vae", AutoencoderKL, SD3_5_MEDIUM["vae"]),
    ):
        (folder / name).mkdir(parents=True)
        (folder / name / "config.json").write_text(
            json.dumps({"_class_name": cls.__name__, **config}, indent=2) + "\n"
        )
    clip = {"vocab_size": 49408, "max_position_embeddings": 77, "hidden_act": "gelu"}
    CLIPTextConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        projection_dim=768,
        **clip,
    ).save_pretrained(folder / "text_encoder")
    CLIPTextConfig(
        hidden_size=1280,
        intermediate_size=5120,
        num_hidden_layers=32,
        num_attention_heads=20,
        projection_dim=1280,
        **clip,
    ).save_pretrained(folder / "text_encoder_2")
    T5Config(
        vocab_size=32128,
        d_model=4096,
        d_ff=10240,
        d_kv=64,
        num_heads=64,
        num_layers=24,
        feed_forward_proj="gated-gelu",
    ).save_pretrained(folder / "text_encoder_3")
    index = {
        "_class_name": "StableDiffusion3Pipeline",
        "transformer": ["diffusers", "SD3Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_3": ["transformers", "T5EncoderModel"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    }
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return folder


def write_configs(folder: Path = CONFIGS) -> None:
    """examples/model_configs/: each model's configuration files at its real shapes (no weights)."""
    for name, shape in QWEN3.items():
        shutil.rmtree(folder / name, ignore_errors=True)
        write_qwen3(folder / name, *shape)
    shutil.rmtree(folder / "sd3.5-medium", ignore_errors=True)
    write_sd3_5_medium(folder / "sd3.5-medium")


def job_text(kind: str, model: Path | str, lora: bool, backend: str, out: Path) -> str:
    train = f'output_dir = "{out}"\nbf16 = true\nreport_to = "none"\n'
    lora_section = "[lora]\nr = 16\nalpha = 32\n" if lora else ""
    if kind == "sft":
        body = f'[data]\nformat = "jsonl"\npath = "{CHATS}"\nmax_length = 2048\n'
        train += "per_device_train_batch_size = 8\n"
    elif kind == "grpo":
        body = f'[data]\nformat = "jsonl"\npath = "{CHATS}"\n[rewards]\nlength = 1.0\n'
        train += "per_device_train_batch_size = 8\nnum_generations = 8\nmax_completion_length = 512\n"
    elif kind == "diffusion-sft":
        body = f'[data]\npath = "{out}"\nformat = "folder"\nheight = 1024\nwidth = 1024\n'
        train += "per_device_train_batch_size = 4\ngradient_checkpointing = true\n"
    else:  # nft
        body = (
            f'[data]\npath = "{PROMPTS}"\n[rewards]\nbrightness = 1.0\n[rollout]\nheight = 512\nwidth = 512\n'
        )
        train += "gradient_checkpointing = true\n"
        lora_section = "[lora]\n" if lora else ""
    return (
        f'kind = "{kind}"\n[model]\nname_or_path = "{model}"\n'
        + ('dtype = "bfloat16"\n' if kind in ("diffusion-sft", "nft") else "")
        + f'{lora_section}{body}[launch]\nbackend = "{backend}"\n[train]\n{train}'
    )


def cell(kind: str, model: str, lora: bool, backend: str, folder: Path) -> str:
    """One cell: the peak per device of the table's `kind` job on `model` (estimated with the configs of
    examples/model_configs/`folder`), in GB, and whether it fits in 80 GB."""
    from cosmos_train import memory

    with tempfile.TemporaryDirectory() as temp:
        temp = Path(temp)
        path = temp / "job.toml"
        path.write_text(job_text(kind, model, lora, backend, temp / "out"))
        try:
            job, read_backend = memory.read_job(path, model_config=CONFIGS / folder)
            result = memory.estimate(job, PROCESSES, read_backend)
        except Exception as error:  # a kind whose job cannot be read here: said in the cell
            return f"n/a ({type(error).__name__})"
    return f"{result.peak / 10**9:.0f} GB {'fits' if result.peak <= GB80 else '**no**'}"


def rows() -> list[str]:
    out = []
    for name, (family, model, folder) in MODELS.items():
        for kind in KINDS[family]:
            cells = [cell(kind, model, lora, backend, folder) for lora, backend in COLUMNS]
            out.append(f"| {name} | {kind} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write-configs", action="store_true", help="rewrite examples/model_configs/ from the shapes here"
    )
    if parser.parse_args().write_configs:
        write_configs()
        print(f"wrote {CONFIGS}")
        return
    print("| model | kind | LoRA, ddp | LoRA, zero3 | full, ddp | full, zero3 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows()))


if __name__ == "__main__":
    main()
