"""Cosmos3's action modes (policy, forward dynamics, inverse dynamics) built as upstream's pipeline builds them, for
training: the conditioning canvas and its latents, the structured JSON caption's tokens, which frames and steps are
clean, and the noised sample the batched forward takes.

Upstream's `Cosmos3OmniPipeline(action=CosmosActionCondition(...))` samples one action chunk per call and has no
loss. Each helper here calls the pipeline's own private step (`_prepare_action_video_conditioning`,
`_encode_video`, `_remove_action_video_padding_from_latent`, `tokenize_prompt(action_mode=...)`,
`_prepare_action_segment` through `batched.pack_samples`), so a training forward equals the transformer call the
pipeline makes for the same inputs (`tests/diffusers_cosmos3/test_actions.py` pins it per mode). What upstream
cannot express, as cosmos-framework trains it, is a setting: any raw action width (LIBERO's 10-D has no entry in
upstream's table), a clean state row first at offset 0 (`use_state`), the dataset's fps, and no system prompt.

    settings = ActionSettings("policy", chunk_size=16, domain="libero", raw_action_dim=10, fps=20, resolution_tier=256)
    x0, canvas = conditioning_latents(pipe, frames, settings)          # frames: [T+1, H, W, 3] uint8
    ids, uncond_ids = action_prompt_ids(pipe, "put the bowl on the plate", settings, canvas)
    sample = noised_sample(ids, x0, pad_actions(actions, action_dim), settings, sigma, eps, eps_action)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

import torch

from .batched import Cosmos3TrainingSample

ActionMode = Literal["policy", "forward_dynamics", "inverse_dynamics"]
ACTION_MODES: tuple[str, ...] = ("policy", "forward_dynamics", "inverse_dynamics")

# cosmos-framework's domain ids that upstream's table lacks (`domain_utils.py`); several names share an id on purpose:
# the id picks projection rows, not a dataset.
EXTRA_DOMAIN_IDS = {
    "xdof_yam": 16,
    "molmoact2_yam": 16,
    "abc_yam": 16,
    "robotwin": 17,
    "drawanything": 21,
    "behavior1k_lerobot": 22,
    "maniparena": 23,
}


def domain_ids() -> dict[str, int]:
    """Every embodiment name with its row in the domain-aware action projections: upstream's, then
    cosmos-framework's extra ones."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _EMBODIMENT_TO_DOMAIN_ID

    return {**EXTRA_DOMAIN_IDS, **_EMBODIMENT_TO_DOMAIN_ID}


def domain_id(domain: str | int, num_domains: int | None = None) -> int:
    """The projection row of `domain` (a name, or an id used as is)."""
    if isinstance(domain, int):
        index = domain
    else:
        known = domain_ids()
        if domain not in known:
            close = difflib.get_close_matches(domain, known, n=1)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else f"{len(known)} known, e.g. {', '.join(sorted(known)[:5])}"
            )
            raise ValueError(f"unknown Cosmos3 embodiment domain {domain!r} ({hint})")
        index = known[domain]
    if index < 0 or (num_domains is not None and index >= num_domains):
        raise ValueError(f"domain id {index} is outside the model's {num_domains} action domains")
    return index


