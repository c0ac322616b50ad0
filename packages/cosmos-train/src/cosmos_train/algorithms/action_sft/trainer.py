"""Cosmos3 action SFT on transformers' `Trainer`: a policy, forward dynamics or inverse dynamics from LeRobot windows.

The story of a run (`run_action_sft`), once `read_job` has validated the job and checked the dataset's meta:
1. load the Cosmos3 pipeline; train its generator tower and action heads in full (the reasoner stays frozen; the
   heads start fresh or from the checkpoint, and learn at `action_lr_multiplier` times the rate);
2. cut the dataset's episodes into windows of `chunk_size + 1` frames and `chunk_size` actions (`LeRobotFolder`);
3. each step (`compute_loss`): per window, pick the mode (joint: uniformly), fit the frames to the tier's canvas and
   encode them, tokenize the structured caption (dropped to "" at `caption_dropout`), draw one sigma for video and
   actions from the waver density shifted by the tier, noise both, and run every sample of the batch in one call
   of upstream's transformer (`diffusers_cosmos3.batched`); the loss is `loss.py`'s;
4. train and save on the shared skeleton: crash-safe checkpoints, and the whole pipeline under
   `output_dir/safetensors/step_N/`, loadable by `Cosmos3OmniPipeline.from_pretrained`.
"""

from __future__ import annotations

import collections
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from ...errors import ConfigError
from ...jobs import Job
from ..common import train_and_save
from ..diffusion.trainer import DiffusionTrainer, load_for_training
from .loss import TIER_SHIFTS, action_loss, action_sft_loss, canvas_tier, draw_sigmas, video_loss

logger = logging.getLogger(__name__)

SINGLE_MODES = ("policy", "forward_dynamics", "inverse_dynamics")


class WindowDataset(Dataset):
    """The dataset's windows: `(episode, start)` pairs read on demand. Frames are decoded unless the trainer keeps
    the window's latents (`encoded`, filled by the trainer; a DataLoader worker's copy may lag, and decodes)."""

    def __init__(self, folder, spec, windows: list[tuple[int, int]]):
        self.folder, self.spec, self.windows = folder, spec, windows
        self.encoded: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict:
        key = self.windows[index]
        window = self.folder.read_window(self.spec, *key, frames=key not in self.encoded)
        return {
            "window": key,
            "frames": window.frames,
            "actions": window.actions,
            "state": window.state,
            "task": window.task,
        }


def keep_as_list(items: list[dict]) -> list[dict]:
    """Windows keep their own sizes: the trainer packs them into one sequence."""
    return items


@dataclass
class _Prepared:
    mode: str
    sample: object  # Cosmos3TrainingSample
    x0: torch.Tensor
    noise: torch.Tensor
    actions: torch.Tensor
    action_noise: torch.Tensor
    raw_action_dim: int


