"""The GenEval-mini base model: a tiny Stable Diffusion 3 pipeline (diffusers' real classes) that our own
`cosmos-train diffusion-sft` teaches the domain from scratch.

    build_base("geneval-mini-base", Vocabulary(), seed=0)      # about 25 minutes on 2 CPU cores
    check_base("geneval-mini-base")                             # the SHA-256 of every file, as written

How it is built, in order:
1. the domain's train and held-out prompts (`prompts/{train,test}_metadata.jsonl`) and image-caption pairs
   drawn for the train prompts only;
2. a pipeline with random text encoders (two CLIPs and a T5 over a word-level tokenizer of the domain's words:
   frozen, as SD3's are) and a VAE trained here to reconstruct the domain (SD3 trains none of its VAE either;
   a random one cannot draw a flat shape);
3. its transformer trained from scratch by `cosmos-train diffusion-sft` (full fine-tuning, cached latents, EMA)
   on the pairs, exported as a plain diffusers pipeline: `DiffusionPipeline.from_pretrained(folder)`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checksums import check_sums, write_sums
from .domain import (
    NUMBERS,
    RELATIONS,
    Vocabulary,
    _plural,
    balanced_by_task,
    render,
    split_prompts,
    write_metadata,
    write_pairs,
)
from .teacher import FlawedTeacher

LATENT_CHANNELS = 16  # as SD3's VAE: 2 x 2 pixels x 3 colours fit in 16 channels without loss
TEXT_TOKENS = 16  # the longest caption is 11 words; CLIP and T5 both read 16 tokens


def word_tokenizer(vocabulary: Vocabulary):
    """A word-level tokenizer of the domain's words (`<unk>` for others) that ends every text with `</s>`: CLIP
    pools its text at that token, after it has read the whole caption."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    words = {"a", "an", "photo", "of", "and", *NUMBERS.values(), *vocabulary.colors}
    words |= {part for relation in RELATIONS for part in relation.split()}
    words |= set(vocabulary.shapes) | {_plural(shape) for shape in vocabulary.shapes}
    vocab = {token: index for index, token in enumerate(specials + sorted(words))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", vocab["</s>"])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.model_max_length = TEXT_TOKENS
    return tokenizer


def untrained_pipeline(vocabulary: Vocabulary, vae, seed: int = 0):
    """`StableDiffusion3Pipeline` with `vae`, frozen random text encoders and a random 4-block MMDiT."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import T5Config, T5EncoderModel

    from cosmos_train.tiny_models.pipelines import clip_text_encoder

    tokenizer = word_tokenizer(vocabulary)

    def clip(offset: int):
        return clip_text_encoder(
            tokenizer, width=64, max_positions=TEXT_TOKENS, seed=seed + offset, vocab_size=len(tokenizer)
        )

    torch.manual_seed(seed + 3)
    t5 = T5EncoderModel(
        T5Config(vocab_size=len(tokenizer), d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4)
    ).eval()
    torch.manual_seed(seed)
    latent = vocabulary.size // 2
    transformer = SD3Transformer2DModel(
        sample_size=latent,
        patch_size=2,
        in_channels=vae.config.latent_channels,
        out_channels=vae.config.latent_channels,
        num_layers=4,
        attention_head_dim=32,
        num_attention_heads=4,
        joint_attention_dim=64,
        caption_projection_dim=128,
        pooled_projection_dim=128,
        pos_embed_max_size=latent,
    )
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=1.0),
        vae=vae,
        text_encoder=clip(1),
        tokenizer=tokenizer,
        text_encoder_2=clip(2),
        tokenizer_2=word_tokenizer(vocabulary),
        text_encoder_3=t5,
        tokenizer_3=word_tokenizer(vocabulary),
    )


def train_vae(vocabulary: Vocabulary, records: list[dict], seed: int = 0, steps: int = 1500, log=print):
    """An `AutoencoderKL` (2x down, 16 latent channels) trained to reconstruct the domain's pictures (L1 +
    a small KL), with SD3's latent shift and scale set from its latents."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=LATENT_CHANNELS,
        block_out_channels=(16, 32),
        layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8,
        mid_block_add_attention=False,
        sample_size=vocabulary.size,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    rng = np.random.default_rng(seed)
    pictures = np.stack([render(records[i % len(records)], vocabulary, rng) for i in range(4096)])
    pixels = torch.from_numpy(pictures).permute(0, 3, 1, 2).float() / 127.5 - 1
    optimizer = torch.optim.AdamW(vae.parameters(), lr=2e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=steps, pct_start=0.05)
    generator = torch.Generator().manual_seed(seed)
    vae.train()
    for step in range(steps):
        batch = pixels[torch.randint(len(pixels), (32,), generator=generator)]
        posterior = vae.encode(batch).latent_dist
        reconstruction = vae.decode(posterior.sample(generator)).sample
        loss = (reconstruction - batch).abs().mean() + 1e-6 * posterior.kl().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == steps - 1:
            log(f"vae step {step}: L1 {loss.item():.4f}")
    vae.eval()
    with torch.no_grad():
        latents = torch.cat([vae.encode(chunk).latent_dist.mean for chunk in pixels[:1024].split(256)])
    vae.register_to_config(
        shift_factor=round(latents.mean().item(), 4), scaling_factor=round(1 / latents.std().item(), 4)
    )
    return vae


