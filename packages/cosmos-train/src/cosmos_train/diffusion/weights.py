"""Copies of a transformer's trained parameters that the diffusion trainers keep beside them:
- `ExponentialAverage`: the EMA, for validation samples and exports;
- `OldPolicy`: DiffusionNFT's lagged policy that samples the rollouts (an EMA whose decay follows the step);
- `ParameterCopy` itself, never stepped: the frozen reference for a KL term under full fine-tuning.

Each is diffusers' `EMAModel` over the parameters that require grad, with:
- `swapped_in()`: the copy's tensors in place of the trained ones for a block (the parameters' storage is
  exchanged, nothing is copied), so any no-grad forward of the model computes with the copy;
- `save(folder)` / `load(folder)`: one safetensors file under the parameters' names, with the `EMAModel` state as
  metadata, written inside each checkpoint so that a resumed run continues the same copy.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import torch
from diffusers.training_utils import EMAModel


class ParameterCopy(EMAModel):
    """A copy of `model`'s trained parameters (those that require grad when it is made)."""

    filename: ClassVar[str] = "parameter_copy.safetensors"

    def __init__(self, model: torch.nn.Module, decay: float = 1.0):
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.parameters = [p for _, p in named]
        self.global_step = 0
        super().__init__(self.parameters, decay=decay, foreach=False)

    def update(self, step: int) -> None:
        """One averaging step towards the current trained parameters, after optimizer step `step` (the trainer's
        count of steps done, which the decay schedules below follow, as the references' `global_step`)."""
        self.global_step = step
        self.step(self.parameters)

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The copy in place of the trained parameters for the block; only no-grad forwards may run in it."""
        self._swap()
        try:
            yield
        finally:
            self._swap()

    def _swap(self) -> None:
        with torch.no_grad():
            for parameter, shadow in zip(self.parameters, self.shadow_params, strict=True):
                parameter.data, shadow.data = shadow.data, parameter.data

    def save(self, folder: str | Path) -> Path:
        from safetensors.torch import save_file

        state = self.state_dict()
        shadows = state.pop("shadow_params")
        tensors = {
            name: shadow.detach().cpu().contiguous() for name, shadow in zip(self.names, shadows, strict=True)
        }
        path = Path(folder) / self.filename
        save_file(tensors, path, metadata={"ema": json.dumps(state)})
        return path

    def load(self, folder: str | Path) -> None:
        """Restore a copy saved by `save` (raises FileNotFoundError or ValueError, one line)."""
        from safetensors import safe_open

        path = Path(folder) / self.filename
        if not path.is_file():
            raise FileNotFoundError(f"{folder} has no {self.filename}")
        with safe_open(path, "pt") as handle:
            state = json.loads((handle.metadata() or {}).get("ema", "{}"))
            missing = set(self.names) - set(handle.keys())
            if missing:
                raise ValueError(
                    f"{path} lacks {len(missing)} of the trained parameters, e.g. {sorted(missing)[0]}"
                )
            state["shadow_params"] = [
                handle.get_tensor(name).to(p.device)
                for name, p in zip(self.names, self.parameters, strict=True)
            ]
        self.load_state_dict(state)


class ExponentialAverage(ParameterCopy):
    """The EMA of the trained weights, for evaluation, validation and exports. Its decay ramps up with the optimizer
    step s as min((1 + s) / (10 + s), decay), as FlowGRPO's and DiffusionNFT's `EMAModuleWrapper`."""

    filename = "ema.safetensors"

    def __init__(self, model: torch.nn.Module, decay: float):
        super().__init__(model, decay=decay)

    def get_decay(self, optimization_step: int) -> float:
        step = self.global_step
        return min((1 + step) / (10 + step), self.decay)

    def copy_into_model(self) -> None:
        """Overwrite the trained parameters with the average (exports of a checkpoint)."""
        self.copy_to(self.parameters)


def old_policy_decay(decay_type: int, step: int) -> float:
    """How much of DiffusionNFT's old policy survives an update at optimizer step `step` (its decay types)."""
    if decay_type == 0:
        return 0.0
    if decay_type == 1:
        return min(0.001 * step, 0.5)
    return 0.0 if step < 75 else min(0.0075 * (step - 75), 0.999)


class OldPolicy(ParameterCopy):
    """DiffusionNFT's old policy: theta_old <- d * theta_old + (1 - d) * theta once per rollout, after all of its
    optimizer steps, d from `old_policy_decay(decay_type, step)` (`train_nft_sd3.py`, `return_decay`)."""

    filename = "old_policy.safetensors"

    def __init__(self, model: torch.nn.Module, decay_type: int):
        self.decay_type = decay_type
        super().__init__(model, decay=1.0)

    def get_decay(self, optimization_step: int) -> float:
        return old_policy_decay(self.decay_type, self.global_step)
