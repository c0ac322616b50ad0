"""Cosmos3 (`Cosmos3OmniPipeline`): one Mixture-of-Transformers whose reasoner tower reads the chat-templated
prompt and whose generator tower denoises Wan2.2 latents (normalised by latents mean/std). Images are 1-frame
videos (t2i); t2v / i2v / v2v differ only in which latent frames are given clean (`docs/checkpoint-layouts.md`).

- No text encoder: the transformer takes token ids. The pipeline's `tokenize_prompt` adds templates that depend
  on the media shape (resolution, duration, the image or video system prompt), which `encode_prompts` does not
  see, so the conditioning is the prompt's UTF-8 bytes (fixed length, so cached rows can be swapped for text
  dropout) and `predict_velocity` tokenizes from the latents' shape. A dropped caption ("") becomes the tokens
  of the pipeline's unconditional pass (the empty negative prompt with its inverse templates), so the
  unconditional branch trains on what CFG feeds it.
- The velocity comes from `diffusers_cosmos3.batched`: the whole batch in one call of upstream's forward, with
  the reasoner's keys/values cached per prompt while the reasoner is frozen (it always is for full
  fine-tuning, `prepare_full_finetuning`; the default LoRA targets only generator modules).
- LoRA exports load with `pipe.transformer.load_lora_adapter(folder)` (the pipeline has no `load_lora_weights`),
  with a framework-named copy under `framework/` (`diffusers_cosmos3.lora_to_framework`).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from diffusers.loaders.lora_base import LORA_WEIGHT_NAME_SAFE as LORA_WEIGHTS

from ..adapter import DiffusionAdapter, draw_condition_frames

logger = logging.getLogger(__name__)

# Clean leading latent frames per conditioning mode: i2v the first frame, v2v two.
CLEAN_FRAMES = {"t2v": 0, "i2v": 1, "v2v": 2}

# The vision generator: what full fine-tuning trains. Everything else stays frozen: the reasoner (its keys and
# values are cached), and heads a video SFT never reaches (text `norm`/`lm_head`, audio, action), which would get
# no gradient (and break DDP's reducer).
GENERATOR_PARAMETER = re.compile(
    r"^(proj_in|proj_out|time_embedder|norm_moe_gen)\."
    r"|\.self_attn\.(add_q_proj|add_k_proj|add_v_proj|to_add_out|norm_added_q|norm_added_k|k_norm_und_for_gen)\."
    r"|\.mlp_moe_gen\.|_moe_gen\."
)

FRAMEWORK_LORA = "framework/lora_framework.safetensors"


class Cosmos3Adapter(DiffusionAdapter):
    pipeline_class = "Cosmos3OmniPipeline"
    video = True
    # The generator's attention and MLP (never the reasoner's `to_q`/`mlp`), as suffixes PEFT matches exactly.
    lora_target_modules = (
        "add_q_proj",
        "add_k_proj",
        "add_v_proj",
        "to_add_out",
        "mlp_moe_gen.gate_proj",
        "mlp_moe_gen.up_proj",
        "mlp_moe_gen.down_proj",
    )
    # Cosmos Guardrail is built on load when `enable_safety_checker` (an ImportError without `cosmos_guardrail`);
    # training never runs it. `__init__` puts the repo's own setting back, so exports keep it.
    pipeline_load_kwargs = {"enable_safety_checker": False}
    # Conditioning rows: prompts up to this many UTF-8 bytes (fixed length: text dropout swaps cached rows).
    max_prompt_bytes = 4096
    fps = 24.0  # the pipeline's default; it enters the duration template and the temporal positions
    generate_kwargs = {"fps": fps}
    # Prompts whose reasoner keys/values are kept (per prompt: layers x tokens x kv heads x head_dim x 2).
    reasoner_cache_prompts = 32

    def __init__(self, pipeline, options=None):
        super().__init__(pipeline, options)
        self._restore_safety_setting()
        from diffusers_cosmos3.batched import Cosmos3ReasonerCache

        self.reasoner_cache = Cosmos3ReasonerCache(max_prompts=self.reasoner_cache_prompts)
        self._token_ids: dict[tuple, tuple[int, ...]] = {}
        self._warned_trainable_reasoner = False

    def _restore_safety_setting(self) -> None:
        source = self.pipeline.config.get("_name_or_path")
        if not source:
            return
        from diffusers import DiffusionPipeline

        try:
            saved = DiffusionPipeline.load_config(source).get("enable_safety_checker")
        except Exception:  # not a readable repo (a pipeline built in memory): nothing to restore
            return
        if saved is not None:
            self.pipeline.register_to_config(enable_safety_checker=saved)

    def prepare_full_finetuning(self) -> None:
        """Train the vision generator; the reasoner tower stays frozen (`docs/checkpoint-layouts.md`)."""
        trained = 0
        for name, parameter in self.transformer.named_parameters():
            parameter.requires_grad_(bool(GENERATOR_PARAMETER.search(name)))
            trained += parameter.numel() if parameter.requires_grad else 0
        logger.info(
            "Cosmos3 full fine-tuning: %d generator parameters train, the reasoner is frozen", trained
        )

    # --- text ------------------------------------------------------------------------------------------

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        rows = torch.zeros(len(prompts), self.max_prompt_bytes, dtype=torch.uint8)
        lengths = torch.zeros(len(prompts), dtype=torch.long)
        for index, prompt in enumerate(prompts):
            data = prompt.encode("utf-8")
            if len(data) > self.max_prompt_bytes:
                raise ValueError(
                    f"a Cosmos3 prompt has {len(data)} UTF-8 bytes, more than {self.max_prompt_bytes}: "
                    f"shorten it ({prompt[:40]!r}...)"
                )
            rows[index, : len(data)] = torch.tensor(list(data), dtype=torch.uint8)
            lengths[index] = len(data)
        return {"prompt_bytes": rows.to(self.device), "prompt_lengths": lengths.to(self.device)}

    @staticmethod
    def decode_prompts(conditioning: dict[str, torch.Tensor]) -> list[str]:
        rows, lengths = conditioning["prompt_bytes"].cpu(), conditioning["prompt_lengths"].cpu().tolist()
        return [bytes(row[: int(n)].tolist()).decode("utf-8") for row, n in zip(rows, lengths, strict=True)]

    def token_ids(
        self, prompt: str, latent_frames: int, latent_height: int, latent_width: int
    ) -> tuple[int, ...]:
        """The pipeline's tokens for `prompt` at the pixel size the latents decode to; "" gives its unconditional
        (negative-prompt) tokens."""
        pipe = self.pipeline
        frames = 1 if latent_frames == 1 else (latent_frames - 1) * pipe.vae_scale_factor_temporal + 1
        height = latent_height * pipe.vae_scale_factor_spatial
        width = latent_width * pipe.vae_scale_factor_spatial
        key = (prompt, frames, height, width)
        if key not in self._token_ids:
            if len(self._token_ids) > 4096:
                self._token_ids.clear()
            cond, uncond = pipe.tokenize_prompt(
                prompt, negative_prompt="", num_frames=frames, height=height, width=width, fps=self.fps
            )
            self._token_ids[key] = tuple(uncond if prompt == "" else cond)
        return self._token_ids[key]

    # --- pixels <-> latents ----------------------------------------------------------------------------

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """`B x 3 x T x H x W` videos, or `B x 3 x H x W` images as 1-frame videos (t2i); the pipeline's own
        `_encode_video` (posterior mode, latents mean/std)."""
        if pixels.dim() == 4:
            pixels = pixels.unsqueeze(2)
        return self.pipeline._encode_video(pixels.to(self.device).float())

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalised latents -> `B x 3 x T x H x W` in [-1, 1], as the pipeline's decode step."""
        pipe, vae = self.pipeline, self.pipeline.vae
        mean = pipe._vae_latents_mean.to(device=latents.device, dtype=vae.dtype).view(1, -1, 1, 1, 1)
        inv_std = pipe._vae_latents_inv_std.to(device=latents.device, dtype=vae.dtype).view(1, -1, 1, 1, 1)
        return vae.decode(latents.to(vae.dtype) / inv_std + mean).sample

    # --- noise and time --------------------------------------------------------------------------------

    def condition_frames(self, latents: torch.Tensor, generator: torch.Generator | None = None):
        """1-frame latents are t2i: a mode with clean frames falls back to t2v."""
        return draw_condition_frames(self, latents, CLEAN_FRAMES, generator)

    # --- the model call --------------------------------------------------------------------------------

    def reasoner_frozen(self, transformer: torch.nn.Module) -> bool:
        from diffusers_cosmos3.batched import _REASONER_PARAM  # what the cached keys/values depend on

        return not any(
            p.requires_grad and _REASONER_PARAM.search(n) for n, p in transformer.named_parameters()
        )

    def grid_kwargs(self, num_steps, latent_shape):
        """The pipeline's `use_native_flow_schedule`: a plain linear flow grid instead of the scheduler's own."""
        if not self.pipeline.config.get("use_native_flow_schedule"):
            return {}
        import numpy as np

        end = 1.0 - 1.0 / self.pipeline.scheduler.config.num_train_timesteps
        return {"sigmas": np.linspace(end, 0.0, num_steps + 1)[:-1]}

    def predict_velocity(
        self, transformer, noisy_latents, sigmas, conditioning, condition_frames=None, timesteps=None
    ):
        """The batch in one call of upstream's forward (`diffusers_cosmos3.batched`); equal to the pipeline's
        per-sample call. Clean frames (restored by `flow.add_noise`) get no timestep and a zero velocity."""
        from diffusers_cosmos3.batched import Cosmos3TrainingSample, batched_forward, pack_samples

        batch, _, frames, height, width = noisy_latents.shape
        prompts = self.decode_prompts(conditioning)
        timesteps = self.model_timesteps(sigmas.float(), timesteps).tolist()  # the pipeline's timesteps
        samples = []
        for row in range(batch):
            clean = (
                [] if condition_frames is None else torch.nonzero(condition_frames[row]).flatten().tolist()
            )
            samples.append(
                Cosmos3TrainingSample(
                    self.token_ids(prompts[row], frames, height, width),
                    x0=noisy_latents[row],  # its clean frames are x0; the rest is read from `noisy`
                    noisy=noisy_latents[row],
                    timestep=timesteps[row],
                    condition_frames=clean,
                    fps=self.fps,
                )
            )
        packed = pack_samples(self.pipeline, samples)
        cache = self.reasoner_cache if self.reasoner_frozen(transformer) else None
        if cache is None and not self._warned_trainable_reasoner:
            logger.warning("Cosmos3: reasoner parameters are trainable, so its keys/values are not cached")
            self._warned_trainable_reasoner = True
        return torch.cat(batched_forward(transformer, packed, cache=cache))

    # --- sampling with the pipeline itself (validation samples) -----------------------------------------

    def default_size(self) -> tuple[int, int, int | None]:
        # The pipeline resolves None to these (720p, 189 frames: its tokenize_prompt defaults).
        return 720, 1280, 189

    def sample(self, prompt: str, generator: torch.Generator, call: dict) -> torch.Tensor:
        """The pipeline returns `T x 3 x H x W` (one prompt per call): `1 x 3 x H x W` for one frame (t2i), else
        `1 x T x 3 x H x W`."""
        video, _ = self.pipeline(
            prompt=prompt, generator=generator, output_type="pt", return_dict=False, **call
        )
        return video if video.shape[0] == 1 else video[None]

    # --- LoRA export -----------------------------------------------------------------------------------

    def save_lora(
        self, folder: Path, lora_state_dict: dict[str, torch.Tensor], alpha: int, rank: int
    ) -> None:
        """`folder/pytorch_lora_weights.safetensors` in diffusers names (`transformer.` prefix, diffusers' LoRA
        metadata, so the loaded scale is alpha / r), for `lora_loading_call`; and `folder/framework/` with the same
        tensors in framework names (`net.language_model.model...q_proj_moe_gen`)."""
        from diffusers.loaders.lora_base import LORA_ADAPTER_METADATA_KEY
        from safetensors.torch import save_file

        from diffusers_cosmos3 import lora_to_framework

        targets = self._target_modules(lora_state_dict)
        metadata = {"r": rank, "lora_alpha": alpha, "target_modules": targets}
        tensors = {f"transformer.{k}": v.detach().cpu().contiguous() for k, v in lora_state_dict.items()}
        header = {f"transformer.{k}": v for k, v in metadata.items()}
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            tensors,
            str(folder / LORA_WEIGHTS),
            metadata={"format": "pt", LORA_ADAPTER_METADATA_KEY: json.dumps(header, sort_keys=True)},
        )
        framework = {k: v.detach().cpu().contiguous() for k, v in lora_to_framework(lora_state_dict).items()}
        (folder / FRAMEWORK_LORA).parent.mkdir(exist_ok=True)
        save_file(
            framework,
            str(folder / FRAMEWORK_LORA),
            metadata={
                "format": "pt",
                "r": str(rank),
                "lora_alpha": str(alpha),
                "target_modules": json.dumps(self._target_modules(framework)),
            },
        )

    def lora_loading_call(self, folder: Path) -> str:
        return f'pipe.transformer.load_lora_adapter("{folder}", weight_name="{LORA_WEIGHTS}")'

    def _target_modules(self, lora_state_dict: dict[str, torch.Tensor]) -> list[str]:
        """The trained modules as PEFT suffixes that match exactly them: `layers.N.` dropped, the parent kept
        (`mlp_moe_gen.gate_proj` must not also catch the reasoner's `mlp.gate_proj`)."""
        modules = {key.split(".lora_")[0] for key in lora_state_dict}
        return sorted({re.sub(r"^(.*\.)?layers\.\d+\.", "", m).removeprefix("net.") for m in modules})
