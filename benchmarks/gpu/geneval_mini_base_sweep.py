"""Which transformer recipe teaches the GenEval-mini base colour binding: a sweep of the base's MMDiT on a GPU,
8 configurations at once, each in its own process (docs/geneval-mini.md, "Why the logit mean").

    python benchmarks/gpu/geneval_mini_base_sweep.py prepare        # here: pictures + text embeddings (.sweep/)
    python benchmarks/gpu/geneval_mini_base_sweep.py run [SECONDS]   # on the GPU: trains, samples; $OUT/<name>.npz
    python benchmarks/gpu/geneval_mini_base_sweep.py score FOLDER    # here: GenEval-mini per task, train / held-out

A standalone loop, not `cosmos-train diffusion-sft`, so that the GPU machine needs only torch and diffusers: it
mirrors the SFT job `domains.geneval_mini.base` writes (velocity noise - x0, shift 1, caption dropout 0.1 with the
empty caption's embedding, AdamW with warm-up and cosine, gradient clipping at 1, EMA 0.999) and differs in what
each configuration names (blocks, noise-level density, steps, batch, the teacher). The frozen text encoders are
the shipped base's, run once here (`prepare`), as is the rendering of the pairs; the VAE is the shipped base's.
Every 2000 steps the EMA samples the train and held-out prompts (balanced by task, 20 Euler steps, CFG 1 and 3,
fixed seeds), kept as uint8 pictures that `score` judges.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

BENCHMARKS = Path(__file__).resolve().parents[1]
BASE = BENCHMARKS / "geneval_mini" / "base"
DATA = (
    BENCHMARKS.parent / ".sweep"
)  # travels with the working tree (git-ignored; name it in the device's carry)
TMP = "/tmp/geneval_mini_sweep"
CONFIGS = {
    "a_L4": dict(layers=4, heads=4, steps=4000),
    "b_L4_uniform": dict(layers=4, heads=4, steps=4000, density="uniform"),
    "c_L4_high": dict(layers=4, heads=4, steps=4000, logit_mean=0.8),
    "d_L4_long": dict(layers=4, heads=4, steps=12000),
    "e_L6": dict(layers=6, heads=6, steps=6000),
    "f_L8": dict(layers=8, heads=8, steps=8000),
    "h_L4_b256": dict(layers=4, heads=4, steps=4000, batch=256),
    "k_L6_teacher": dict(layers=6, heads=6, steps=6000, data="teacher"),
}


def prepare() -> None:
    """Pictures of the train prompts (right, and a flawed teacher's) with their caption indices, and the text
    embeddings of every prompt and the empty one, by the shipped base's encoders."""
    sys.path.insert(0, str(BENCHMARKS))
    from diffusers import DiffusionPipeline
    from domains.geneval_mini import Vocabulary, all_prompts, balanced_by_task, render, split_prompts
    from domains.geneval_mini.teacher import FlawedTeacher
    from safetensors.torch import save_file

    DATA.mkdir(exist_ok=True)
    vocabulary = Vocabulary()
    train, test = split_prompts(vocabulary, 0)
    records = all_prompts(vocabulary)
    index = {r["prompt"]: i for i, r in enumerate(records)}
    pipeline = DiffusionPipeline.from_pretrained(BASE)
    with torch.no_grad():
        embeds, _, pooled, _ = pipeline.encode_prompt(
            [r["prompt"] for r in records] + [""],
            None,
            None,
            do_classifier_free_guidance=False,
            max_sequence_length=16,
        )
    save_file(
        {"prompt_embeds": embeds.contiguous(), "pooled": pooled.contiguous()}, DATA / "embeds.safetensors"
    )
    rows = balanced_by_task(train)
    out = {}
    for name, teacher in (
        ("right", None),
        ("teacher", FlawedTeacher(counting=0.6, position=0.6, color_attr=0.6)),
    ):
        rng, mistakes = np.random.default_rng(0), np.random.default_rng([0, 1])
        order = np.concatenate([rng.permutation(len(rows)) for _ in range(-(-8192 // len(rows)))])
        pictures, captions = [], []
        for k in range(8192):
            record = rows[order[k]]
            shown = teacher.drawn(record, vocabulary, mistakes) if teacher else record
            pictures.append(render(shown, vocabulary, rng))
            captions.append(index[record["prompt"]])
        out[f"{name}_pictures"], out[f"{name}_captions"] = np.stack(pictures), np.array(captions)
    np.savez_compressed(DATA / "pairs.npz", **out)
    (DATA / "prompts.json").write_text(
        json.dumps(
            {
                "train": [index[r["prompt"]] for r in train],
                "test": [index[r["prompt"]] for r in test],
                "tags": [r["tag"] for r in records],
            }
        )
    )


def worker(name: str) -> None:
    """Train configuration `name`; every 2000 steps, sample the EMA and save the pictures (`TMP/<name>.npz`)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from safetensors.torch import load_file

    defaults = {
        "density": "logit_normal",
        "logit_mean": 0.0,
        "lr": 1e-3,
        "batch": 64,
        "data": "right",
        "drop": 0.1,
    }
    config = defaults | CONFIGS[name]
    torch.backends.cuda.matmul.allow_tf32 = True
    device = os.environ.get("DEVICE", "cuda")
    torch.manual_seed(0)
    pairs = np.load(DATA / "pairs.npz")
    pixels = torch.from_numpy(pairs[f"{config['data']}_pictures"]).permute(0, 3, 1, 2).float() / 127.5 - 1
    captions = torch.from_numpy(pairs[f"{config['data']}_captions"]).long().to(device)
    vae = AutoencoderKL.from_pretrained(BASE / "vae").to(device).eval()
    shift, scale = vae.config.shift_factor, vae.config.scaling_factor
    with torch.no_grad():
        latents = torch.cat([vae.encode(chunk.to(device)).latent_dist.mean for chunk in pixels.split(1024)])
    latents = (latents - shift) * scale
    embeddings = load_file(DATA / "embeds.safetensors")
    embeds, pooled = embeddings["prompt_embeds"].to(device), embeddings["pooled"].to(device)
    empty = len(embeds) - 1
    meta = json.loads((DATA / "prompts.json").read_text())

    def balanced(ids: list[int], per_task: int) -> list[int]:
        out = []
        for task in ("single_object", "two_object", "counting", "colors", "position", "color_attr"):
            rows = [i for i in ids if meta["tags"][i] == task]
            out += [rows[k % len(rows)] for k in range(per_task)]
        return out

    evaluations = {"train": balanced(meta["train"], 12) * 2, "test": balanced(meta["test"], 18) * 3}
    model = SD3Transformer2DModel(
        sample_size=16,
        patch_size=2,
        in_channels=16,
        out_channels=16,
        num_layers=config["layers"],
        attention_head_dim=32,
        num_attention_heads=config["heads"],
        joint_attention_dim=64,
        caption_projection_dim=32 * config["heads"],
        pooled_projection_dim=128,
        pos_embed_max_size=16,
    ).to(device)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    steps = int(os.environ.get("STEPS", config["steps"]))
    warmup = max(1, steps // 50)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            s / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))
        ),
    )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0)
    generator = torch.Generator(device=device).manual_seed(0)

    def velocity(net, x, sigma, ids):
        return net(
            hidden_states=x,
            timestep=sigma * 1000,
            encoder_hidden_states=embeds[ids],
            pooled_projections=pooled[ids],
            return_dict=False,
        )[0]

    @torch.no_grad()
    def sample(ids: list[int], guidance: float) -> np.ndarray:
        ids = torch.tensor(ids, device=device)
        x = torch.randn(
            len(ids), 16, 16, 16, device=device, generator=torch.Generator(device).manual_seed(1234)
        )
        scheduler.set_timesteps(20)
        sigmas = scheduler.sigmas.to(device)
        for k in range(20):
            sigma = sigmas[k].expand(len(ids))
            v = velocity(ema, x, sigma, ids)
            if guidance > 1:
                unconditional = velocity(ema, x, sigma, torch.full_like(ids, empty))
                v = unconditional + guidance * (v - unconditional)
            x = x + (sigmas[k + 1] - sigmas[k]) * v
        images = vae.decode(x / scale + shift).sample
        return ((images.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy()

    results, losses, started = {}, [], time.time()
    for step in range(1, steps + 1):
        index = torch.randint(len(latents), (config["batch"],), device=device, generator=generator)
        x0, ids = latents[index], captions[index]
        dropped = torch.rand(len(ids), device=device, generator=generator) < config["drop"]
        ids = torch.where(dropped, torch.full_like(ids, empty), ids)
        if config["density"] == "uniform":
            sigma = torch.rand(len(ids), device=device, generator=generator)
        else:
            normal = torch.randn(len(ids), device=device, generator=generator)
            sigma = torch.sigmoid(normal + config["logit_mean"])
        noise = torch.randn(x0.shape, device=device, generator=generator)
        level = sigma[:, None, None, None]
        loss = torch.nn.functional.mse_loss(
            velocity(model, (1 - level) * x0 + level * noise, sigma, ids), noise - x0
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for average, weight in zip(ema.parameters(), model.parameters(), strict=True):
                average.lerp_(weight, 1 - 0.999)
        if step % 100 == 0:
            losses.append(loss.item())
        if step % 2000 == 0 or step == steps:
            for split, ids in evaluations.items():
                for guidance in (1.0, 3.0):
                    results[f"{step}_{split}_g{guidance:g}"] = sample(ids, guidance)
            results |= {f"{split}_ids": np.array(ids) for split, ids in evaluations.items()}
            results["losses"] = np.array(losses)
            np.savez_compressed(f"{TMP}/{name}.part.npz", **results)
            os.replace(f"{TMP}/{name}.part.npz", f"{TMP}/{name}.npz")
            print(
                f"{name} step {step} loss {np.mean(losses[-10:]):.4f} {time.time() - started:.0f}s",
                flush=True,
            )


def run(seconds: float) -> None:
    """Every configuration at once, one process each; each npz is copied to $OUT as it stands at the end."""
    os.makedirs(TMP, exist_ok=True)
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + seconds
    logs = {name: open(f"{TMP}/{name}.log", "w") for name in CONFIGS}  # noqa: SIM115 (closed below)
    processes = {
        name: subprocess.Popen(
            [sys.executable, __file__, "worker", name], stdout=log, stderr=subprocess.STDOUT
        )
        for name, log in logs.items()
    }
    while time.time() < deadline and any(p.poll() is None for p in processes.values()):
        time.sleep(5)
    for name, process in processes.items():
        if process.poll() is None:
            process.kill()
        if os.path.exists(f"{TMP}/{name}.npz"):  # one file per configuration: the device returns at most 8
            os.replace(f"{TMP}/{name}.npz", out / f"{name}.npz")
        logs[name].close()
        print(Path(f"{TMP}/{name}.log").read_text().strip().splitlines()[-1:])


def score(folder: Path) -> None:
    """GenEval-mini's strict score per task of every sample set in `folder`'s npz files."""
    sys.path.insert(0, str(BENCHMARKS))
    from domains.geneval_mini import Vocabulary, all_prompts, evaluate, task_scores

    vocabulary = Vocabulary()
    records = all_prompts(vocabulary)
    for path in sorted(folder.glob("*.npz")):
        data = np.load(path)
        keys = sorted((k for k in data if k[0].isdigit()), key=lambda k: (int(k.split("_")[0]), k))
        for key in keys:
            ids = data[f"{key.split('_')[1]}_ids"]
            correct = [
                float(evaluate(image, records[i], vocabulary.colors, vocabulary.shapes).correct)
                for image, i in zip(data[key], ids, strict=True)
            ]
            scores = task_scores(correct, [records[i]["tag"] for i in ids])
            print(f"{path.stem:14s} {key:16s} " + " ".join(f"{t[:6]}={v:.2f}" for t, v in scores.items()))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "run"
    if command == "prepare":
        prepare()
    elif command == "worker":
        worker(sys.argv[2])
    elif command == "score":
        score(Path(sys.argv[2]))
    else:
        run(float(sys.argv[2]) if len(sys.argv) > 2 else 450)