@dataclass(frozen=True)
class ActionSettings:
    """How one action sample is laid out.

    `chunk_size` actions describe transitions between `chunk_size + 1` frames. `raw_action_dim` is the domain's
    action width (channels past it are zero). `use_state` puts the current state as a clean row 0 before the
    actions, at offset 0 (cosmos-framework's DROID policy); `fps` is the dataset's, which places the action tokens
    in time and enters the caption. `use_system_prompt=False` is how cosmos-framework trains.
    """

    mode: ActionMode
    chunk_size: int
    domain: str | int
    raw_action_dim: int
    fps: float
    resolution_tier: int = 480
    view_point: str | None = "ego_view"
    use_state: bool = False
    use_system_prompt: bool = False

    def __post_init__(self):
        if self.mode not in ACTION_MODES:
            raise ValueError(f"action mode must be one of {', '.join(ACTION_MODES)}, got {self.mode!r}")
        if self.chunk_size < 1 or self.raw_action_dim < 1 or self.fps <= 0:
            raise ValueError("chunk_size and raw_action_dim must be positive, and fps above 0")

    @property
    def num_frames(self) -> int:
        return self.chunk_size + 1

    @property
    def action_rows(self) -> int:
        """Action tokens: the chunk, plus the state row when `use_state`."""
        return self.chunk_size + int(self.use_state)

    @property
    def action_start_offset(self) -> int:
        return 0 if self.use_state else 1

    @property
    def first_frame_only(self) -> bool:
        """Whether the first frame is the only clean one (policy, forward dynamics); inverse dynamics sees them all."""
        return self.mode != "inverse_dynamics"

    def clean_frames(self, latent_frames: int) -> list[int]:
        """Clean vision latent frames: the first (policy, forward dynamics) or all (inverse dynamics)."""
        return [0] if self.first_frame_only else list(range(latent_frames))

    def clean_steps(self) -> list[int]:
        """Clean action rows: all of them for forward dynamics (they are its input), and the state row."""
        if self.mode == "forward_dynamics":
            return list(range(self.action_rows))
        return [0] if self.use_state else []


def conditioning_latents(
    pipe, frames, settings: ActionSettings, first_frame_only: bool = False
) -> tuple[torch.Tensor, tuple[int, int]]:
    """The clean vision latents `[C, T, h, w]` of `chunk_size + 1` frames on the tier's canvas, cropped to the
    content as the pipeline crops them, and the canvas `(height, width)` (which the caption states).

    `frames`: uint8 pixels (`[T, H, W, 3]`, one `[H, W, 3]` image, or a list of them; numpy or torch), a list of PIL
    images, or anything else the pipeline's `CosmosActionCondition.video` takes; fewer than `chunk_size + 1` frames
    repeat the last, as upstream does. `first_frame_only` encodes the first frame alone and leaves the later latent
    frames zero: the causal VAE's first latent frame sees only the first frame, and a sampler that keeps only it
    clean (policy, forward dynamics) never reads the rest, so a policy call skips most of its encoding."""
    frames = _unit_pixels(frames)
    if first_frame_only:
        first = frames[:1] if isinstance(frames, list | tuple) or hasattr(frames, "shape") else [frames]
        latents, canvas = first_frame_latents(pipe, [first], settings)
        return latents[0], canvas
    device, dtype = pipe._execution_device, pipe.transformer.dtype
    video, image_size, height, width = pipe._prepare_action_video_conditioning(
        frames, settings.resolution_tier, settings.num_frames, device=device, dtype=dtype
    )
    latents = pipe._encode_video(video).contiguous().float()
    latents = pipe._remove_action_video_padding_from_latent(latents, image_size)
    return latents[0], (height, width)


def first_frame_latents(pipe, frames, settings: ActionSettings) -> tuple[torch.Tensor, tuple[int, int]]:
    """`conditioning_latents(..., first_frame_only=True)` of several current frames at once, `[B, C, T, h, w]`,
    and their canvas: each frame is laid on the canvas as upstream lays a clip's first frame, and all are encoded in
    one autoencoder call (a batch of one-frame clips: the causal VAE's first latent frame sees that frame alone).
    `frames`: one frame each, in any form `conditioning_latents` takes; all of one size (one canvas)."""
    device, dtype = pipe._execution_device, pipe.transformer.dtype
    clips, sizes = [], set()
    for frame in frames:
        # One frame is a whole clip to upstream: it is placed on the canvas as the clip's first frame would be.
        clip, image_size, height, width = pipe._prepare_action_video_conditioning(
            _unit_pixels(frame), settings.resolution_tier, 1, device=device, dtype=dtype
        )
        clips.append(clip[:, :, :1])
        sizes.add((tuple(image_size.tolist()), height, width))
    if len(sizes) != 1:
        raise ValueError(f"the frames lie on different canvases ({sorted(sizes)}): encode them apart")
    first = pipe._encode_video(torch.cat(clips)).contiguous().float()
    latent_frames = (settings.num_frames - 1) // pipe.vae_scale_factor_temporal + 1
    latents = torch.nn.functional.pad(first, (0, 0, 0, 0, 0, latent_frames - 1))  # zero later frames
    return pipe._remove_action_video_padding_from_latent(latents, image_size), (height, width)


