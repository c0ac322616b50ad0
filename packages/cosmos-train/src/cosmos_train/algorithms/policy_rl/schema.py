"""The closed-loop policy RL job (`kind = "policy-rl"`): a Cosmos3 policy export improved by DiffusionNFT or FlowGRPO
on the outcomes of its own episodes in a gymnasium environment.

`[model]` is an action-sft policy export (its `action_settings.json` says how it samples); `[env]` the environment
(`package.module:callable`), how its observations feed the policy and what counts as success; `[rollout]` the
start states and how many episodes each gets; `[reward]` how an episode is scored; `[rl]` the algorithm, whose
own values are `[nft]` or `[flow_grpo]` (the same sections, and defaults, as the `nft` and `flow-grpo` kinds), or
`[ddrl]` (FlowGRPO's values with DDRL's data term on the demonstrations of `[data]`, a LeRobot dataset); `[eval]`
held-out start states run during training. `[train]` takes `TrainingArguments` names; `per_device_train_batch_size`
is the number of start states per rollout and process.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ...config import ActivationBatch, LeRobotData, Section
from ..diffusion.schema import DiffusionJob, DiffusionTrainSection
from ..diffusion_rl.schema import REFERENCE_OPTIMIZER, RLLoraSection
from ..flow_grpo.schema import FlowGRPOSection
from ..nft.schema import NFTSection

ALGORITHMS = ("nft", "flow-grpo", "ddrl")


def seed_list(value: Any) -> Any:
    """Start states as a list of seeds, or "first:stop" (a range)."""
    if isinstance(value, str):
        first, sep, stop = value.partition(":")
        if not sep or not first.strip().isdigit() or not stop.strip().isdigit() or int(stop) <= int(first):
            raise ValueError(
                f"{value!r}: give seeds as a list of integers or as 'first:stop' with first < stop"
            )
        return list(range(int(first), int(stop)))
    return value


class EnvSection(Section):
    """`[env]`: the environment, one copy per running episode."""

    factory: str = Field(
        description="The environment: 'package.module:callable' returning a gymnasium.Env (a class or a function; "
        "a module beside the job file works), e.g. 'domains.reach2d.env:Reach2DEnv'."
    )
    kwargs: dict[str, Any] = Field({}, description="Keyword arguments of the factory.")
    vectorization: Literal["async", "sync"] = Field(
        "async",
        description="async: each episode's copy in its own worker process (gymnasium's AsyncVectorEnv); sync: all in "
        "this process (an environment that is cheap to step, or not picklable).",
    )
    start_method: Literal["fork", "spawn", "forkserver"] | None = Field(
        None, description="How worker processes start (default: Python's on this platform)."
    )
    execute: int | None = Field(
        None,
        gt=0,
        description="Actions of each sampled chunk run before the policy plans again from the new frame (default: "
        "the whole chunk).",
    )
    image_key: str = Field(
        "image", min_length=1, description="The observation's camera frame (H x W x 3 uint8)."
    )
    state_key: str | None = Field(
        "state", description="The observation's state, for a policy that puts the state first (use_state)."
    )
    task: str | None = Field(
        None, description="The task text of every episode (default: the info's task_key)."
    )
    task_key: str = Field(
        "task", min_length=1, description="The reset info's task text, when [env] task is unset."
    )
    success_key: str | None = Field(
        "success",
        description="The step info's success flag (unset: an episode succeeds when it terminates).",
    )
    progress_key: str | None = Field(
        None,
        description="A step info value the episode should drive to 0 (a distance to the goal): progress is "
        "1 - final / initial, for [reward] progress_weight.",
    )


class PolicyRolloutSection(Section):
    """`[rollout]`: the start states, and how their episodes are cut into training micro-batches."""

    seeds: list[int] = Field(
        description="The training start states: reset seeds, as a list or 'first:stop'. Each rollout draws "
        "per_device_train_batch_size of them."
    )
    samples_per_start: int = Field(
        8, ge=2, description="K episodes per start state, whose scores are normalised as a group."
    )
    sampling_steps: int = Field(10, gt=0, description="Sampler steps per policy call.")
    train_samples: int = Field(
        64,
        gt=0,
        description="Policy calls trained on per rollout, as many from each episode (each carries its episode's "
        "advantage; a call drawn at random within its episode).",
    )
    train_batch_size: int = Field(8, gt=0, description="Policy calls per training forward.")
    updates_per_rollout: int = Field(
        1, gt=0, description="Optimizer steps per rollout; its chunks of calls are split evenly between them."
    )

    _seeds = field_validator("seeds", mode="before")(seed_list)

    @model_validator(mode="after")
    def _whole_chunks(self):
        if self.train_samples % self.train_batch_size:
            raise ValueError(
                f"[rollout] train_samples = {self.train_samples} must be a multiple of train_batch_size = "
                f"{self.train_batch_size}"
            )
        chunks = self.train_samples // self.train_batch_size
        if chunks % self.updates_per_rollout:
            raise ValueError(
                f"[rollout] updates_per_rollout = {self.updates_per_rollout} must divide the rollout's {chunks} "
                "chunks (train_samples / train_batch_size)"
            )
        return self


class RewardSection(Section):
    """`[reward]`: an episode's score, shared by every policy call of the episode."""

    success_weight: float = Field(1.0, ge=0, description="Weight of success (1 or 0).")
    progress_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of progress (1 - final / initial [env] progress_key): a dense term, so that K episodes "
        "that all fail (or all succeed) still rank by how close they came.",
    )
    success_completes_progress: bool = Field(
        False,
        description="A successful episode's progress counts as 1 (the goal reached), not as the residual distance "
        "it ended at: K episodes of one start that all succeed then differ only by length_weight, not by where "
        "inside the goal region each stopped.",
    )
    return_weight: float = Field(0.0, ge=0, description="Weight of the environment's summed reward.")
    length_weight: float = Field(
        0.0,
        ge=0,
        description="Penalty per environment step of the episode (subtracted): a sooner success scores higher, so "
        "K episodes that all succeed still rank by how soon, where progress, ended by success, barely differs.",
    )

    @model_validator(mode="after")
    def _something(self):
        if self.success_weight == self.progress_weight == self.return_weight == self.length_weight == 0:
            raise ValueError("[reward] every weight is 0: episodes would all score the same")
        return self


