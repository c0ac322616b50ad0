"""The toy algorithm's job: the diffusion RL sections and its own `[toy]`."""

from pydantic import Field

from cosmos_train.algorithms.diffusion_rl.schema import DiffusionRLJob
from cosmos_train.config import Section


class ToySection(Section):
    """`[toy]`: the toy algorithm's own values."""

    timesteps: int = Field(2, gt=0, description="Noise levels each sample trains on.")
    ema_decay: float | None = Field(None, gt=0, lt=1, description="EMA of the trained weights.")


class ToyJob(DiffusionRLJob):
    toy: ToySection = ToySection()

    def train_timesteps(self) -> int:
        return self.toy.timesteps

    def ema_decay(self) -> float | None:
        return self.toy.ema_decay