def _unit_pixels(frames):
    """uint8 frames as `[T, 3, H, W]` floats in [0, 1]: upstream reads a uint8 numpy frame as if it held floats in
    [0, 1] (values up to 255 then go through its normalisation), so pixels never reach it as uint8. PIL images and
    float tensors pass as given."""
    if (
        isinstance(frames, list | tuple)
        and frames
        and all(hasattr(f, "shape") and len(f.shape) == 3 for f in frames)
    ):
        frames = torch.stack([torch.as_tensor(f) for f in frames])
    elif hasattr(frames, "shape") and len(frames.shape) == 3 and frames.shape[-1] == 3:
        frames = torch.as_tensor(frames)[None]
    if hasattr(frames, "shape") and len(frames.shape) == 4 and frames.shape[-1] == 3:
        pixels = torch.as_tensor(frames)
        if pixels.dtype == torch.uint8:
            return pixels.permute(0, 3, 1, 2).float() / 255.0
    return frames


def action_prompt_ids(
    pipe, task: str, settings: ActionSettings, canvas: tuple[int, int], negative_prompt: str = ""
) -> tuple[list[int], list[int]]:
    """The pipeline's tokens for the structured action caption of `task`, and its unconditional tokens (what a
    dropped caption trains, for CFG)."""
    height, width = canvas
    return pipe.tokenize_prompt(
        task,
        negative_prompt=negative_prompt,
        num_frames=settings.num_frames,
        height=height,
        width=width,
        fps=settings.fps,
        use_system_prompt=settings.use_system_prompt,
        action_mode=settings.mode,
        action_view_point=settings.view_point,
    )


def pad_actions(actions: torch.Tensor, action_dim: int) -> torch.Tensor:
    """`[T, raw]` actions zero-padded on the channel axis to the model's `action_dim`, as the pipeline pads them."""
    actions = torch.as_tensor(actions, dtype=torch.float32)
    if actions.ndim != 2 or actions.shape[1] > action_dim:
        raise ValueError(
            f"actions must be [T, D] with D <= the model's action_dim {action_dim}, got {tuple(actions.shape)}"
        )
    return torch.nn.functional.pad(actions, (0, action_dim - actions.shape[1]))


def noised_sample(
    input_ids,
    x0: torch.Tensor,
    actions: torch.Tensor,
    settings: ActionSettings,
    sigma: float | torch.Tensor,
    noise: torch.Tensor,
    action_noise: torch.Tensor,
) -> Cosmos3TrainingSample:
    """One training sample: `x_t = sigma * eps + (1 - sigma) * x0` for the vision latents and the padded actions
    (`[action_rows, action_dim]`, the state row first when `use_state`), with one sigma shared by both (as
    cosmos-framework trains) and the channels past `raw_action_dim` zero; clean frames and steps are taken from x0
    by the sample."""
    sigma_value = float(sigma)
    if actions.shape[0] != settings.action_rows:
        raise ValueError(
            f"expected {settings.action_rows} action rows for {settings}, got {actions.shape[0]}"
        )
    noisy_actions = sigma_value * action_noise + (1 - sigma_value) * actions
    noisy_actions[:, settings.raw_action_dim :] = 0
    return Cosmos3TrainingSample(
        input_ids,
        x0=x0,
        noisy=sigma_value * noise + (1 - sigma_value) * x0,
        timestep=sigma_value * 1000,
        condition_frames=settings.clean_frames(x0.shape[-3]),
        fps=settings.fps,
        action_x0=actions,
        action_noisy=noisy_actions,
        action_condition_steps=settings.clean_steps(),
        domain_id=domain_id(settings.domain),
        action_start_offset=settings.action_start_offset,
    )