class RLSection(Section):
    """`[rl]`: which algorithm trains on the episodes."""

    algorithm: Literal[ALGORITHMS] = Field(
        "nft",
        description="nft: DiffusionNFT on the calls' clean samples ([nft]); flow-grpo: FlowGRPO on the SDE steps of "
        "the action tokens ([flow_grpo]); ddrl: FlowGRPO's term plus DDRL's data term on [data]'s demonstrations "
        "([ddrl]).",
    )
    video_loss_weight: float = Field(
        0.0,
        ge=0,
        description="DiffusionNFT: weight of the same loss on the generated future frames beside the actions' (0: "
        "actions only).",
    )
    executed_actions_only: bool = Field(
        False,
        description="Train only the actions the environment ran ([env] execute of the chunk), which the episode's "
        "score judged; the rest were sampled and never run. Off by default: on the Reach2D benchmark it made "
        "FlowGRPO fall faster and NFT gain less (README).",
    )


class PolicyDDRLSection(FlowGRPOSection):
    """`[ddrl]`: DDRL in closed loop: FlowGRPO's keys, and DDRL's data term on the demonstrations of `[data]`.

    DDRL (Ye et al. 2025, cosmos-rl's) keeps FlowGRPO's rollouts and clipped-ratio term and replaces the reverse KL to
    the base with a forward one to the data: the action-sft flow-matching loss on demonstrations, EDM-weighted as
    cosmos-rl's data term, at each trained SDE step's noise level (its `use_rl_sigma_and_noise`; the noise is drawn
    afresh, as the demonstrations are not the rollout's)."""

    kl_beta: float = Field(
        0.0,
        ge=0,
        description="Weight of FlowGRPO's KL to the frozen base; DDRL replaces it with the data term (0).",
    )
    data_beta: float = Field(
        0.01,
        ge=0,
        description="Weight of the data term (cosmos-rl's 0.01): (sigma^2 + (1 - sigma)^2) times the squared "
        "velocity error on a demonstration's actions plus that on its future frames.",
    )
    data_batch_size: int = Field(
        8, gt=0, description="Demonstration windows per training forward (drawn at random, each micro-batch)."
    )


class PolicyEvalSection(Section):
    """`[eval]`: held-out start states, one deterministic episode each, before training (`on_start`), every `every`
    steps and at the end: `eval/success` and `eval/episode_length` in the logs, `output_dir/eval.json`."""

    seeds: list[int] = Field(description="Held-out reset seeds, as a list or 'first:stop'.")
    every: int = Field(10, gt=0, description="Evaluate every this many optimizer steps (and at the end).")
    sampling_steps: int = Field(
        10, gt=0, description="Sampler steps per policy call (Euler on the flow ODE)."
    )
    seed: int = Field(0, ge=0, description="The noise of every evaluation (the same each time).")
    on_start: bool = Field(
        True,
        description="Evaluate before training too (the base's figure); false skips it where it is known, as the "
        "evaluation is deterministic.",
    )

    _seeds = field_validator("seeds", mode="before")(seed_list)


