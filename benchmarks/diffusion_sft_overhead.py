"""Steps/s of `cosmos-train diffusion-sft` against a bare PyTorch flow-matching loop: same SD3 transformer,
same cached latents and text embeddings, same loss, AdamW and gradient clipping.

    uv run python benchmarks/diffusion_sft_overhead.py [--steps 10] [--warmup 3] [--rounds 5]

The pipeline is the tiny SD3 one (`cosmos_train.tiny_models.pipelines.build_sd3`: CLIP x2, T5, 2x VAE) with a
bigger MMDiT in place of its 2-block toy (`TRANSFORMER`: 4 joint blocks, 4 heads of 48, width 192, about
5M parameters), trained in full on 16 pairs of 64x64 images (32x32 latents: 256 image tokens + 77 CLIP
+ 32 T5 text tokens), batch 4, one thread: a step takes about half a second, so compute dominates.

Both sides train on pre-encoded latents, so the text encoders and the VAE are out of both:
- ours: the real trainer (`run_diffusion_sft` on a job with `[data] cache = true`; the cache is written
  once before the first round and hit afterwards). Its steady-state step time is measured by a
  `TrainerCallback` from the end of step `--warmup` to the end of the last step: data loading (one
  safetensors file per item), the loss, backward, clipping, the optimizer, scheduler and callbacks;
- bare: the same cached tensors held in memory, shuffled into batches of 4, then per step: noise, logit-normal
  sigmas shifted by the scheduler's shift (3), the transformer call, MSE to noise - x0, backward,
  `clip_grad_norm_(1.0)` (the Trainer's default `max_grad_norm`), fused AdamW (the Trainer's default
  `adamw_torch_fused`, lr 1e-4, weight decay 0) and `zero_grad`.

The two sides alternate over `--rounds` (first one, then the other, order flipped each round); the ratio is
the median of the per-round ratios ours / bare time per step (= bare steps/s / ours). Goal: <= 1.10.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from _common import median, write_results
from transformers import TrainerCallback

BATCH = 4
LR = 1e-4
SIZE = 64  # image height and width; the tiny VAE downsamples 2x
MAX_SEQUENCE_LENGTH = 32  # T5 tokens
PAIRS = 16

# The MMDiT trained here (in place of the tiny pipeline's 2-block one).
TRANSFORMER = {
    "sample_size": SIZE // 2,
    "patch_size": 2,
    "in_channels": 4,
    "out_channels": 4,
    "num_layers": 4,
    "attention_head_dim": 48,
    "num_attention_heads": 4,
    "caption_projection_dim": 192,
    "pos_embed_max_size": SIZE // 2,
}


def save_pipeline(folder: Path, transformer: dict, text: dict | None = None, vae: dict | None = None) -> Path:
    """The tiny SD3 pipeline with the MMDiT `transformer` (and, when given, bigger text encoders and VAE:
    `text = {"clip_hidden", "clip_layers", "t5_d_model", "t5_d_ff", "t5_layers", "t5_heads"}`,
    `vae = {"block_out_channels", "layers_per_block"}`), random weights, saved with `save_pretrained`."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from cosmos_train.tiny_models.pipelines import build_sd3
    from transformers_cosmos3.testing import randomize_weights

    def seeded(seed: int, module: torch.nn.Module) -> torch.nn.Module:
        torch.manual_seed(seed)
        randomize_weights(module)
        return module.eval()

    components = build_sd3(seed=0).components
    joint, pooled = 64, 64  # the tiny encoders: T5 d_model 64, two CLIP projections of 32
    if text is not None:
        tokenizer = components["tokenizer"]

        def clip(seed: int):
            config = CLIPTextConfig(
                vocab_size=components["text_encoder"].config.vocab_size,
                hidden_size=text["clip_hidden"],
                intermediate_size=4 * text["clip_hidden"],
                projection_dim=text["clip_hidden"],
                num_hidden_layers=text["clip_layers"],
                num_attention_heads=text["clip_hidden"] // 64,
                max_position_embeddings=77,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            return seeded(seed, CLIPTextModelWithProjection(config))

        t5 = T5Config(
            vocab_size=components["text_encoder_3"].config.vocab_size,
            d_model=text["t5_d_model"],
            d_ff=text["t5_d_ff"],
            d_kv=text["t5_d_model"] // text["t5_heads"],
            num_layers=text["t5_layers"],
            num_heads=text["t5_heads"],
        )
        components |= {
            "text_encoder": clip(1),
            "text_encoder_2": clip(2),
            "text_encoder_3": seeded(3, T5EncoderModel(t5)),
        }
        joint, pooled = text["t5_d_model"], 2 * text["clip_hidden"]
    if vae is not None:
        autoencoder = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            block_out_channels=vae["block_out_channels"],
            layers_per_block=vae["layers_per_block"],
            down_block_types=("DownEncoderBlock2D",) * len(vae["block_out_channels"]),
            up_block_types=("UpDecoderBlock2D",) * len(vae["block_out_channels"]),
            norm_num_groups=32,
            sample_size=SIZE,
            shift_factor=0.0609,
            scaling_factor=1.5035,
            use_quant_conv=False,
            use_post_quant_conv=False,
        )
        autoencoder = seeded(4, autoencoder)
        with torch.no_grad():  # a narrow posterior, as the tiny VAE's
            autoencoder.encoder.conv_out.bias[4:] = -12.0
        components["vae"] = autoencoder
    mmdit = SD3Transformer2DModel(**transformer, joint_attention_dim=joint, pooled_projection_dim=pooled)
    components["transformer"] = seeded(0, mmdit)
    StableDiffusion3Pipeline(**components).save_pretrained(folder)
    return folder


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def write_pairs(folder: Path, count: int = PAIRS, size: int = SIZE) -> Path:
    """`count` pairs of a coloured square or disc on white, `size` x `size` PNG + `{"prompt": ...}` JSON."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    colors = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:size, :size]
    for index in range(count):
        name, rgb = list(colors.items())[index % len(colors)]
        shape = "square" if index % 2 == 0 else "circle"
        cx, cy = (int(v) for v in rng.integers(size // 4, 3 * size // 4, 2))
        r = size // 6
        if shape == "square":
            mask = (abs(xx - cx) <= r) & (abs(yy - cy) <= r)
        else:
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
        pixels = np.full((size, size, 3), 255, dtype=np.uint8)
        pixels[mask] = rgb
        Image.fromarray(pixels).save(folder / f"{index:04d}.png")
        prompt = f"a {name} {shape} on a white background"
        (folder / f"{index:04d}.json").write_text(json.dumps({"prompt": prompt}))
    return folder


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def write_job(
    folder: Path, model: Path, data: Path, cache: bool, cache_dir: Path | None, train: dict
) -> Path:
    """A full fine-tuning `diffusion-sft` job on `data` at SIZE x SIZE."""
    settings = {
        "output_dir": str(folder / "run"),
        "learning_rate": LR,
        "per_device_train_batch_size": BATCH,
        "save_strategy": "no",
        "logging_steps": 10_000,
        "disable_tqdm": True,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "report_to": "none",
        "seed": 0,
    } | train
    data_lines = f'[data]\npath = "{data}"\nheight = {SIZE}\nwidth = {SIZE}\ncache = {_toml(cache)}\n'
    if cache_dir is not None:
        data_lines += f'cache_dir = "{cache_dir}"\n'
    text = "\n".join(
        [
            'kind = "diffusion-sft"\n',
            f'[model]\nname_or_path = "{model}"\n',
            data_lines,
            f"[diffusion]\nmax_sequence_length = {MAX_SEQUENCE_LENGTH}\n",
            "[train]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in settings.items()),
        ]
    )
    folder.mkdir(parents=True, exist_ok=True)
    job = folder / "job.toml"
    job.write_text(text)
    return job


class StepTimer(TrainerCallback):
    """Wall time from the end of the warm-up to the end of the last step: data, step, callbacks, all of it."""

    def __init__(self, warmup: int):
        self.warmup, self.start, self.end, self.steps = warmup, None, None, 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.start = time.perf_counter()
        elif state.global_step > self.warmup:
            self.end, self.steps = time.perf_counter(), state.global_step - self.warmup


def trainer_steps(job_path: Path, steps: int, warmup: int) -> dict:
    """The real trainer on `job_path`: steady-state seconds per step after `warmup` steps."""
    from cosmos_train.algorithms.diffusion_sft.trainer import run_diffusion_sft
    from cosmos_train.jobs import read_job

    job = read_job(job_path)
    timer = StepTimer(warmup)
    run_diffusion_sft(job, callbacks=[timer])
    return {"step_s": (timer.end - timer.start) / timer.steps, "steps_timed": timer.steps}


def cached_tensors(job_path: Path) -> tuple[torch.Tensor, dict[str, torch.Tensor], float]:
    """Every item's cached latents and conditioning (the trainer's cache, hit), stacked in memory; and the
    scheduler's shift."""
    from cosmos_train.data.pairs import load_pairs
    from cosmos_train.diffusion.adapter import AdapterOptions
    from cosmos_train.diffusion.latent_cache import cache_pairs
    from cosmos_train.diffusion.loading import load_adapter
    from cosmos_train.jobs import read_job

    config = read_job(job_path).config
    adapter = load_adapter(
        config.model.name_or_path, AdapterOptions(max_sequence_length=config.diffusion.max_sequence_length)
    )
    dataset, _ = load_pairs(config.data, video=False)
    cached = cache_pairs(dataset, adapter, config.data.cache_dir)
    items = [cached[i] for i in range(len(cached))]
    latents = torch.stack([item["latents"] for item in items]).float()
    conditioning = {
        k: torch.stack([item["conditioning"][k] for item in items]) for k in items[0]["conditioning"]
    }
    return latents, conditioning, adapter.shift


