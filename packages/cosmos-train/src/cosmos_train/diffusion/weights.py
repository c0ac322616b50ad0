"""Copies of a transformer's trained parameters that the diffusion trainers keep beside them:
- `ExponentialAverage`: the EMA, for validation samples and exports;
- `OldPolicy`: DiffusionNFT's lagged policy that samples the rollouts (an EMA whose decay follows the step);
- `ParameterCopy` itself, never stepped: the frozen reference for a KL term under full fine-tuning.

Each keeps one tensor per parameter that requires grad, with:
- `update(step)`: theta_copy <- theta_copy - (1 - d) (theta_copy - theta), d from `get_decay` (diffusers' `EMAModel`
  step, as the references compute it);
- `swapped_in()`: the copy's tensors in place of the trained ones for a block (the storage is exchanged, nothing is
  copied, unless the weights are 16-bit: the copies stay float32), so any no-grad forward computes with the copy;
- `save(folder)` / `load(folder)`: safetensors under the parameters' names, written inside each checkpoint so that
  a resumed run continues the same copy.

Under DeepSpeed ZeRO-3 the copy is partitioned like the model: each process keeps the same slice of each parameter
that ZeRO-3 gave it (`p.ds_tensor`), updates it from the trained slice, and swaps it in; the next forward gathers
the copy's slices as it gathers the trained ones. Each process then saves its slices
(`<name>.part<rank>-of-<processes>.safetensors`); `load` reads either form on any number of processes, so a
checkpoint resumes or exports anywhere.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import torch

from ..launch.zero3 import held_bytes, is_partitioned, local_part, regather_persistent


class ParameterCopy:
    """A copy of `model`'s trained parameters (those that require grad when it is made), partitioned as they are."""

    filename: ClassVar[str] = "parameter_copy.safetensors"

    def __init__(self, model: torch.nn.Module, decay: float = 1.0):
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.parameters = [p for _, p in named]
        self.partitioned = any(map(is_partitioned, self.parameters))
        self.decay = decay
        self.global_step = 0
        # In float32 even beside 16-bit weights (DeepSpeed's bf16 / fp16): an average in bf16 would lose the small
        # updates it is made of.
        self.shadow_params = [local_part(p).detach().to(torch.float32, copy=True) for p in self.parameters]
        self._kept: list[torch.Tensor | None] = []  # while swapped in: the trained values copied aside

    @property
    def nbytes(self) -> int:
        """The bytes this process holds for the copy."""
        return held_bytes(self.shadow_params)

    def get_decay(self) -> float:
        return self.decay

    @torch.no_grad()
    def update(self, step: int) -> None:
        """One averaging step towards the current trained parameters, after optimizer step `step` (the trainer's
        count of steps done, which the decay schedules below follow, as the references' `global_step`)."""
        self.global_step = step
        keep = 1 - self.get_decay()
        for shadow, parameter in zip(self.shadow_params, self.parameters, strict=True):
            shadow.sub_(keep * (shadow - local_part(parameter)))

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The copy in place of the trained parameters for the block; only no-grad forwards may run in it.

        Where the dtypes agree the two storages are exchanged (nothing is copied); beside 16-bit weights the copy
        is cast into them and the trained values are put aside until the block ends."""
        self._swap(into_model=True)
        try:
            yield
        finally:
            self._swap(into_model=False)

    @torch.no_grad()
    def _swap(self, into_model: bool) -> None:
        if into_model:
            self._kept = [
                None if local_part(p).dtype == shadow.dtype else local_part(p).detach().clone()
                for p, shadow in zip(self.parameters, self.shadow_params, strict=True)
            ]
        for parameter, shadow, kept in zip(self.parameters, self.shadow_params, self._kept, strict=True):
            held = local_part(parameter)
            if kept is None:
                held.data, shadow.data = shadow.data, held.data
            else:
                held.copy_(shadow if into_model else kept)
        if not into_model:
            self._kept = []
        if self.partitioned:
            regather_persistent(self.parameters)

    @torch.no_grad()
    def copy_into_model(self) -> None:
        """Overwrite the trained parameters with the copy (exports of a checkpoint)."""
        for shadow, parameter in zip(self.shadow_params, self.parameters, strict=True):
            local_part(parameter).copy_(shadow)

    # --- checkpoints ---------------------------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """This process's file: the whole copy, or (partitioned) its slices. Every process calls it when
        partitioned; only the main one otherwise."""
        from safetensors.torch import save_file

        path = Path(folder) / self.filename
        if self.partitioned:
            path = _slice_path(path, torch.distributed.get_rank(), torch.distributed.get_world_size())
        tensors = {
            name: shadow.detach().cpu().contiguous()
            for name, shadow in zip(self.names, self.shadow_params, strict=True)
        }
        save_file(tensors, path, metadata={"global_step": json.dumps(self.global_step)})
        return path

    @classmethod
    def saved_in(cls, folder: str | Path) -> bool:
        """Whether `folder` holds this kind of copy, whole or in slices."""
        whole = Path(folder) / cls.filename
        return whole.is_file() or any(whole.parent.glob(_slice_path(whole, "*", "*").name))

    def load(self, folder: str | Path) -> None:
        """Restore a copy saved by `save`, whole or in slices, on any number of processes (raises
        FileNotFoundError or ValueError, one line)."""
        read = _CopyFiles(Path(folder), self.filename)
        missing = set(self.names) - read.names
        if missing:
            raise ValueError(
                f"{read.where} lacks {len(missing)} of the trained parameters, e.g. {sorted(missing)[0]}"
            )
        with torch.no_grad():
            for name, parameter, shadow in zip(self.names, self.parameters, self.shadow_params, strict=True):
                shadow.copy_(read.part_for(name, parameter))
        self.global_step = read.global_step


def _slice_path(whole: Path, rank, processes) -> Path:
    """Where process `rank` of `processes` saves its slices of a copy whose whole file is `whole`."""
    return whole.with_name(f"{whole.stem}.part{rank}-of-{processes}{whole.suffix}")


class _CopyFiles:
    """The saved form of a copy in a checkpoint folder: one whole file, or the slices of N processes."""

    def __init__(self, folder: Path, filename: str):
        from safetensors import safe_open

        whole = folder / filename
        stem, suffix = whole.stem, whole.suffix
        pattern = re.compile(rf"{re.escape(stem)}\.part(\d+)-of-(\d+){re.escape(suffix)}")
        parts = {}
        for path in folder.glob(_slice_path(whole, "*", "*").name):
            if match := pattern.fullmatch(path.name):
                parts[int(match[1])] = (path, int(match[2]))
        if whole.is_file():
            self.files = [whole]
        elif parts:
            processes = {count for _, count in parts.values()}
            if len(processes) != 1 or sorted(parts) != list(range(processes.pop())):
                raise ValueError(f"{folder} has an incomplete set of {stem} slices: {sorted(parts)}")
            self.files = [parts[rank][0] for rank in sorted(parts)]
        else:
            raise FileNotFoundError(f"{folder} has no {filename}")
        self.where = self.files[0] if len(self.files) == 1 else folder / f"{stem}.part*{suffix}"
        self.handles = [safe_open(path, "pt") for path in self.files]
        self.names = set.intersection(*(set(handle.keys()) for handle in self.handles))
        metadata = self.handles[0].metadata() or {}
        self.global_step = int(json.loads(metadata.get("global_step", "0")))

    def part_for(self, name: str, parameter: torch.Tensor) -> torch.Tensor:
        """What this process keeps of `name`: its ZeRO-3 slice of `parameter`, or the whole tensor."""
        slices = [handle.get_tensor(name) for handle in self.handles]
        if not is_partitioned(parameter):
            whole = slices[0] if len(slices) == 1 else torch.cat([s.flatten() for s in slices])
            return whole.flatten()[: parameter.numel()].view_as(parameter)
        size = parameter.ds_tensor.numel()
        rank, processes = torch.distributed.get_rank(), torch.distributed.get_world_size()
        if len(slices) == processes and slices[0].numel() == size:
            return slices[rank]  # saved by as many processes: the same slices
        flat = torch.cat([s.flatten() for s in slices])[: parameter.ds_numel]
        mine = flat[rank * size : (rank + 1) * size]
        return torch.cat([mine, mine.new_zeros(size - mine.numel())])  # the last slice is padded


class ExponentialAverage(ParameterCopy):
    """The EMA of the trained weights, for evaluation, validation and exports. Its decay ramps up with the optimizer
    step s as min((1 + s) / (10 + s), decay), as FlowGRPO's and DiffusionNFT's `EMAModuleWrapper`; without
    `warmup` it is `decay` from the first step (the ramp averages about (s + 10) / 9 steps: 4 at step 24)."""

    filename = "ema.safetensors"

    def __init__(self, model: torch.nn.Module, decay: float, warmup: bool = True):
        self.warmup = warmup
        super().__init__(model, decay=decay)

    def get_decay(self) -> float:
        if not self.warmup:
            return self.decay
        step = self.global_step
        return min((1 + step) / (10 + step), self.decay)


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

    def get_decay(self) -> float:
        return old_policy_decay(self.decay_type, self.global_step)
