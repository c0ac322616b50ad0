"""The job kinds cosmos-train runs, one `JobKind` each. The CLI's training commands, `validate-config`, `export` and
the config fuzz tests are all generated from this registry; a new algorithm is its own files plus one entry here.

An entry names its parts as `package.module:attribute` references, imported on first use (a schema imports TRL,
which `cosmos-train --help` should not wait for):
- `schema`: the `JobSchema` subclass that validates a job file and builds the trainer's TRL/transformers config;
- `run`: `run(job, callbacks=None) -> trainer`, which loads, trains and saves;
- `trainer`: the trainer class, for run functions shared by several kinds (the diffusion RL ones);
- `family`: `"language"` (transformers models; `export` writes a `save_pretrained` folder) or `"diffusion"`
  (diffusers pipelines; `export` writes a pipeline or a LoRA for it); `export` overrides the family's exporter.

Kinds from other packages, without a fork: an entry point in the `cosmos_train.kinds` group naming a `JobKind` (it
gets its own command), or a job file whose `kind` is a reference itself (`kind = "my_package.algo:KIND"`, run with
`cosmos-train run`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from .config import ConfigError, suggest
from .errors import first_line
from .references import BadReferenceError, is_reference, load_reference

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "cosmos_train.kinds"

# What `cosmos-train export` does with a run of each family.
EXPORTERS = {
    "language": "cosmos_train.export:export_run",
    "diffusion": "cosmos_train.diffusion.export:export_run",
}


@dataclass(frozen=True)
class JobKind:
    name: str  # the command, and the job file's `kind`
    schema: str
    run: str
    family: Literal["language", "diffusion"]
    help: str  # the command's help: a summary line, then details and examples
    trainer: str | None = None
    export: str | None = None

    @property
    def summary(self) -> str:
        return self.help.strip().splitlines()[0]

    def schema_class(self) -> Any:
        return self._load(self.schema, "schema")

    def run_function(self) -> Any:
        return self._load(self.run, "run")

    def trainer_class(self) -> Any:
        if self.trainer is None:
            raise ConfigError(f"kind '{self.name}' names no trainer class")
        return self._load(self.trainer, "trainer")

    def exporter(self) -> Any:
        return self._load(self.export or EXPORTERS[self.family], "export")

    def _load(self, reference: str, part: str) -> Any:
        try:
            return load_reference(reference)
        except BadReferenceError as error:
            raise ConfigError(f"kind '{self.name}': its {part} {reference!r}: {error}") from None


BUILTIN_KINDS = (
    JobKind(
        "sft",
        schema="cosmos_train.algorithms.sft.schema:SFTJob",
        run="cosmos_train.algorithms.sft.trainer:run_sft",
        family="language",
        help="""Supervised fine-tuning (TRL SFTTrainer) of the Cosmos3 reasoner, a VLM or a text LM.

Examples:

  cosmos-train sft --config examples/sft/tiny_qwen3_lora.toml

  cosmos-train sft -c job.toml --set train.max_steps=100 --set lora.r=32

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train sft -c job.toml
""",
    ),
    JobKind(
        "grpo",
        schema="cosmos_train.algorithms.grpo.schema:GRPOJob",
        run="cosmos_train.algorithms.grpo.trainer:run_grpo",
        family="language",
        help="""GRPO (TRL GRPOTrainer) of the Cosmos3 reasoner, a VLM or a text LM, on prompts with images or video.

Rewards are built-ins, Python functions (package.module:function) or remote ones. Variants come from TRL's options
in [train]: loss_type = "grpo" | "dr_grpo" | "dapo" | ..., importance_sampling_level = "sequence" (GSPO),
epsilon_high (clip-higher), beta (KL). [rollout] dynamic_sampling adds DAPO's group filter. Remote rewards read
REMOTE_REWARD_ENQUEUE_URL, REMOTE_REWARD_FETCH_URL and REMOTE_REWARD_TOKEN.