class PolicyRLJob(DiffusionJob):
    lora: RLLoraSection | None = Field(
        None, description="A PEFT LoRA on the transformer; absent: full fine-tuning."
    )
    env: EnvSection
    rollout: PolicyRolloutSection
    reward: RewardSection = RewardSection()
    rl: RLSection = RLSection()
    nft: NFTSection = NFTSection()
    flow_grpo: FlowGRPOSection = FlowGRPOSection()
    ddrl: PolicyDDRLSection = PolicyDDRLSection()
    data: LeRobotData | None = Field(
        None,
        description="Demonstrations, a LeRobot dataset in the policy's units ([rl] algorithm = 'ddrl' only): windows "
        "of the export's chunk, with its state row when it puts one first.",
    )
    eval: PolicyEvalSection | None = Field(None, description="Held-out start states run during training.")
    train: DiffusionTrainSection

    pipeline_classes: ClassVar[tuple[str, ...]] = ("Cosmos3OmniPipeline",)
    train_defaults: ClassVar[dict[str, Any]] = REFERENCE_OPTIMIZER

    @model_validator(mode="after")
    def _sections_agree(self):
        algorithm = self.rl.algorithm
        if algorithm != "nft":
            self.algorithm_section().check_steps(self.rollout.sampling_steps)
            if self.rl.video_loss_weight:
                raise ValueError(
                    f"[rl] video_loss_weight is DiffusionNFT's: {algorithm}'s rollout term trains the action "
                    "tokens' SDE steps only"
                )
        if (algorithm == "ddrl") != (self.data is not None):
            raise ValueError(
                "[data]: DDRL's data term needs demonstrations (a LeRobot dataset)"
                if algorithm == "ddrl"
                else f"[data]: only [rl] algorithm = 'ddrl' reads demonstrations ({algorithm} does not)"
            )
        if self.reward.progress_weight and self.env.progress_key is None:
            raise ValueError(
                "[reward] progress_weight needs [env] progress_key (the info value progress is read from)"
            )
        return self

    def algorithm_section(self) -> Section:
        return {"nft": self.nft, "flow-grpo": self.flow_grpo, "ddrl": self.ddrl}[self.rl.algorithm]

    def lerobot_request(self) -> dict[str, Any]:
        """What `[data]` must hold, as far as the job file says: the chunk (and whether a state row goes first) is the
        export's, which `run_policy_rl` checks the windows against once it has read the export's settings."""
        data = self.data
        return {
            "cameras": tuple(data.cameras),
            "action_columns": tuple(data.action_columns),
            "state_columns": tuple(data.state_columns),
            "chunk_size": 1,
            "layout": data.layout,
            "representation": data.representation,
            "normalization": data.normalization,
            "tolerance_s": data.tolerance_s,
        }

    def ema_decay(self) -> float | None:
        return self.algorithm_section().ema_decay

    def ema_warmup(self) -> bool:
        return self.algorithm_section().ema_warmup

    def kl_beta(self) -> float:
        return self.algorithm_section().kl_beta

    def weight_copies(self) -> tuple[str, ...]:
        copies = super().weight_copies()
        if self.kl_beta() > 0 and self.lora is None:
            copies += ("reference",)
        if self.rl.algorithm == "nft":
            copies += ("old_policy",)
        return copies

    def train_timesteps(self, sampling_steps: int | None = None) -> int:
        """Noise levels (NFT) or SDE steps (FlowGRPO) each trained call is trained at per rollout."""
        steps = sampling_steps or self.rollout.sampling_steps
        if self.rl.algorithm == "nft":
            return max(1, int(steps * self.nft.timestep_fraction))
        return self.algorithm_section().trained_step_count(steps)

    def rollout_chunks(self) -> int:
        return self.rollout.train_samples // self.rollout.train_batch_size

    def micro_batches_per_update(self) -> int:
        return self.rollout_chunks() // self.rollout.updates_per_rollout * self.train_timesteps()

    def forced_arguments(self) -> dict[str, Any]:
        return {"gradient_accumulation_steps": self.micro_batches_per_update()}

    def starts_per_rollout(self, args: Any) -> int:
        return args.per_device_train_batch_size

    def sample_size(self, family, pipeline_size=(None, None, None), max_side=None):
        from ..action_sft.schema import TIER_LARGEST_CANVAS

        height, width = TIER_LARGEST_CANVAS[256]
        return height, width, None

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        return ActivationBatch(self.rollout.train_batch_size, size=self.sample_size(family))

    def fully_trained_parameters(self) -> str | None:
        from diffusers_cosmos3.actions import ACTION_HEAD

        return ACTION_HEAD.pattern

    def episodes_per_rollout(self, args: Any) -> int:
        return math.prod((self.starts_per_rollout(args), self.rollout.samples_per_start))