class ActionSFTTrainer(DiffusionTrainer):
    """Flow matching of video and actions with one sigma per sample, as cosmos-framework trains Cosmos3's modes."""

    def __init__(
        self,
        adapter,
        action,
        fps: float,
        raw_action_dim: int,
        cache_latents: bool = False,
        units: dict | None = None,
        base: str | None = None,
        **kwargs,
    ):
        super().__init__(adapter, **kwargs)
        self.base = base  # the model trained from: a LoRA export applies to it
        self.action = action  # the job's [action] section
        # How the dataset's actions map to the model's (`save_action_settings`' keywords), for the exports.
        self.units = units or {}
        self.fps = fps
        self.raw_action_dim = raw_action_dim
        self._token_ids: dict[tuple, list[int]] = {}
        self._parts: dict[str, list[float]] = collections.defaultdict(list)
        # {(episode, start): (latents, canvas)}: a window's frames never change, nor (posterior mode) their latents.
        self.latents: dict[tuple[int, int], tuple[torch.Tensor, tuple[int, int]]] | None = (
            {} if cache_latents else None
        )

    # --- the loss ---------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        from diffusers_cosmos3.batched import batched_outputs, pack_samples

        prepared = [self._prepare(item) for item in inputs]
        pipe = self.adapter.pipeline
        packed = pack_samples(pipe, [p.sample for p in prepared])
        cache = self.adapter.reasoner_cache if self.adapter.reasoner_frozen(model) else None
        outputs = batched_outputs(model, packed, cache=cache)
        videos, actions = [], []
        for index, item in enumerate(prepared):
            videos.append(video_loss(outputs.sample[index], item.x0, item.noise, item.sample.clean_frames()))
            actions.append(
                action_loss(
                    outputs.action[index],
                    item.actions,
                    item.action_noise,
                    item.sample.clean_action_steps(),
                    item.raw_action_dim,
                )
            )
        loss = action_sft_loss(videos, actions, self.action.video_loss_weight, self.action.action_loss_weight)
        if model.training:  # each part unweighted, per mode, averaged over the logging interval
            for item, video, action in zip(prepared, videos, actions, strict=True):
                self._parts[f"loss/video/{item.mode}"].append(video.item())
                self._parts[f"loss/action/{item.mode}"].append(torch.as_tensor(action).item())
        return (loss, None) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs |= {key: sum(values) / len(values) for key, values in sorted(self._parts.items())}
            self._parts.clear()
        super().log(logs, start_time)

    def settings(self, mode: str):
        from diffusers_cosmos3.actions import ActionSettings

        return ActionSettings(
            mode,
            chunk_size=self.action.chunk_size,
            domain=self.action.domain,
            raw_action_dim=self.raw_action_dim,
            fps=self.fps,
            resolution_tier=self.action.resolution_tier,
            view_point=self.action.view_point,
            use_state=self.action.use_state,
        )

    def _prepare(self, item: dict) -> _Prepared:
        """One window as a noised training sample (its mode drawn, its caption maybe dropped)."""
        from diffusers_cosmos3.actions import noised_sample, pad_actions

        mode = self.action.mode
        if mode == "joint":
            mode = SINGLE_MODES[int(torch.randint(len(SINGLE_MODES), ()))]
        settings = self.settings(mode)
        pipe = self.adapter.pipeline
        x0, canvas = self._latents(item, settings)
        dropped = bool(torch.rand(()) < self.action.caption_dropout)
        ids = self._caption_ids(item["task"], settings, canvas, dropped)
        rows = torch.as_tensor(item["actions"], dtype=torch.float32)
        if settings.use_state:
            rows = torch.cat([torch.as_tensor(item["state"], dtype=torch.float32)[None], rows])
        rows = pad_actions(rows, pipe.transformer.config.action_dim).to(x0.device)
        sigma = draw_sigmas(1, TIER_SHIFTS[canvas_tier(*canvas)])[0]
        noise, action_noise = torch.randn_like(x0), torch.randn_like(rows)
        sample = noised_sample(ids, x0, rows, settings, sigma, noise, action_noise)
        return _Prepared(mode, sample, x0, noise, rows, action_noise, settings.raw_action_dim)

    def _latents(self, item: dict, settings) -> tuple[torch.Tensor, tuple[int, int]]:
        from diffusers_cosmos3.actions import conditioning_latents

        key = tuple(item["window"])
        if self.latents is not None and key in self.latents:
            return self.latents[key]
        if item["frames"] is None:
            raise RuntimeError(f"window {key} came without frames and without cached latents")
        with torch.no_grad():
            encoded = conditioning_latents(self.adapter.pipeline, item["frames"], settings)
        if self.latents is not None:
            self.latents[key] = encoded
            self.train_dataset.encoded.add(key)
        return encoded

    def _caption_ids(self, task: str, settings, canvas: tuple[int, int], dropped: bool) -> list[int]:
        """The caption's tokens; a dropped caption is the empty one (cosmos-framework's `cfg_dropout_rate`), which
        the pipeline's unconditional pass feeds."""
        from diffusers_cosmos3.actions import action_prompt_ids

        key = (task, settings.mode, canvas)
        if key not in self._token_ids:
            if len(self._token_ids) > 4096:
                self._token_ids.clear()
            self._token_ids[key] = action_prompt_ids(self.adapter.pipeline, task, settings, canvas)
        cond, uncond = self._token_ids[key]
        return uncond if dropped else cond

    # --- exports: the pipeline, and the settings a policy call samples with ---------------------------------

    def export_extras(self, folder: Path, adapter) -> None:
        mode = "policy" if self.action.mode == "joint" else self.action.mode
        write_action_files(folder, adapter, self.settings(mode), self.units, self.lora is not None, self.base)

    # --- the optimizer: the action heads at their own rate ----------------------------------------------

    def create_optimizer(self, model=None):
        from diffusers_cosmos3.actions import ACTION_HEAD

        if self.optimizer is not None:
            return self.optimizer
        model = model or self.model
        decay = set(self.get_decay_parameter_names(model))
        groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                groups.setdefault((name in decay, bool(ACTION_HEAD.search(name))), []).append(parameter)
        rate = self.args.learning_rate
        param_groups = [
            {
                "params": parameters,
                "weight_decay": self.args.weight_decay if decays else 0.0,
                "lr": rate * self.action.action_lr_multiplier if head else rate,
            }
            for (decays, head), parameters in sorted(groups.items())
        ]
        optimizer_class, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_class(param_groups, lr=rate, **optimizer_kwargs)
        return self.optimizer


def write_action_files(folder: Path, adapter, settings, units: dict, lora: bool, base: str | None) -> None:
    """An export's action files: the settings a policy call samples with, and for a LoRA export (not merged) the
    action heads beside the LoRA, with the base model it applies to."""
    from diffusers_cosmos3.actions import ACTION_LORA_FOLDER, save_action_heads, save_action_settings

    merged = (folder / "model_index.json").is_file()
    if lora and not merged:
        save_action_heads(folder / ACTION_LORA_FOLDER, adapter.transformer.state_dict())
    save_action_settings(folder, settings, **units, base=None if merged else base)