Examples:

  cosmos-train grpo --config examples/grpo/tiny_qwen3.toml

  cosmos-train grpo -c job.toml --set train.num_generations=16 --set rollout.dynamic_sampling=true

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train grpo -c job.toml
""",
    ),
    JobKind(
        "diffusion-sft",
        schema="cosmos_train.algorithms.diffusion_sft.schema:DiffusionSFTJob",
        run="cosmos_train.algorithms.diffusion_sft.trainer:run_diffusion_sft",
        family="diffusion",
        help="""Flow-matching SFT of a diffusers pipeline's transformer, with LoRA or full fine-tuning.

SD3, SANA, SANA-Video, Cosmos-Predict2.5 and Cosmos3 on image or video + caption pairs; the pipeline's class picks
the model adapter. [diffusion] sets the timestep density, loss weighting, EMA, text dropout and validation.
Exports land in output_dir/safetensors/step_N/: a full pipeline for DiffusionPipeline.from_pretrained, or lora/
for pipe.load_lora_weights.

Examples:

  cosmos-train diffusion-sft --config examples/diffusion_sft/tiny_sd3_lora.toml

  cosmos-train diffusion-sft -c job.toml --set diffusion.ema_decay=0.999

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train diffusion-sft -c job.toml
""",
    ),
    JobKind(
        "action-sft",
        schema="cosmos_train.algorithms.action_sft.schema:ActionSFTJob",
        run="cosmos_train.algorithms.action_sft.trainer:run_action_sft",
        family="diffusion",
        export="cosmos_train.algorithms.action_sft.trainer:export_action_run",
        help="""Cosmos3 action post-training from a LeRobot dataset: a policy, forward dynamics or inverse dynamics.

As cosmos-framework's action recipes train them: windows of chunk_size + 1 frames and chunk_size actions, the
structured JSON caption, one noise level shared by video and actions, loss weights 10 and 10, the generator tower and
the action heads trained in full (the heads at 5x the rate), the reasoner frozen. The export is a pipeline for
Cosmos3OmniPipeline.from_pretrained.

Examples:

  cosmos-train action-sft --config examples/action_sft/cosmos3_policy_libero.toml

  cosmos-train action-sft -c job.toml --set action.mode=inverse_dynamics

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train action-sft -c job.toml
""",
    ),
    JobKind(
        "policy-rl",
        schema="cosmos_train.algorithms.policy_rl.schema:PolicyRLJob",
        run="cosmos_train.algorithms.policy_rl.trainer:run_policy_rl",
        family="diffusion",
        export="cosmos_train.algorithms.action_sft.trainer:export_action_run",
        help="""Closed-loop RL of a Cosmos3 policy: DiffusionNFT, FlowGRPO or DDRL on its own episodes in a gymnasium env.

[model] is an action-sft policy export. [env] names the environment (package.module:callable) and how its
observations feed the policy; per start state of [rollout] seeds, K episodes run side by side in worker processes,
the policy re-planning from each new frame; each episode's success and progress ([reward]) become advantages per
start state, shared by the episode's policy calls. [rl] algorithm picks nft ([nft]), flow-grpo ([flow_grpo]) or
ddrl ([ddrl]: FlowGRPO's term plus a data term on [data]'s LeRobot demonstrations). [eval] runs held-out starts.
Needs pip install 'cosmos-train[envs]'.

Examples:

  cosmos-train policy-rl --config examples/policy_rl/tiny_reach2d_nft.toml

  cosmos-train policy-rl -c job.toml --set rl.algorithm=flow-grpo

  cosmos-train policy-rl -c job_with_a_data_section.toml --set rl.algorithm=ddrl
""",
    ),
    JobKind(
        "nft",
        schema="cosmos_train.algorithms.nft.schema:NFTJob",
        run="cosmos_train.algorithms.diffusion_rl.trainer:run_diffusion_rl",
        trainer="cosmos_train.algorithms.nft.trainer:NFTTrainer",
        family="diffusion",
        help="""DiffusionNFT: online RL of a diffusers pipeline's transformer through the forward process.

A lagged old policy samples K images/videos per prompt (no CFG), rewards rank them, and the model learns from
implicit positive and negative policies on re-noised samples. [rewards] maps image/video rewards (built-ins,
package.module:function or remote:<name>) to weights.