def bare_steps(model_dir: Path, job_path: Path, steps: int, warmup: int) -> dict:
    """A plain PyTorch loop on the same transformer and cached batches: seconds per step after `warmup`."""
    from diffusers import SD3Transformer2DModel

    latents, conditioning, shift = cached_tensors(job_path)
    model = SD3Transformer2DModel.from_pretrained(model_dir / "transformer").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, fused=True)
    generator = torch.Generator().manual_seed(0)
    split = {"forward_backward_s": [], "optimizer_s": []}
    done, wall_start = 0, None
    while done < steps + warmup:
        order = torch.randperm(len(latents), generator=generator)
        for first in range(0, len(order) - BATCH + 1, BATCH):
            if done == steps + warmup:
                break
            t0 = time.perf_counter()
            rows = order[first : first + BATCH]
            x0 = latents[rows]
            noise = torch.randn_like(x0)
            sigmas = torch.sigmoid(torch.randn(BATCH))  # logit-normal(0, 1)
            sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
            sigma = sigmas.view(-1, 1, 1, 1)
            noisy = (1 - sigma) * x0 + sigma * noise
            prediction = model(
                hidden_states=noisy,
                timestep=sigmas * 1000,
                encoder_hidden_states=conditioning["prompt_embeds"][rows],
                pooled_projections=conditioning["pooled_prompt_embeds"][rows],
                return_dict=False,
            )[0]
            loss = ((prediction.float() - (noise - x0)) ** 2).mean()
            loss.backward()
            t1 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t2 = time.perf_counter()
            done += 1
            if done == warmup:
                wall_start = time.perf_counter()
            elif done > warmup:
                split["forward_backward_s"].append(t1 - t0)
                split["optimizer_s"].append(t2 - t1)
    timed = len(split["optimizer_s"])
    wall = (time.perf_counter() - wall_start) / timed
    return {"step_s": wall, **{k: sum(v) / len(v) for k, v in split.items()}, "steps_timed": timed}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model_dir = save_pipeline(scratch / "model", TRANSFORMER)
        data = write_pairs(scratch / "pairs")
        cache_dir = scratch / "cache"
        train = {"max_steps": args.steps + args.warmup}
        # Write the cache once (a one-step run), so every round's trainer and bare loop hit it.
        prime = write_job(scratch / "prime", model_dir, data, True, cache_dir, {"max_steps": 1})
        from cosmos_train.algorithms.diffusion_sft.trainer import run_diffusion_sft
        from cosmos_train.jobs import read_job

        run_diffusion_sft(read_job(prime))
        from diffusers import SD3Transformer2DModel

        transformer_params = parameters(SD3Transformer2DModel.from_pretrained(model_dir / "transformer"))
        for round_ in range(args.rounds):
            job = write_job(scratch / f"job-{round_}", model_dir, data, True, cache_dir, train)
            sides = {
                "bare": lambda job=job: bare_steps(model_dir, job, args.steps, args.warmup),
                "trainer": lambda job=job: trainer_steps(job, args.steps, args.warmup),
            }
            order = ["bare", "trainer"] if round_ % 2 == 0 else ["trainer", "bare"]
            measured = {side: sides[side]() for side in order}
            rounds.append(measured)
            print(
                f"round {round_}: bare {measured['bare']['step_s']:.3f} s/step, "
                f"diffusion-sft {measured['trainer']['step_s']:.3f} s/step, "
                f"ratio {measured['trainer']['step_s'] / measured['bare']['step_s']:.3f}",
                flush=True,
            )
    bare = {key: median([r["bare"][key] for r in rounds]) for key in rounds[0]["bare"]}
    ours = median([r["trainer"]["step_s"] for r in rounds])
    ratios = [r["trainer"]["step_s"] / r["bare"]["step_s"] for r in rounds]
    results = {
        "setup": {
            "transformer": {**TRANSFORMER, "parameters": transformer_params},
            "encoders": "tiny (cosmos_train.tiny_models.pipelines.build_sd3); out of both sides: cached",
            "images": f"{PAIRS} pairs of {SIZE}x{SIZE} (latents 4x{SIZE // 2}x{SIZE // 2})",
            "text_tokens": 77 + MAX_SEQUENCE_LENGTH,
            "batch": BATCH,
            "optimizer": "fused AdamW lr 1e-4 wd 0, clip_grad_norm 1.0, constant lr",
            "steps_timed_per_round": args.steps,
            "warmup_steps": args.warmup,
        },
        "rounds": args.rounds,
        "per_round": [
            {"bare_step_s": round(r["bare"]["step_s"], 4), "ours_step_s": round(r["trainer"]["step_s"], 4)}
            for r in rounds
        ],
        "bare_loop": {
            **{k: round(v, 5) for k, v in bare.items()},
            "steps_per_s": round(1 / bare["step_s"], 3),
        },
        "diffusion_sft": {"step_s": round(ours, 5), "steps_per_s": round(1 / ours, 3)},
        "ratios_per_round": [round(r, 3) for r in ratios],
        "ratio_time_per_step": round(median(ratios), 3),
        "goal": "ratio <= 1.10",
    }
    print(f"bare loop     {results['bare_loop']}")
    print(f"diffusion-sft {results['diffusion_sft']}")
    print(f"ratio (ours time per step / bare), median of rounds = {results['ratio_time_per_step']}")
    write_results("diffusion_sft_overhead", results)


if __name__ == "__main__":
    main()