def fresh_action_heads(transformer) -> None:
    """cosmos-framework's initialisation of the action heads (`cosmos3_vfm_network.py`): the input projection's
    weights truncated-normal with std 1/sqrt(action_dim), the output's and the modality embedding's with std
    1/sqrt(hidden), biases zero (every domain's rows)."""
    action_dim, hidden = transformer.config.action_dim, transformer.config.hidden_size
    with torch.no_grad():
        for module, std in ((transformer.action_proj_in, action_dim), (transformer.action_proj_out, hidden)):
            torch.nn.init.trunc_normal_(module.fc.weight, std=1 / math.sqrt(std))
            module.bias.weight.zero_()
        torch.nn.init.trunc_normal_(transformer.action_modality_embed, std=1 / math.sqrt(hidden))


def train_action_heads(transformer, fresh: bool) -> int:
    """Make the action heads trainable (after the adapter chose the generator's parameters); returns their count."""
    if not getattr(transformer.config, "action_gen", False):
        raise ConfigError(
            "[model] the Cosmos3 transformer has no action heads (its config's action_gen is false): action-sft needs "
            "a checkpoint built with them"
        )
    if fresh:
        fresh_action_heads(transformer)
    from diffusers_cosmos3.actions import ACTION_HEAD

    count = 0
    for name, parameter in transformer.named_parameters():
        if ACTION_HEAD.search(name):
            parameter.requires_grad_(True)
            count += parameter.numel()
    return count


def run_action_sft(job: Job, callbacks: list | None = None) -> ActionSFTTrainer:
    """Run an `action-sft` job; the trained pipeline is under `output_dir/safetensors/`."""
    from ...data.lerobot import ActionSpec, LeRobotFolder

    config = job.config
    folder = LeRobotFolder(config.data.path)
    spec = ActionSpec(**config.lerobot_request())
    windows = folder.windows(spec, config.data.episodes, stride=config.data.stride)
    adapter, lora = load_for_training(job)
    if adapter.pipeline_class != "Cosmos3OmniPipeline":
        raise ConfigError(
            f"{job.source}: [model] action-sft trains Cosmos3 pipelines, not {adapter.pipeline_class}"
        )
    heads = train_action_heads(adapter.transformer, fresh=config.action.action_heads == "fresh")
    logger.info("training on %d windows; the action heads (%d parameters) train too", len(windows), heads)
    first = folder.read_window(spec, *windows[0], frames=False)  # its widths: no video to decode
    raw_action_dim = config.action.raw_action_dim or first.actions.shape[-1]
    if raw_action_dim > adapter.transformer.config.action_dim:
        raise ConfigError(
            f"{job.source}: [action] raw_action_dim {raw_action_dim} is wider than the model's action_dim "
            f"{adapter.transformer.config.action_dim}"
        )
    units = {"normalization": spec.normalization, "stats": None, "normalize_state": False}
    if spec.normalization != "none":
        units["stats"] = folder.action_stats(spec)
        if first.state is not None:
            units["normalize_state"] = spec.normalizes_state(first.state.shape[0], first.actions.shape[1])
    trainer = ActionSFTTrainer(
        adapter,
        config.action,
        fps=config.action.fps or folder.fps,
        raw_action_dim=raw_action_dim,
        cache_latents=config.data.cache,
        units=units,
        base=config.model.name_or_path,
        ema_decay=config.ema_decay(),
        lora=lora,
        weight_copies=config.weight_copies(),
        args=job.args,
        train_dataset=WindowDataset(folder, spec, windows),
        data_collator=keep_as_list,
        callbacks=callbacks,
    )
    train_and_save(trainer, job)
    return trainer


def export_action_run(checkpoint: Path, out: Path, kind: str, record: dict, **options) -> Path:
    """`cosmos-train export` of an action-sft checkpoint: the diffusion export of its pipeline (or LoRA, with the
    action heads beside it), with the action settings the run's own export of that step holds."""
    import json

    from diffusers_cosmos3.actions import ACTION_SETTINGS_FILE, ActionSettings

    from ...diffusion.export import export_run
    from ..diffusion.trainer import EXPORTS

    step = checkpoint.name.rsplit("-", 1)[-1]
    settings = checkpoint.parent / EXPORTS / f"step_{step}" / ACTION_SETTINGS_FILE
    if not settings.is_file():
        raise FileNotFoundError(f"{settings}: the run's export of step {step} holds no action settings")
    saved = json.loads(settings.read_text())
    units = {key: saved[key] for key in ("normalization", "stats", "normalize_state")}

    def extras(folder: Path, adapter) -> None:
        base = record["model"]["name_or_path"]
        write_action_files(
            folder, adapter, ActionSettings(**saved["settings"]), units, "lora" in record, base
        )

    return export_run(checkpoint, out, kind, record, extras=extras, **options)
