"""A Cosmos3 policy export as the RL trainers sample and train it: every running episode's chunk in one batched
transformer call per sampler step, on the pipeline's own noise grid, and the same forward for training.

One policy call is a `PolicyCall`: the caption's tokens, the clean latent of the current frame (later latent frames
zero: only frame 0 is clean in policy mode, as `sample_action_chunk` samples), and the clean action rows (the state
row first when the export's settings put one there). `sample` draws future video and the action chunk jointly,
Euler on the flow ODE (DiffusionNFT's rollouts, and evaluation) or FlowGRPO's SDE on the action tokens (the video
tokens stay on the ODE: part of the state each step conditions on), keeping what each algorithm trains on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...diffusion.sampling import sde_step


def _normal(shape, generator: torch.Generator | list[torch.Generator] | None, device) -> torch.Tensor:
    """Standard normal noise drawn on the CPU (the generators are CPU ones, and a run draws the same noise on any
    device), then moved to `device`."""
    if isinstance(generator, list):
        return torch.stack([torch.randn(shape[1:], generator=g) for g in generator]).to(device)
    return torch.randn(shape, generator=generator).to(device)


@dataclass
class PolicyCall:
    """One policy call's inputs in the model's space."""

    ids: list[int]
    latents: torch.Tensor  # [C, T, h, w]: frame 0 the current frame's latent, the rest zero
    rows: torch.Tensor  # [action_rows, action_dim]: the clean rows (the state row, else zeros)


class CosmosPolicy:
    """The export's pipeline and action settings (`action_settings.json`, as `Cosmos3ActionPolicy` loads them), with
    the units its actions and state are in.

    `reasoner_cache` (a `Cosmos3ReasonerCache`, for a frozen reasoner only) keeps the caption's keys and values, so
    every call after the first skips the text tower: the caption is most of the sequence."""

    def __init__(self, pipe, record: dict, reasoner_cache=None):
        from diffusers_cosmos3.actions import ActionSettings, domain_id

        self.pipe = pipe
        self.record = record
        self.reasoner_cache = reasoner_cache
        self.settings = ActionSettings(**record["settings"])
        if self.settings.mode != "policy":
            raise ValueError(
                f"closed-loop RL trains a policy; this export's action mode is {self.settings.mode!r}"
            )
        self.normalization = record.get("normalization", "none")
        self.stats = record.get("stats") or {}
        self.normalize_state = bool(record.get("normalize_state", False))
        transformer = pipe.transformer
        self.action_dim = transformer.config.action_dim
        self.domain = domain_id(self.settings.domain, transformer.config.get("num_embodiment_domains"))
        self._prompts: dict[tuple[str, tuple[int, int]], list[int]] = {}

    @staticmethod
    def settings_record(folder: str | Path) -> dict:
        from diffusers_cosmos3.actions import ACTION_SETTINGS_FILE

        path = Path(folder) / ACTION_SETTINGS_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: [model] must be a policy export of action-sft (it writes this file)"
            )
        return json.loads(path.read_text())

    # --- the model's space -------------------------------------------------------------------------------

    @property
    def first_action_row(self) -> int:
        return int(self.settings.use_state)

    @torch.no_grad()
    def call(self, frame: np.ndarray, task: str, state: np.ndarray | None) -> PolicyCall:
        return self.calls([frame], [task], [state])[0]

    @torch.no_grad()
    def calls(self, frames: list[np.ndarray], tasks: list[str], states: list) -> list[PolicyCall]:
        """The calls of several current frames (one per running episode), their latents encoded in one batch."""
        from diffusers_cosmos3.actions import first_frame_latents

        latents, canvas = first_frame_latents(self.pipe, frames, self.settings)
        return [
            self._call_on(x, canvas, task, state)
            for x, task, state in zip(latents, tasks, states, strict=True)
        ]

    def _call_on(self, latents: torch.Tensor, canvas, task: str, state: np.ndarray | None) -> PolicyCall:
        """The call of a frame whose latents (frame 0; later frames zero) and canvas are known."""
        from diffusers_cosmos3.action_units import normalize_actions
        from diffusers_cosmos3.actions import action_prompt_ids

        key = (task, canvas)
        if key not in self._prompts:
            self._prompts[key] = action_prompt_ids(self.pipe, task, self.settings, canvas)[0]
        rows = torch.zeros(self.settings.action_rows, self.action_dim, device=latents.device)
        if self.settings.use_state:
            if state is None:
                raise ValueError("the policy puts the state first (use_state): [env] state_key must name it")
            if self.normalize_state:
                state = normalize_actions(state, self.stats, self.normalization)
            values = torch.as_tensor(np.asarray(state, dtype=np.float32), device=rows.device).reshape(-1)
            rows[0, : values.numel()] = values
        return PolicyCall(self._prompts[key], latents.float(), rows)

    @torch.no_grad()
    def demonstration(self, frames: np.ndarray, actions: np.ndarray, task: str, state: np.ndarray | None):
        """A demonstration window (`chunk_size + 1` uint8 frames, `chunk_size` actions in the environment's units) as
        a training sample: (its `PolicyCall`, the clean latents of every frame `[C, T, h, w]`, the clean action rows
        `[action_rows, action_dim]`, the state row first when the policy puts one there). The frames are encoded
        once: the causal VAE's first latent frame is the call's (it sees the first frame alone)."""
        from diffusers_cosmos3.action_units import normalize_actions
        from diffusers_cosmos3.actions import conditioning_latents, pad_actions

        x0, canvas = conditioning_latents(self.pipe, frames, self.settings)
        first = torch.zeros_like(x0)
        first[:, :1] = x0[:, :1]
        call = self._call_on(first, canvas, task, state)
        rows = torch.as_tensor(normalize_actions(actions, self.stats, self.normalization))
        expected = (self.settings.chunk_size, self.settings.raw_action_dim)
        if tuple(rows.shape) != expected:
            raise ValueError(
                f"a demonstration's actions are {tuple(rows.shape)}, the policy's chunk {expected}"
            )
        rows = pad_actions(rows, self.action_dim).to(call.rows.device)
        a0 = torch.cat([call.rows[: self.first_action_row], rows])
        return call, x0.float(), a0

    def to_env_units(self, actions: torch.Tensor) -> np.ndarray:
        """Sampled `[B, action_rows, action_dim]` rows as the environment's `[B, chunk, raw_action_dim]` actions."""
        from diffusers_cosmos3.action_units import denormalize_actions

        chunk = actions[:, self.first_action_row :, : self.settings.raw_action_dim].float().cpu().numpy()
        return denormalize_actions(chunk, self.stats, self.normalization)

    def pack(self, calls: list[PolicyCall], latents, actions, sigmas, like=None):
        """The transformer's packed input for the calls at `latents` / `actions` and noise levels `sigmas` [B];
        `like`, a batch packed for the same calls before (a sampler's previous step), lends its positions."""
        from diffusers_cosmos3.actions import loop_sample
        from diffusers_cosmos3.batched import pack_samples, repack

        dtype = self.pipe.transformer.dtype
        samples = [
            loop_sample(
                call.ids,
                latents[i].to(dtype),
                actions[i].to(dtype),
                float(sigmas[i]) * 1000,
                self.settings,
                self.domain,
            )
            for i, call in enumerate(calls)
        ]
        return pack_samples(self.pipe, samples) if like is None else repack(self.pipe, like, samples)

    def velocities(self, transformer, calls: list[PolicyCall], latents, actions, sigmas, packed=None):
        """The transformer's vision and action velocities `[B, ...]` at noise levels `sigmas` [B] (zero at clean
        frames and rows, upstream's convention); `transformer` may be wrapped (DDP, DeepSpeed). `packed`: these
        inputs as `pack` packed them (the frozen and trained predictions of one micro-batch share one)."""
        from diffusers_cosmos3.batched import batched_outputs

        if packed is None:
            packed = self.pack(calls, latents, actions, sigmas)
        outputs = batched_outputs(transformer, packed, cache=self.reasoner_cache)
        vision = torch.stack([v.reshape(latents.shape[1:]) for v in outputs.sample]).float()
        action = torch.stack(list(outputs.action)).float()
        action[..., self.settings.raw_action_dim :] = 0
        return vision, action

    def noisy(self, x0, a0, sigmas, noise, action_noise):
        """The forward process at `sigmas` [B]: x_t = sigma eps + (1 - sigma) x0 on the noisy frames and rows, the
        clean ones (frame 0, the state row) kept, channels past the raw width zero."""
        s = sigmas.to(x0.device, torch.float32).view(-1, *([1] * (x0.dim() - 1)))
        latents = torch.where(self.frame_mask(x0), x0, s * noise + (1 - s) * x0)
        s = s.view(-1, 1, 1)
        actions = torch.where(self.row_mask(a0), a0, s * action_noise + (1 - s) * a0)
        actions[..., self.settings.raw_action_dim :] = 0
        return latents, actions

    def frame_mask(self, latents: torch.Tensor) -> torch.Tensor:
        """True at clean latent frames (frame 0), broadcastable to `[B, C, T, h, w]`."""
        mask = torch.zeros(latents.shape[2], dtype=torch.bool, device=latents.device)
        mask[0] = True
        return mask.view(1, 1, -1, 1, 1)

    def row_mask(self, actions: torch.Tensor) -> torch.Tensor:
        """True at clean action rows (the state row), broadcastable to `[B, rows, D]`."""
        mask = torch.zeros(actions.shape[1], dtype=torch.bool, device=actions.device)
        mask[: self.first_action_row] = True
        return mask.view(1, -1, 1)

    def sigmas(self, steps: int) -> list[float]:
        """The pipeline's own noise grid for `steps` steps (its scheduler's sigmas, noisiest first, ending at 0)."""
        scheduler = copy.deepcopy(self.pipe.scheduler)
        scheduler.set_timesteps(steps, device="cpu")
        return scheduler.sigmas.double().tolist()

    # --- sampling -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def sample(
        self,
        transformer,
        calls: list[PolicyCall],
        sigmas: list[float],
        generator: torch.Generator | list[torch.Generator] | None = None,
        noise_level: float | None = None,
        keep_trajectory: bool = False,
        initial_noise: list[torch.Generator] | None = None,
        sde_steps: Collection[int] | None = None,
    ) -> dict:
        """Sample the batch: Euler on the flow ODE, or with `noise_level` FlowGRPO's SDE on the action tokens (its
        noise and the initial noise from `generator`, else the global RNG, so a resumed run draws the same; on the
        ODE `generator` may be a list, one per call, each drawing its call's initial noise; `initial_noise`, one
        generator per call, draws the initial noise instead, `generator` then the SDE's alone). `sde_steps`: the
        step indices the SDE samples (FlowGRPO-Fast's window), Euler elsewhere; unset, all of them.
        -> {"latents", "actions"} (clean, `[B, ...]`), and with `keep_trajectory` {"states": [(latents, actions)]
        per level, "log_probs": {SDE step: [B]}}."""
        if isinstance(generator, list) and noise_level is not None:
            raise ValueError("one generator per call is for the ODE; the SDE draws from one")
        x0 = torch.stack([c.latents for c in calls])
        a0 = torch.stack([c.rows for c in calls])
        first_noise = generator if initial_noise is None else initial_noise
        latents, actions = self.noisy(
            x0,
            a0,
            torch.ones(len(calls)),
            _normal(x0.shape, first_noise, x0.device),
            _normal(a0.shape, first_noise, a0.device),
        )
        first, raw = self.first_action_row, self.settings.raw_action_dim
        states, log_probs, packed = [(latents, actions)], {}, None
        for j in range(len(sigmas) - 1):
            sigma, sigma_next = sigmas[j], sigmas[j + 1]
            # Every step packs the same calls: the first step's positions and indexes serve them all.
            packed = self.pack(calls, latents, actions, torch.full((len(calls),), sigma), like=packed)
            v_vision, v_action = self.velocities(transformer, calls, latents, actions, None, packed=packed)
            latents = latents + (sigma_next - sigma) * v_vision
            if noise_level is None or (sde_steps is not None and j not in sde_steps):
                actions = actions + (sigma_next - sigma) * v_action
            else:
                actions = actions.clone()
                part, log_prob = sde_step(
                    actions[:, first:, :raw], v_action[:, first:, :raw], sigma, sigma_next, noise_level, sigmas[1],
                    generator=generator,
                )  # fmt: skip
                actions[:, first:, :raw] = part
                log_probs[j] = log_prob
            if keep_trajectory:
                states.append((latents, actions))
        result = {"latents": latents, "actions": actions}
        if keep_trajectory:
            result |= {"states": states, "log_probs": log_probs}
        return result
