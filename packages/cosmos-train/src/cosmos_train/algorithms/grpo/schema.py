"""The GRPO job (`kind = "grpo"`): its schema, and its mapping onto TRL's `GRPOConfig`.

`[train]` takes `GRPOConfig` fields verbatim (`num_generations`, `max_completion_length`, `beta`,
`loss_type`, `importance_sampling_level`, `epsilon_high`, `scale_rewards`, `use_vllm`, `vllm_mode`, ...),
type- and range-checked. `[rewards]` maps reward names to weights (`cosmos_train.rewards`); it owns
`GRPOConfig.reward_weights`. `[rollout]` holds what TRL lacks: DAPO's dynamic sampling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from ...config import (
    ActivationBatch,
    ConfigError,
    JobSchema,
    LoraSection,
    ModelSection,
    PromptData,
    RewardSpec,
    RewardTable,
    Section,
    build_training_arguments,
    reward_specs,
    trainer_section,
)
from ...launch import backend_arguments, device_defaults

if TYPE_CHECKING:
    from trl import GRPOConfig

ASSUMED_PROMPT_TOKENS = 512  # `estimate-memory`'s prompt tokens per completion (TRL does not cap them)


class GRPORolloutSection(Section):
    """`[rollout]`: rollout features TRL lacks."""

    shared_prompt: bool = Field(
        True,
        description="Prefill each prompt once and share its KV cache among its samples (transformers generation).",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO: drop groups whose rewards have zero spread and sample new prompts until the batch is "
        "full of groups with spread.",
    )
    max_resample_rounds: int = Field(
        9,
        ge=1,
        description="Extra generation rounds per batch that dynamic sampling may spend; a batch still short of "
        "groups with spread then stops the run (DAPO's max_num_gen_batches, 10 in its recipe: 9 extra rounds).",
    )


class GRPOEvalSection(PromptData):
    """`[eval]`: held-out prompts answered by the model being trained, before training and every `every` steps,
    scored by the job's rewards through TRL's evaluation (`eval_reward`, `eval_rewards/<reward>/mean` in the
    logs). Greedy by default: held-out accuracy, as papers report it."""

    split: str = Field("test", description="hf: the dataset split.")
    every: int = Field(
        10, gt=0, description="Evaluate every this many optimizer steps (and before training)."
    )
    greedy: bool = Field(True, description="Greedy answers; false samples them as training does.")
    samples_per_prompt: int = Field(
        1, gt=0, description="Answers per prompt (1 when greedy: they would all be the same)."
    )
    batch_size: int = Field(64, gt=0, description="Answers per process per evaluation batch.")

    @model_validator(mode="after")
    def _greedy_answers_once(self):
        if self.greedy and self.samples_per_prompt != 1:
            raise ValueError(
                "greedy evaluation answers each prompt once: set samples_per_prompt = 1 or greedy = false"
            )
        if self.batch_size % self.samples_per_prompt:
            raise ValueError("batch_size must be a multiple of samples_per_prompt (whole groups per batch)")
        return self


GRPOTrainSection = trainer_section(
    "trl:GRPOConfig",
    name="GRPOTrainSection",
    overrides={
        "output_dir": (str, ...),
        "resume_from_checkpoint": (bool, None),
        # Plain `str` fields in GRPOConfig whose values TRL checks only at run time (or not at all).
        "vllm_mode": (Literal["colocate", "server"], None),
        "loss_type": (Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"], None),
        "importance_sampling_level": (Literal["token", "sequence"], None),
        "scale_rewards": (Literal["group", "batch", "none"], None),
        "multi_objective_aggregation": (Literal["sum_then_normalize", "normalize_then_sum"], None),
        "vllm_importance_sampling_mode": (
            Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"],
            None,
        ),
    },
)


class GRPOJob(JobSchema):
    model: ModelSection
    lora: LoraSection | None = Field(None, description="A PEFT LoRA; absent: full fine-tuning.")
    data: PromptData
    rewards: RewardTable = Field(min_length=1, description="Text rewards and their weights.")
    rollout: GRPORolloutSection = GRPORolloutSection()
    eval: GRPOEvalSection | None = Field(
        None, description="Held-out prompts answered (greedily by default) and scored by the job's rewards."
    )
    train: GRPOTrainSection

    def reward_specs(self) -> list[RewardSpec]:
        return reward_specs(self.rewards)

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        tokens = ASSUMED_PROMPT_TOKENS + args.max_completion_length
        return ActivationBatch(
            args.per_device_train_batch_size, tokens, prompt_tokens=ASSUMED_PROMPT_TOKENS, generates=True
        )

    def weight_copies(self) -> tuple[str, ...]:
        # TRL keeps a reference model for beta > 0; a LoRA reaches the base by disabling its adapters instead.
        from trl import GRPOConfig

        beta = self.train.beta if self.train.beta is not None else GRPOConfig.beta
        return ("reference",) if beta > 0 and self.lora is None else ()

    def training_arguments(self, source: str, launch: bool = True) -> GRPOConfig:
        from trl import GRPOConfig

        forced: dict[str, Any] = {
            "reward_weights": [spec.weight for spec in self.reward_specs()],
            "model_init_kwargs": None,
            # Prompt media and the reward columns travel with each row.
            "remove_unused_columns": False,
            **(backend_arguments(self.launch.backend) if launch else {}),
        }
        if self.eval is not None:
            forced |= {
                "eval_strategy": "steps",
                "eval_steps": self.eval.every,
                "eval_on_start": True,
                "num_generations_eval": self.eval.samples_per_prompt,
                "per_device_eval_batch_size": self.eval.batch_size,
            }
        arguments = build_training_arguments(
            GRPOConfig,
            self.train,
            source,
            forced=forced,
            defaults=device_defaults(self.launch.backend),
            exclude=("resume_from_checkpoint",),
        )
        if self.rollout.dynamic_sampling:
            local = arguments.per_device_train_batch_size * arguments.steps_per_generation
            if local % arguments.num_generations:
                raise ConfigError(
                    f"{source}: [rollout] dynamic_sampling keeps whole groups on each process, so "
                    f"per_device_train_batch_size x steps_per_generation ({local}) must be a multiple of "
                    f"num_generations ({arguments.num_generations})"
                )
        return arguments
