"""The schema layer: strict TOML job files as pure declarations.

- `sections.py`: the sections several kinds share (`[model]` for LMs and for pipelines, `[lora]`, `[launch]`, the
  data sections) and `JobSchema`, the top level each kind's schema subclasses (`algorithms/<name>/schema.py`);
- `train.py`: `trainer_section`, a TRL / transformers config dataclass as a strict `[train]`, and
  `build_training_arguments`;
- `rewards.py`: the `[rewards]` table;
- `reading.py`: TOML, `--set` overrides, paths, validation and one-line errors;
- `reference.py`: the job-file reference of `--help` and docs/job-files.md, made from the schemas.

Validating a job reads no file beyond the job's own and loads nothing: `cosmos_train.jobs` checks what the job
names (its model, data and rewards), and the run functions load them. Nothing here imports `diffusion/`, `data/`,
`rewards/` or `algorithms/` (tests/cosmos_train/test_layers.py).
"""

from ..errors import ConfigError
from .reading import (
    apply_overrides,
    job_kind,
    parse_override,
    read_toml,
    refuse_given_values,
    resolve_paths,
    section_model,
    suggest,
    validate_job,
)
from .rewards import RewardEntry, RewardSpec, RewardTable, entry_parameters, reward_specs
from .sections import (
    CONDITIONING_MODES,
    SOLVERS,
    WEIGHT_COPIES,
    ActivationBatch,
    ConversationData,
    JobPath,
    JobSchema,
    LaunchSection,
    LeRobotData,
    LoraSection,
    MediaData,
    ModelSection,
    PairData,
    PipelineSection,
    PromptData,
    PromptListData,
    Section,
)
from .train import TRAINING_RANGES, build_training_arguments, trainer_section

__all__ = [
    "CONDITIONING_MODES",
    "SOLVERS",
    "TRAINING_RANGES",
    "WEIGHT_COPIES",
    "ActivationBatch",
    "ConfigError",
    "ConversationData",
    "JobPath",
    "JobSchema",
    "LaunchSection",
    "LeRobotData",
    "LoraSection",
    "MediaData",
    "ModelSection",
    "PairData",
    "PipelineSection",
    "PromptData",
    "PromptListData",
    "RewardEntry",
    "RewardSpec",
    "RewardTable",
    "Section",
    "apply_overrides",
    "build_training_arguments",
    "entry_parameters",
    "job_kind",
    "parse_override",
    "read_toml",
    "refuse_given_values",
    "resolve_paths",
    "reward_specs",
    "section_model",
    "suggest",
    "trainer_section",
    "validate_job",
]