# ---------------------------------------------------------------------------------------------------------
# Sampling an action chunk, and the policy call


@torch.no_grad()
def sample_action_chunk(
    pipe,
    settings: ActionSettings,
    frames,
    task: str,
    state=None,
    num_inference_steps: int = 30,
    guidance_scale: float = 1.0,
    generator: torch.Generator | None = None,
    negative_prompt: str = "",
) -> torch.Tensor:
    """The model-space action chunk `[chunk_size, raw_action_dim]` for a policy (`frames`: the current frame, as a
    one-frame list or an image) or inverse dynamics (`frames`: the `chunk_size + 1` frames), sampled as upstream's
    `Cosmos3OmniPipeline(action=...)` samples it (its scheduler, one per modality, the same noise draws, CFG on
    both), and equal to it where upstream can express the settings (`test_actions.py`). Beyond upstream: any raw
    width, a clean state row first (`use_state`; `state` already in the model's space), the caption without the
    system prompt."""
    import copy

    import numpy as np
    from diffusers.utils.torch_utils import randn_tensor

    from .batched import batched_outputs, pack_samples

    if settings.mode == "forward_dynamics":
        raise ValueError(
            "forward dynamics predicts frames, not actions: use the pipeline with its raw_actions"
        )
    if settings.use_state and state is None:
        raise ValueError("these settings put a state row first (use_state): pass the current state")
    if not isinstance(frames, list | tuple) and not hasattr(frames, "shape"):
        frames = [frames]  # one PIL image
    device = pipe._execution_device
    transformer = pipe.transformer
    x0, canvas = conditioning_latents(pipe, frames, settings, first_frame_only=settings.first_frame_only)
    cond_ids, uncond_ids = action_prompt_ids(pipe, task, settings, canvas, negative_prompt)
    action_dim, raw = transformer.config.action_dim, settings.raw_action_dim

    clean_frames, clean_steps = settings.clean_frames(x0.shape[1]), settings.clean_steps()
    frame_mask = torch.zeros(x0.shape[1], 1, 1, device=device)
    frame_mask[clean_frames] = 1
    latents = x0[None] * frame_mask + (1 - frame_mask) * randn_tensor(
        (1, *x0.shape), generator=generator, device=device, dtype=torch.float32
    )
    a0 = torch.zeros(settings.action_rows, action_dim, device=device)
    if settings.use_state:
        row = torch.as_tensor(np.asarray(state, dtype=np.float32), device=device).reshape(-1)
        a0[0, : row.numel()] = row
    step_mask = torch.zeros(settings.action_rows, 1, device=device)
    step_mask[clean_steps] = 1
    actions = step_mask * a0 + (1 - step_mask) * randn_tensor(
        tuple(a0.shape), generator=generator, device=device, dtype=torch.float32
    )
    actions[:, raw:] = 0

    scheduler = copy.deepcopy(pipe.scheduler)
    if pipe.config.get("use_native_flow_schedule"):
        end = 1.0 - 1.0 / scheduler.config.num_train_timesteps
        scheduler.set_timesteps(
            num_inference_steps, device=device, sigmas=np.linspace(end, 0.0, num_inference_steps + 1)[:-1]
        )
    else:
        scheduler.set_timesteps(num_inference_steps, device=device)
    action_scheduler = copy.deepcopy(scheduler)
    guided = guidance_scale != 1.0
    domain = domain_id(settings.domain, transformer.config.get("num_embodiment_domains"))
    dtype = transformer.dtype
    for t in scheduler.timesteps:
        samples = [
            loop_sample(ids, latents[0].to(dtype), actions.to(dtype), float(t), settings, domain)
            for ids in ((cond_ids, uncond_ids) if guided else (cond_ids,))
        ]
        outputs = batched_outputs(transformer, pack_samples(pipe, samples))
        vision = [v.float() * (1 - frame_mask) for v in outputs.sample]
        motion = [a.float() * (1 - step_mask) for a in outputs.action]
        if guided:
            vision = [vision[1] + guidance_scale * (vision[0] - vision[1])]
            motion = [motion[1] + guidance_scale * (motion[0] - motion[1])]
        motion[0][:, raw:] = 0
        latents = scheduler.step(vision[0].unsqueeze(0), t, latents.unsqueeze(0), return_dict=False)[
            0
        ].squeeze(0)
        if len(clean_steps) < settings.action_rows:
            actions = action_scheduler.step(
                motion[0].unsqueeze(0), t, actions.unsqueeze(0), return_dict=False
            )[0]
            actions = actions.squeeze(0)
            actions[:, raw:] = 0
    chunk = actions[int(settings.use_state) :, :raw]
    return chunk.detach().cpu()