def sft_job(vocabulary: Vocabulary, seed: int, steps: int, logit_mean: float = 0.8) -> str:
    """The `cosmos-train diffusion-sft` job that teaches the transformer (paths relative to the job file).
    `logit_mean` > 0 trains high noise levels more often: that is where a flat shape's colour and place are
    decided (on a GPU sweep of this base, 0.8 against 0 raised held-out colours at CFG 3 from 0.17 to 0.91 at
    4000 steps, the same compute)."""
    return f"""\
# Teaches the GenEval-mini base model (written by domains.geneval_mini.base.build_base).
kind = "diffusion-sft"

[model]
name_or_path = "untrained"

[data]
path = "pairs"
height = {vocabulary.size}
width = {vocabulary.size}
cache = true

[diffusion]
timestep_density = "logit_normal"
logit_mean = {logit_mean}
max_sequence_length = {TEXT_TOKENS}
ema_decay = 0.999
text_dropout = 0.1

[train]
output_dir = "sft"
learning_rate = 1e-3
lr_scheduler_type = "cosine"
warmup_steps = {max(1, steps // 50)}
weight_decay = 0.0
max_grad_norm = 1.0
max_steps = {steps}
per_device_train_batch_size = 64
logging_steps = {max(1, steps // 40)}
save_steps = {steps}
save_total_limit = 1
dataloader_num_workers = 0
report_to = "none"
seed = {seed}
"""


def build_base(
    output: str | Path,
    vocabulary: Vocabulary | None = None,
    seed: int = 0,
    pairs: int = 8192,
    sft_steps: int = 4000,
    vae_steps: int = 1500,
    logit_mean: float = 0.8,
    work: str | Path | None = None,
    teacher: FlawedTeacher | None = None,
    log=print,
) -> Path:
    """Build the base pipeline into `output` (with `prompts/`, `vocabulary.json`, `build.json` and `SHA256SUMS`).
    `work` keeps the pairs, the untrained pipeline and the SFT run (default: `output` + `.work`). With a
    `teacher`, the SFT pairs are its pictures (`teacher.FlawedTeacher`: right but for a share of some tasks'),
    and `build.json` records its shares."""
    vocabulary = vocabulary or Vocabulary()
    output = Path(output)
    work = Path(work) if work else output.with_name(output.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, test = split_prompts(vocabulary, seed)
    write_metadata(work / "prompts" / "train_metadata.jsonl", train)
    write_metadata(work / "prompts" / "test_metadata.jsonl", test)
    log(f"pairs: {pairs} pictures of {len(train)} train prompts ({len(test)} held out), tasks balanced")
    write_pairs(work / "pairs", balanced_by_task(train), pairs, vocabulary, seed=seed, teacher=teacher)
    vae = train_vae(vocabulary, train, seed=seed, steps=vae_steps, log=log)
    untrained_pipeline(vocabulary, vae, seed).save_pretrained(work / "untrained")
    (work / "sft.toml").write_text(sft_job(vocabulary, seed, sft_steps, logit_mean))
    log(f"cosmos-train diffusion-sft -c {work / 'sft.toml'}")
    subprocess.run(
        [sys.executable, "-m", "cosmos_train", "diffusion-sft", "-c", str(work / "sft.toml")], check=True
    )
    exported = work / "sft" / "safetensors" / f"step_{sft_steps}"
    if output.exists():
        shutil.rmtree(output)
    shutil.copytree(exported, output)
    forget_build_paths(output)
    shutil.copytree(work / "prompts", output / "prompts")
    (output / "vocabulary.json").write_text(json.dumps(vocabulary.as_dict(), indent=1) + "\n")
    build = {
        "seed": seed,
        "pairs": pairs,
        "sft_steps": sft_steps,
        "vae_steps": vae_steps,
        "logit_mean": logit_mean,
    }
    if teacher is not None:
        build["teacher"] = teacher.as_dict()
    build["seconds"] = round(time.perf_counter() - started, 1)
    (output / "build.json").write_text(json.dumps(build, indent=1) + "\n")
    write_sums(output)
    log(f"base model in {output} ({build['seconds']:.0f} s)")
    return output


def forget_build_paths(folder: Path) -> None:
    """Drop the `_name_or_path` diffusers writes into each component's config: the build's own work folder, a
    path of the machine that built it and of no use to one that loads it."""
    for config in [folder / "model_index.json", *folder.glob("*/config.json")]:
        data = json.loads(config.read_text())
        if data.pop("_name_or_path", None) is not None:
            config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_vocabulary(folder: str | Path) -> Vocabulary:
    """The vocabulary a base model was built for (its `vocabulary.json`)."""
    data: dict[str, Any] = json.loads((Path(folder) / "vocabulary.json").read_text())
    return Vocabulary(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def check_base(folder: str | Path) -> None:
    """Raise ValueError naming the first file that differs from the folder's `SHA256SUMS`: the shipped weights
    are the ones the benchmark's figures were measured on."""
    check_sums(folder, rebuild="benchmarks/geneval_mini.py --rebuild-base")