Examples:

  cosmos-train nft --config examples/diffusion_rl/tiny_sd3_nft.toml

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train nft -c job.toml
""",
    ),
    JobKind(
        "flow-grpo",
        schema="cosmos_train.algorithms.flow_grpo.schema:FlowGRPOJob",
        run="cosmos_train.algorithms.diffusion_rl.trainer:run_diffusion_rl",
        trainer="cosmos_train.algorithms.flow_grpo.trainer:FlowGRPOTrainer",
        family="diffusion",
        help="""FlowGRPO: online RL of a diffusers pipeline's transformer over the steps of an SDE sampler.

The current policy samples K images/videos per prompt (CFG as [rollout] guidance_scale), storing each step's
log-prob; rewards rank them, and the model trains GRPO's clipped ratio objective on a subset of the steps, plus a
KL to the frozen base.

Examples:

  cosmos-train flow-grpo --config examples/diffusion_rl/tiny_sana_flow_grpo.toml

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train flow-grpo -c job.toml
""",
    ),
    JobKind(
        "ddrl",
        schema="cosmos_train.algorithms.ddrl.schema:DDRLJob",
        run="cosmos_train.algorithms.diffusion_rl.trainer:run_diffusion_rl",
        trainer="cosmos_train.algorithms.ddrl.trainer:DDRLTrainer",
        family="diffusion",
        help="""DDRL: a GRPO reward term regularised by data instead of a KL to the base (cosmos-rl's).

[data] is data (pairs, or the Cosmos-Predict2.5 videos/ + metas/ layout): each item's caption is the prompt of its
rollouts ("2ab" sampler: EDM churn and Adams-Bashforth), its first latent frame conditions them (video families,
0 or 1 frames per item), and [ddrl] data_beta weighs the EDM-weighted data term on the same items.

Examples:

  cosmos-train ddrl --config examples/diffusion_rl/tiny_sana_ddrl.toml

  accelerate launch --multi_gpu --num_processes 8 -m cosmos_train ddrl -c job.toml
""",
    ),
)

_registered: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    """Add a kind to the registry (it then has a command, and `validate-config` and `export` know it)."""
    if kind.family not in EXPORTERS:
        raise ValueError(f"kind '{kind.name}': family must be one of {', '.join(EXPORTERS)}")
    _registered[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    _registered.pop(name, None)


def job_kinds() -> dict[str, JobKind]:
    """Every kind by name: the built-ins, those registered, and those of installed packages' entry points."""
    kinds = {kind.name: kind for kind in BUILTIN_KINDS}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            kind = entry.load()
        except Exception as error:  # a broken plugin must not take the CLI down
            logger.warning("skipping job kind %s from %s: %s", entry.name, entry.value, first_line(error))
            continue
        if isinstance(kind, JobKind):
            kinds[kind.name] = kind
        else:
            logger.warning(
                "skipping job kind %s: %s is a %s, not a JobKind",
                entry.name,
                entry.value,
                type(kind).__name__,
            )
    return kinds | _registered


def kind_named(name: str, source: str, search_path: str | Path | None = None) -> JobKind:
    """The kind a job names: a registered name, or a `package.module:KIND` reference (imported from `sys.path`
    or `search_path`, the job file's folder). Raises a one-line ConfigError naming `source`."""
    known = job_kinds()
    if name in known:
        return known[name]
    if is_reference(name):
        try:
            kind = load_reference(name, search_path)
        except BadReferenceError as error:
            raise ConfigError(f"{source}: kind '{name}': {error}") from None
        if not isinstance(kind, JobKind):
            raise ConfigError(
                f"{source}: kind '{name}' is a {type(kind).__name__}, not a cosmos_train JobKind"
            )
        return dataclasses.replace(kind, name=name)  # the record names it as the job did, so it reruns
    raise ConfigError(
        f"{source}: kind '{name}' is not a job kind; expected one of {', '.join(known)} "
        f"or 'package.module:KIND'{suggest(name, list(known))}"
    )