def loop_sample(
    ids, latents, actions, timestep, settings: ActionSettings, domain: int
) -> Cosmos3TrainingSample:
    """A sample of the sampling loop: the current latents and actions as they are (their clean parts included)."""
    return Cosmos3TrainingSample(
        ids,
        x0=latents,
        noisy=latents,
        timestep=timestep,
        condition_frames=settings.clean_frames(latents.shape[-3]),
        fps=settings.fps,
        action_x0=actions,
        action_noisy=actions,
        action_condition_steps=settings.clean_steps(),
        domain_id=domain,
        action_start_offset=settings.action_start_offset,
    )


ACTION_SETTINGS_FILE = "action_settings.json"


@dataclass
class Cosmos3ActionPolicy:
    """An action-post-trained Cosmos3 as a policy: the current frame (and state) and the task in, an action chunk in
    the dataset's own units out. `cosmos-train action-sft` writes `action_settings.json` beside the pipeline it
    exports, so `Cosmos3ActionPolicy.from_pretrained(export)` samples with the settings it was trained with.

        policy = Cosmos3ActionPolicy.from_pretrained("runs/policy/safetensors/step_2000")
        chunk = policy(frame, "put the bowl on the plate", state=joints)   # [chunk_size, raw_action_dim]
    """

    pipe: object
    settings: ActionSettings
    normalization: str = "none"
    stats: dict | None = None
    normalize_state: bool = False
    num_inference_steps: int = 30
    guidance_scale: float = 1.0

    @classmethod
    def from_pretrained(
        cls,
        folder,
        num_inference_steps: int = 30,
        guidance_scale: float = 1.0,
        base: str | None = None,
        **pipeline_kwargs,
    ):
        """An export's pipeline and settings. A LoRA export (`lora/` beside `action_settings.json`) loads its base
        model (`base`, else the one the settings name) and then the LoRA and the trained action heads."""
        import json
        from pathlib import Path

        from diffusers import Cosmos3OmniPipeline

        path = Path(folder) / ACTION_SETTINGS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no action settings (an action-sft export writes them)")
        record = json.loads(path.read_text())
        lora = Path(folder) / ACTION_LORA_FOLDER
        if lora.is_dir() and not (Path(folder) / "model_index.json").is_file():
            base = base or record.get("base")
            if base is None:
                raise ValueError(f"{folder} is a LoRA export without its base model: pass base=")
            pipe = Cosmos3OmniPipeline.from_pretrained(base, **pipeline_kwargs)
            load_action_lora(pipe, lora)
        else:
            pipe = Cosmos3OmniPipeline.from_pretrained(folder, **pipeline_kwargs)
        return cls(
            pipe,
            ActionSettings(**record["settings"]),
            record.get("normalization", "none"),
            record.get("stats"),
            record.get("normalize_state", False),
            num_inference_steps,
            guidance_scale,
        )

    def __call__(self, frames, task: str, state=None, generator: torch.Generator | None = None):
        """`frames`: the current frame (an image, `H x W x 3` uint8) for a policy, the `chunk_size + 1` frames for
        inverse dynamics; `state` in the dataset's units when the settings put a state row first."""
        from .action_units import denormalize_actions, normalize_actions

        if state is not None and self.normalize_state:
            state = normalize_actions(state, self.stats, self.normalization)
        chunk = sample_action_chunk(
            self.pipe,
            self.settings,
            frames,
            task,
            state=state,
            num_inference_steps=self.num_inference_steps,
            guidance_scale=self.guidance_scale,
            generator=generator,
        )
        return denormalize_actions(chunk.numpy(), self.stats or {}, self.normalization)

    def save_settings(self, folder) -> None:
        save_action_settings(folder, self.settings, self.normalization, self.stats, self.normalize_state)


def save_action_settings(
    folder, settings: ActionSettings, normalization="none", stats=None, normalize_state=False, base=None
):
    """`folder/action_settings.json`: what `Cosmos3ActionPolicy.from_pretrained` samples with (`base`: the model a
    LoRA export applies to)."""
    import dataclasses
    import json
    from pathlib import Path

    import numpy as np

    record = {
        "settings": dataclasses.asdict(settings),
        "normalization": normalization,
        "stats": None if stats is None else {k: np.asarray(v).tolist() for k, v in stats.items()},
        "normalize_state": normalize_state,
    }
    if base is not None:
        record["base"] = str(base)
    (Path(folder) / ACTION_SETTINGS_FILE).write_text(json.dumps(record, indent=1) + "\n")


# --- LoRA exports: the LoRA in diffusers' format, and the action heads, which train in full beside it --------------

ACTION_LORA_FOLDER = "lora"
ACTION_HEADS_FILE = "action_heads.safetensors"
# The action heads (cosmos-framework's action2llm, llm2action, action_modality_embed).
ACTION_HEAD = re.compile(r"^(action_proj_in|action_proj_out|action_modality_embed)(\.|$)")


def action_head_state(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The action heads' tensors of a transformer's state dict (a LoRA never holds them: they train in full)."""
    return {k: v.detach().cpu().contiguous() for k, v in state_dict.items() if ACTION_HEAD.search(k)}


def save_action_heads(folder, state_dict: dict[str, torch.Tensor]) -> None:
    """`folder/action_heads.safetensors`: the action heads of `state_dict`, under the transformer's own names."""
    from pathlib import Path

    from safetensors.torch import save_file

    heads = action_head_state(state_dict)
    if not heads:
        raise ValueError("the state dict holds no action heads (action_proj_in, action_proj_out, ...)")
    save_file(heads, str(Path(folder) / ACTION_HEADS_FILE), metadata={"format": "pt"})


def load_action_lora(pipe, folder) -> None:
    """Apply an action-sft LoRA export's `lora/` folder to `pipe`: the LoRA (diffusers' `load_lora_adapter`) and
    the action heads, every one of which must match the transformer's."""
    import importlib.util
    from pathlib import Path

    from diffusers.loaders.lora_base import LORA_WEIGHT_NAME_SAFE
    from safetensors.torch import load_file

    if importlib.util.find_spec("peft") is None:
        raise ImportError(
            f"{folder} is a LoRA: loading it needs PEFT (pip install 'diffusers-cosmos3[lora]')"
        )
    folder = Path(folder)
    heads = load_file(str(folder / ACTION_HEADS_FILE))
    own = pipe.transformer.state_dict()
    wrong = sorted(k for k, v in heads.items() if k not in own or own[k].shape != v.shape)
    if wrong or len(heads) != len(action_head_state(own)):
        raise ValueError(
            f"{folder / ACTION_HEADS_FILE}: its action heads do not fit this transformer "
            f"({wrong[:3] or 'some heads missing'}): was it trained from this base?"
        )
    pipe.transformer.load_lora_adapter(str(folder), weight_name=LORA_WEIGHT_NAME_SAFE)
    pipe.transformer.load_state_dict(heads, strict=False)
