"""Malformed job files, on every registered kind's schema: each must exit 2 with one line naming the file,
section and key, and no traceback.

The cases are partly written out (typos users make, and what a new user met: a missing model folder, a folder
that is not a pipeline, a reward that does not import or whose module fails to, an output_dir that is a file) and
partly generated from each schema: every section replaced by a scalar, every key of a good job given a wrong type,
removed when required, misspelt, and every typed `[train]` field given a value of the wrong type. The built-in
kinds have hand-written good jobs below; any other registered kind gets one made from its schema (`good_job`), so a
new algorithm is fuzzed without an edit here.
"""

from __future__ import annotations

import copy
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from cosmos_train.cli import build_app
from cosmos_train.config import MediaData, ModelSection, PairData, PipelineSection, PromptListData
from cosmos_train.kinds import job_kinds

GOOD_JOBS = {
    "sft": """
kind = "sft"
[model]
name_or_path = "model"
dtype = "bfloat16"
freeze = ["vision"]
[lora]
r = 8
alpha = 16
dropout = 0.05
target_modules = ["q_proj", "v_proj"]
[data]
format = "llava"
path = "data/llava.json"
media_dir = "data"
fps = 2.0
max_frames = 8
max_length = 512
packing = false
train_on = "assistant"
[train]
output_dir = "runs/x"
learning_rate = 1e-4
max_steps = 10
per_device_train_batch_size = 2
gradient_accumulation_steps = 2
seed = 1
bf16 = false
num_train_epochs = 1.0
report_to = "none"
lr_scheduler_type = "cosine"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "grpo": """
kind = "grpo"
[model]
name_or_path = "model"
dtype = "bfloat16"
[lora]
r = 8
alpha = 16
[data]
format = "llava"
path = "data/llava.json"
media_dir = "data"
fps = 2.0
max_frames = 8
[rewards]
format = { weight = 0.5, think_tag = "think", answer_tag = "answer" }
single_choice = 1.0
"remote:pickscore" = 0.5
[rollout]
dynamic_sampling = true
max_resample_rounds = 2
[train]
output_dir = "runs/x"
learning_rate = 1e-6
max_steps = 10
per_device_train_batch_size = 8
num_generations = 8
max_completion_length = 64
beta = 0.04
loss_type = "grpo"
epsilon_high = 0.28
importance_sampling_level = "sequence"
scale_rewards = "group"
use_vllm = false
seed = 1
report_to = "none"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "nft": """
kind = "nft"
[model]
name_or_path = "pipeline"
dtype = "bfloat16"
[lora]
r = 8
alpha = 16
[data]
path = "data/prompts.txt"
[rewards]
brightness = 1.0
jpeg_compressibility = { weight = 0.5 }
"remote:pickscore" = 0.5
[rollout]
samples_per_prompt = 4
sampling_steps = 6
solver = "heun"
height = 64
width = 64
train_batch_size = 4
[nft]
beta = 0.5
kl_beta = 0.001
decay_type = 2
ema_decay = 0.9
adv_mode = "positive_only"
global_std = false
reward_clip = 5.0
[train]
output_dir = "runs/x"
learning_rate = 3e-4
max_steps = 10
per_device_train_batch_size = 2
seed = 1
report_to = "none"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "flow-grpo": """
kind = "flow-grpo"
[model]
name_or_path = "pipeline"
dtype = "bfloat16"
[lora]
r = 8
alpha = 16
[data]
path = "data/prompts.txt"
[rewards]
brightness = 1.0
jpeg_compressibility = { weight = 0.5 }
"remote:pickscore" = 0.5
[rollout]
samples_per_prompt = 4
sampling_steps = 6
guidance_scale = 4.5
height = 64
width = 64
train_batch_size = 4
[flow_grpo]
noise_level = 0.7
clip_range = 0.0002
adv_clip_max = 5.0
kl_beta = 0.04
timestep_fraction = 0.5
kl_form = "exact"
drop_zero_advantage = true
same_latent = true
ema_decay = 0.9
ema_every = 8
[train]
output_dir = "runs/x"
learning_rate = 3e-4
max_steps = 10
per_device_train_batch_size = 2
seed = 1
report_to = "none"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "ddrl": """
kind = "ddrl"
[model]
name_or_path = "pipeline"
dtype = "bfloat16"
[lora]
r = 8
alpha = 16
[data]
path = "pairs"
format = "folder"
height = 64
width = 64
num_frames = 9
[rewards]
brightness = 1.0
[rollout]
samples_per_prompt = 4
sampling_steps = 8
guidance_scale = 1.0
train_batch_size = 4
[ddrl]
s_churn = 1.0
clip_range = 0.0001
kl_beta = 0.0
train_steps = [0, 2, 4, 6]
data_beta = 0.01
use_rl_sigma_and_noise = true
data_on_first_only = false
caption_dropout = 0.2
min_num_conditional_frames = 0
max_num_conditional_frames = 1
exp_reward = false
use_same_seed = true
loss_scale = 10.0
ema_decay = 0.9
[eval]
path = "data/prompts.txt"
every = 5
[train]
output_dir = "runs/x"
learning_rate = 3e-4
max_steps = 10
per_device_train_batch_size = 2
seed = 1
report_to = "none"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "diffusion-sft": """
kind = "diffusion-sft"
[model]
name_or_path = "pipeline"
dtype = "bfloat16"
[lora]
r = 8
alpha = 16
target_modules = ["to_q", "to_v"]
[data]
path = "pairs"
format = "folder"
height = 64
width = 64
num_frames = 9
cache = true
[diffusion]
timestep_density = "logit_normal"
logit_std = 1.0
loss_weighting = "sigma_sqrt"
ema_decay = 0.99
text_dropout = 0.1
conditioning_mix = { t2v = 0.7, i2v = 0.2, v2v = 0.1 }
validation_prompts = ["a cat"]
validation_steps = 5
[train]
output_dir = "runs/x"
learning_rate = 1e-4
max_steps = 10
per_device_train_batch_size = 2
gradient_checkpointing = true
seed = 1
report_to = "none"
resume_from_checkpoint = true
[launch]
backend = "ddp"
""",
    "policy-rl": """
kind = "policy-rl"
[model]
name_or_path = "cosmos3_pipeline"
[env]
factory = "domains.reach2d.env:Reach2DEnv"
kwargs = { size = 32 }
execute = 4
progress_key = "distance"
[rollout]
seeds = "100:164"
samples_per_start = 4
train_samples = 16
train_batch_size = 8
[reward]
progress_weight = 0.5
[rl]
algorithm = "nft"
[nft]
kl_beta = 0.0
[eval]
seeds = [1, 2, 3]
every = 5
[train]
output_dir = "runs/x"
learning_rate = 3e-4
max_steps = 10
per_device_train_batch_size = 2
seed = 1
""",
    "action-sft": """
kind = "action-sft"
[model]
name_or_path = "cosmos3_pipeline"
dtype = "bfloat16"
[data]
path = "robot"
cameras = ["observation.images.top"]
action_columns = ["action"]
state_columns = ["observation.state"]
normalization = "mean_std"
stride = 2
[action]
mode = "policy"
chunk_size = 4
domain = "pusht"
use_state = true
resolution_tier = 256
caption_dropout = 0.1
action_lr_multiplier = 5.0
action_heads = "fresh"
[train]
output_dir = "runs/x"
learning_rate = 1e-4
max_steps = 10
per_device_train_batch_size = 2
seed = 1
report_to = "none"
[launch]
backend = "ddp"
""",
}


@dataclass
class Case:
    name: str
    kind: str
    text: str | bytes  # the job file
    expect: tuple[str, ...]  # substrings of the one-line message (besides the file name)
    overrides: tuple[str, ...] = ()
    names_job: bool = True


def _toml(values: dict) -> str:
    return tomli_w.dumps(values)


def _set(values: dict, section: str, key: str | None, value) -> dict:
    changed = copy.deepcopy(values)
    if key is None:
        changed[section] = value
    elif value is _DELETE:
        del changed[section][key]
    else:
        changed[section][key] = value
    return changed


_DELETE = object()
_WRONG = [{"a": 1}]  # a list of tables: no key of any schema takes one


def _section_model(schema, section):
    annotation = schema.model_fields[section].annotation
    return next((a for a in (typing.get_args(annotation) or (annotation,)) if isinstance(a, type)), None)


def _train_wrong_value(annotation) -> object | None:
    """A value of the wrong type for a plain int / float / bool / choice field, else None."""
    base = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)]
    if len(base) != 1:
        return None
    if base[0] in (int, float):
        return "many"
    if base[0] is bool:
        return "yes"
    if typing.get_origin(base[0]) is typing.Literal:
        return 3.5
    return None


# A schema's required sections, filled as a minimal good job fills them (the fixture folder has these files).
MINIMAL_SECTIONS = {
    ModelSection: {"name_or_path": "model"},
    PipelineSection: {"name_or_path": "pipeline"},
    PromptListData: {"path": "data/prompts.txt"},
    PairData: {"path": "pairs", "format": "folder", "height": 32, "width": 32, "num_frames": 9},
}
MINIMAL_REWARDS = {"language": {"format": 1.0}, "diffusion": {"brightness": 1.0}}


def good_job(kind: str) -> str:
    """A good job file of `kind`: the hand-written one, or one made from the schema (its required sections
    filled, every other section at its defaults, so every key is fuzzed)."""
    if kind in GOOD_JOBS:
        return GOOD_JOBS[kind]
    entry = job_kinds()[kind]
    schema = entry.schema_class()
    values: dict = {"kind": kind}
    for name, field in schema.model_fields.items():
        model = _section_model(schema, name) if name not in ("kind",) else None
        if name == "train":
            values[name] = {"output_dir": "runs/x", "max_steps": 10, "report_to": "none"}
        elif name == "rewards":
            values[name] = MINIMAL_REWARDS[entry.family]
        elif isinstance(model, type) and issubclass(model, MediaData):
            values[name] = {"format": "llava", "path": "data/llava.json"}
        elif isinstance(model, type) and issubclass(model, tuple(MINIMAL_SECTIONS)):
            values[name] = next(v for base, v in MINIMAL_SECTIONS.items() if issubclass(model, base))
        elif isinstance(model, type) and hasattr(model, "model_fields") and not field.is_required():
            values[name] = model().model_dump(mode="json", exclude_none=True)
    return _toml(values)


def generated_cases(kind: str) -> list[Case]:
    good = tomllib.loads(good_job(kind))
    schema = job_kinds()[kind].schema_class()
    cases = []
    for section, values in good.items():
        if not isinstance(values, dict):
            continue
        model = _section_model(schema, section)
        cases.append(
            Case(f"{section}-not-a-table", kind, _toml(_set(good, section, None, 7)), (f"[{section}]",))
        )
        cases.append(
            Case(
                f"{section}-misspelt-key",
                kind,
                _toml(_set(good, section, "zz_typo", 1)),
                (f"[{section}]", "zz_typo"),
            )
        )
        for key in values:
            wrong = _toml(_set(good, section, key, _WRONG))
            cases.append(Case(f"{section}.{key}-wrong-type", kind, wrong, (f"[{section}]", key)))
            fields = getattr(model, "model_fields", {})  # [rewards] is a table of names, not a model
            if key in fields and fields[key].is_required():
                gone = _toml(_set(good, section, key, _DELETE))
                cases.append(
                    Case(f"{section}.{key}-missing", kind, gone, (f"[{section}]", f"missing key '{key}'"))
                )
    train_model = _section_model(schema, "train")
    for key, field in train_model.model_fields.items():
        wrong = _train_wrong_value(field.annotation)
        if wrong is not None:
            text = _toml(_set(good, "train", key, wrong))
            cases.append(Case(f"train.{key}-typed", kind, text, ("[train]", key)))
    return cases


SFT = GOOD_JOBS["sft"]
GRPO = GOOD_JOBS["grpo"]
ACTION = GOOD_JOBS["action-sft"]


def _sub(old: str, new: str) -> str:
    assert old in SFT, old
    return SFT.replace(old, new)


WRITTEN = [
    # The values the issue found passing validate-config.
    Case(
        "lr-word", "sft", _sub("learning_rate = 1e-4", 'learning_rate = "fast"'), ("[train]", "learning_rate")
    ),
    Case("steps-word", "sft", _sub("max_steps = 10", 'max_steps = "ten"'), ("[train]", "max_steps")),
    Case("seed-word", "sft", _sub("seed = 1", 'seed = "abc"'), ("[train]", "seed")),
    Case("bf16-yes", "sft", _sub("bf16 = false", 'bf16 = "yes"'), ("[train]", "bf16")),
    Case(
        "epochs-list",
        "sft",
        _sub("num_train_epochs = 1.0", "num_train_epochs = [1, 2]"),
        ("[train]", "num_train_epochs"),
    ),
    Case(
        "batch-0",
        "sft",
        _sub("per_device_train_batch_size = 2", "per_device_train_batch_size = 0"),
        ("[train]", "per_device_train_batch_size"),
    ),
    Case(
        "batch-neg",
        "sft",
        _sub("per_device_train_batch_size = 2", "per_device_train_batch_size = -1"),
        ("[train]", "per_device_train_batch_size"),
    ),
    Case(
        "accum-0",
        "sft",
        _sub("gradient_accumulation_steps = 2", "gradient_accumulation_steps = 0"),
        ("[train]", "gradient_accumulation_steps"),
    ),
    Case(
        "lr-negative",
        "sft",
        _sub("learning_rate = 1e-4", "learning_rate = -1.0"),
        ("[train]", "learning_rate"),
    ),
    Case(
        "tracker",
        "sft",
        _sub('report_to = "none"', 'report_to = "nonexistent_tracker"'),
        ("[train]", "report_to", "nonexistent_tracker"),
    ),
    Case(
        "tracker-in-list",
        "sft",
        _sub('report_to = "none"', 'report_to = ["tensorboard", "tensorbord"]'),
        ("[train]", "report_to"),
    ),
    Case(
        "bad-regex",
        "sft",
        _sub('freeze = ["vision"]', 'freeze = ["visual.(blocks"]'),
        ("[model]", "freeze", "regex"),
    ),
    # Typos and shapes users write.
    Case("max-steps-0", "sft", _sub("max_steps = 10", "max_steps = 0"), ("[train]", "max_steps")),
    Case("steps-float", "sft", _sub("max_steps = 10", "max_steps = 10.5"), ("[train]", "max_steps")),
    Case(
        "scheduler",
        "sft",
        _sub('lr_scheduler_type = "cosine"', 'lr_scheduler_type = "cosin"'),
        ("[train]", "lr_scheduler_type", "did you mean 'cosine'"),
    ),
    Case(
        "eval-strategy",
        "sft",
        _sub("seed = 1", 'seed = 1\neval_strategy = "step"'),
        ("[train]", "eval_strategy"),
    ),
    Case("optimizer", "sft", _sub("seed = 1", 'seed = 1\noptim = "adamw_torchh"'), ("[train]", "optim")),
    Case(
        "warmup-negative", "sft", _sub("seed = 1", "seed = 1\nwarmup_steps = -3"), ("[train]", "warmup_steps")
    ),
    Case(
        "grad-norm-negative",
        "sft",
        _sub("seed = 1", "seed = 1\nmax_grad_norm = -1.0"),
        ("[train]", "max_grad_norm"),
    ),
    Case("loss-type", "sft", _sub("seed = 1", 'seed = 1\nloss_type = "mse"'), ("[train]", "loss_type")),
    Case(
        "set-by-job",
        "sft",
        _sub("seed = 1", "seed = 1\nmax_length = 64"),
        ("[train]", "max_length", "set by the job"),
    ),
    Case(
        "packing-in-train",
        "sft",
        _sub("seed = 1", "seed = 1\npacking = true"),
        ("[train]", "packing", "set by the job"),
    ),
    Case(
        "resume-path",
        "sft",
        _sub("resume_from_checkpoint = true", 'resume_from_checkpoint = "runs/x/checkpoint-5"'),
        ("[train]", "resume_from_checkpoint"),
    ),
    Case("no-output-dir", "sft", _sub('output_dir = "runs/x"', ""), ("[train]", "missing key 'output_dir'")),
    Case(
        "train-misspelt",
        "sft",
        _sub("learning_rate", "learnig_rate"),
        ("[train]", "learnig_rate", "did you mean 'learning_rate'"),
    ),
    Case("lora-rank", "sft", _sub("r = 8", "rank = 8"), ("[lora]", "rank", "did you mean 'r'")),
    Case("lora-r-0", "sft", _sub("r = 8", "r = 0"), ("[lora]", "r")),
    Case("lora-r-string", "sft", _sub("r = 8", 'r = "8"'), ("[lora]", "r")),
    Case("lora-dropout-1", "sft", _sub("dropout = 0.05", "dropout = 1.0"), ("[lora]", "dropout")),
    Case(
        "lora-targets",
        "sft",
        _sub('target_modules = ["q_proj", "v_proj"]', 'target_modules = "all_linear"'),
        ("[lora]", "target_modules"),
    ),
    Case("dtype", "sft", _sub('dtype = "bfloat16"', 'dtype = "bf16"'), ("[model]", "dtype")),
    Case(
        "attn",
        "sft",
        _sub('dtype = "bfloat16"', 'attn_implementation = "flash"'),
        ("[model]", "attn_implementation"),
    ),
    Case("freeze-string", "sft", _sub('freeze = ["vision"]', 'freeze = "vision"'), ("[model]", "freeze")),
    Case(
        "model-path-missing",
        "sft",
        _sub('name_or_path = "model"\n', ""),
        ("[model]", "missing key 'name_or_path'"),
    ),
    Case("format", "sft", _sub('format = "llava"', 'format = "csv"'), ("[data]", "format")),
    Case(
        "data-path-missing",
        "sft",
        _sub('path = "data/llava.json"', 'path = "data/nope.json"'),
        ("[data]", "path", "nope.json"),
    ),
    Case(
        "media-dir-missing", "sft", _sub('media_dir = "data"', 'media_dir = "media"'), ("[data]", "media_dir")
    ),
    Case("fps-0", "sft", _sub("fps = 2.0", "fps = 0"), ("[data]", "fps")),
    Case("frames-float", "sft", _sub("max_frames = 8", "max_frames = 8.5"), ("[data]", "max_frames")),
    Case(
        "train-on",
        "sft",
        _sub('train_on = "assistant"', 'train_on = "assistants"'),
        ("[data]", "train_on", "did you mean 'assistant'"),
    ),
    Case("packing-word", "sft", _sub("packing = false", 'packing = "no"'), ("[data]", "packing")),
    Case("backend", "sft", _sub('backend = "ddp"', 'backend = "zero4"'), ("[launch]", "backend")),
    Case("fsdp-on-cpu", "sft", _sub('backend = "ddp"', 'backend = "fsdp"'), ("[launch]", "backend", "fsdp")),
    Case(
        "section-misspelt",
        "sft",
        _sub("[launch]", "[lanch]"),
        ("unknown section [lanch]", "did you mean 'launch'"),
    ),
    Case(
        "required-section-misspelt",
        "sft",
        _sub("[train]", "[trian]"),
        ("unknown section [trian]", "did you mean 'train'"),
    ),
    Case(
        "set-section-misspelt",
        "sft",
        SFT,
        ("unknown section [trian]", "did you mean 'train'"),
        ("trian.seed=1",),
    ),
    Case("extra-section", "sft", SFT + "\n[rewards]\nformat = 1.0\n", ("unknown section [rewards]",)),
    Case("array-of-tables", "sft", _sub("[lora]", "[[lora]]"), ("[lora]",)),
    Case("kind-unknown", "sft", _sub('kind = "sft"', 'kind = "stf"'), ("kind", "stf", "did you mean 'sft'")),
    Case("kind-number", "sft", _sub('kind = "sft"', "kind = 1"), ("kind",)),
    Case("invalid-toml", "sft", _sub("max_steps = 10", "max_steps = "), ("invalid TOML", "line")),
    Case("duplicate-key", "sft", _sub("seed = 1", "seed = 1\nseed = 2"), ("invalid TOML", "seed")),
    Case("empty-file", "sft", "", ("no kind",)),
    Case(
        "nft-guidance",
        "nft",
        GOOD_JOBS["nft"].replace('solver = "heun"', 'solver = "heun"\nguidance_scale = 4.5'),
        ("[rollout] guidance_scale", "without classifier-free guidance"),
    ),
    Case(
        "lr-huge", "sft", _sub("learning_rate = 1e-4", "learning_rate = 1e12"), ("[train]", "learning_rate")
    ),
    Case(
        "corrupt-image",
        "sft",
        _sub('path = "data/llava.json"', 'path = "bad_data/corrupt.json"').replace(
            'media_dir = "data"', 'media_dir = "bad_data"'
        ),
        ("bad_data/corrupt.json[0]", "corrupt image broken.png"),
        names_job=False,  # a data error names the data file and record instead
    ),
    Case("not-utf8", "sft", b"\xff\xfe[model]\n", ("cannot read",)),
    Case("set-no-equals", "sft", SFT, ("--set", "section.key=value"), ("train.max_steps",)),
    Case("set-not-a-section", "sft", SFT, ("--set", "'kind' is not a section"), ("kind.x=1",)),
    Case("set-bad-value", "sft", SFT, ("[train]", "max_steps"), ("train.max_steps=ten",)),
    Case(
        "reward-unknown",
        "grpo",
        GRPO.replace("single_choice = 1.0", "acuracy = 1.0"),
        ("[rewards]", "acuracy", "built-ins are accuracy, reasoning_accuracy", "format, single_choice"),
    ),
    Case(
        "reward-parameter",
        "grpo",
        GRPO.replace('think_tag = "think"', 'thinktag = "think"'),
        ("[rewards]", "format", "unknown parameter 'thinktag'", "think_tag, answer_tag"),
    ),
    Case(
        "reward-remote-empty",
        "grpo",
        GRPO.replace('"remote:pickscore"', '"remote:"'),
        ("[rewards]", "remote:"),
    ),
    Case(
        "reward-import-path",
        "grpo",
        GRPO.replace("single_choice = 1.0", '"my.module:1x" = 1.0'),
        ("[rewards]", "package.module:function"),
    ),
    Case(
        "rewards-empty",
        "grpo",
        GRPO.replace("single_choice = 1.0", "")
        .replace(
            '[rewards]\nformat = { weight = 0.5, think_tag = "think", answer_tag = "answer" }\n',
            "[rewards]\n",
        )
        .replace('"remote:pickscore" = 0.5', ""),
        ("[rewards]",),
    ),
    Case(
        "generations-1",
        "grpo",
        GRPO.replace("num_generations = 8", "num_generations = 1"),
        ("[train]", "num_generations"),
    ),
    Case(
        "vllm-mode",
        "grpo",
        GRPO.replace("use_vllm = false", 'use_vllm = true\nvllm_mode = "colocated"'),
        ("[train]", "vllm_mode"),
    ),
    Case(
        "loss-type-grpo",
        "grpo",
        GRPO.replace('loss_type = "grpo"', 'loss_type = "dapoo"'),
        ("[train]", "loss_type", "did you mean 'dapo'"),
    ),
    Case(
        "rollout-rounds-0",
        "grpo",
        GRPO.replace("max_resample_rounds = 2", "max_resample_rounds = 0"),
        ("[rollout]", "max_resample_rounds"),
    ),  # Action jobs: what the dataset's meta says, the domain, the sections' agreement.
    Case(
        "action-column-missing",
        "action-sft",
        ACTION.replace('action_columns = ["action"]', 'action_columns = ["actions"]'),
        ("[data]", "robot", "actions"),
    ),
    Case(
        "action-camera-missing",
        "action-sft",
        ACTION.replace('cameras = ["observation.images.top"]', 'cameras = ["observation.images.wrist"]'),
        ("[data]", "observation.images.wrist"),
    ),
    Case(
        "action-chunk-too-long",
        "action-sft",
        ACTION.replace("chunk_size = 4", "chunk_size = 40"),
        ("[data]", "chunk_size + 1 = 41 frames"),
    ),
    Case(
        "action-domain-unknown",
        "action-sft",
        ACTION.replace('domain = "pusht"', 'domain = "pushtt"'),
        ("[action] domain", "unknown Cosmos3 embodiment domain 'pushtt' (did you mean 'pusht'?)"),
    ),
    Case(
        "action-state-without-columns",
        "action-sft",
        ACTION.replace('state_columns = ["observation.state"]\n', ""),
        ("[action] use_state needs [data] state_columns",),
    ),
    Case(
        "action-layout-cameras",
        "action-sft",
        ACTION.replace("stride = 2", 'stride = 2\nlayout = "wrist_over_pair"'),
        ("wrist_over_pair", "3 camera(s)"),
    ),
    Case(
        "action-not-cosmos3",
        "action-sft",
        ACTION.replace('name_or_path = "cosmos3_pipeline"', 'name_or_path = "pipeline"'),
        ("[model]", "Cosmos2_5_PredictBasePipeline", "Cosmos3OmniPipeline"),
    ),
    Case(
        "action-mode-typo",
        "action-sft",
        ACTION.replace('mode = "policy"', 'mode = "polcy"'),
        ("[action] mode", "did you mean 'policy'"),
    ),
]


# Folders a job may name that are not what it needs: {folder: {file: text}}.
NOT_MODELS = {
    "empty_folder": {},
    "config_only": {"config.json": "{}"},
    "a_language_model": {"config.json": '{"model_type": "qwen3"}', "tokenizer_config.json": "{}"},
    "other_pipeline": {"model_index.json": '{"_class_name": "StableDiffusionXLPipeline"}'},
    "pipeline": {"model_index.json": '{"_class_name": "Cosmos2_5_PredictBasePipeline"}'},
    "cosmos3_pipeline": {"model_index.json": '{"_class_name": "Cosmos3OmniPipeline"}'},
    "model": {"config.json": '{"model_type": "qwen3"}'},
}


# Reward modules beside the job that fail to import: {module: source}.
SYNTAX_ERROR, IMPORT_ERROR = "fuzz_reward_syntax_error", "fuzz_reward_import_error"
BAD_REWARD_MODULES = {
    SYNTAX_ERROR: "def score(completions, **kwargs):\n    return [1.0 for _ in completions\n",
    IMPORT_ERROR: "import no_such_dependency_of_a_reward_xyz\n",
}


def source_cases(kind: str) -> list[Case]:
    """What a job names outside its file: a model that is missing or of the wrong kind, a reward that does not
    import. validate-config (and every trainer) finds them without loading weights."""
    good = tomllib.loads(good_job(kind))
    family = job_kinds()[kind].family
    wrong = {
        "model-folder-missing": ("runs/no/such/model", ("[model] name_or_path", "no folder")),
        "model-hub-id-offline": ("someorg/some-model", ("[model] name_or_path", "not in the local cache")),
    }
    if family == "diffusion":
        for folder in ("empty_folder", "config_only", "a_language_model"):
            wrong[f"model-{folder}"] = (folder, ("[model] name_or_path", "it is not a diffusers pipeline"))
        wrong["model-unsupported"] = (
            "other_pipeline",
            ("no cosmos-train adapter for StableDiffusionXLPipeline",),
        )
    else:
        for folder in ("empty_folder", "pipeline"):
            wrong[f"model-{folder}"] = (folder, ("[model] name_or_path", "it is not a transformers model"))
    cases = [
        Case(name, kind, _toml(_set(good, "model", "name_or_path", value)), expect)
        for name, (value, expect) in wrong.items()
    ]
    for name, output_dir, expect in (
        ("output-dir-is-a-file", "data/prompts.txt", "is a file, not a folder"),
        ("output-dir-inside-a-file", "data/prompts.txt/run", "which is a file"),
    ):
        text = _toml(_set(good, "train", "output_dir", output_dir))
        cases.append(Case(name, kind, text, ("[train] output_dir", output_dir, expect)))
    if "rewards" in good:
        for name, reward, expect in (
            ("reward-module-missing", "no_such_module_xyz:score", "cannot import no_such_module_xyz"),
            ("reward-function-missing", "json:no_such_function", "json has no 'no_such_function'"),
            ("reward-syntax-error", f"{SYNTAX_ERROR}:score", f"{SYNTAX_ERROR}.py, line 2"),
            ("reward-import-error", f"{IMPORT_ERROR}:score", f"{IMPORT_ERROR}.py, line 1"),
        ):
            rewards = {**good["rewards"], reward: 1.0}
            cases.append(Case(name, kind, _toml(_set(good, "rewards", None, rewards)), ("[rewards]", expect)))
    return cases


def all_cases() -> list[Case]:
    cases = list(WRITTEN)
    for kind in job_kinds():
        cases += generated_cases(kind) + source_cases(kind)
    return cases


CASES = all_cases()


def test_every_kind_is_fuzzed():
    assert set(GOOD_JOBS) <= set(job_kinds())
    for kind in job_kinds():
        assert len([case for case in CASES if case.kind == kind]) >= 20, kind
    assert len(CASES) >= 60 and len({(case.kind, case.name) for case in CASES}) == len(CASES)


LLAVA = '[{"conversations": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]}]'


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The files good jobs name: a model folder and a video pipeline folder (their configs only: validate-config
    reads no weights), LLaVA data, a prompt list and video pairs; and folders that are not what a job needs.
    Written once: every case only reads them."""
    from diffusion_helpers import write_video_pairs

    root = tmp_path_factory.mktemp("fuzz-files")
    write_video_pairs(root / "pairs", frames=9, size=16)
    write_robot_data(root / "robot")
    data = root / "data"
    data.mkdir(exist_ok=True)
    (data / "llava.json").write_text(LLAVA)
    bad = root / "bad_data"
    bad.mkdir(exist_ok=True)
    (bad / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (bad / "corrupt.json").write_text(
        LLAVA.replace('"conversations"', '"image": "broken.png", "conversations"')
    )
    (data / "prompts.txt").write_text("a red square\n")
    for module, text in BAD_REWARD_MODULES.items():
        (root / f"{module}.py").write_text(text)
    for folder, contents in NOT_MODELS.items():
        (root / folder).mkdir(exist_ok=True)
        for name, text in contents.items():
            (root / folder / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def app():
    return build_app()


def write_robot_data(root: Path) -> None:
    """A one-episode LeRobot dataset (8 frames, a 16x16 camera, 2-D state and action)."""
    import numpy as np

    from cosmos_train.data.lerobot import write_lerobot_dataset

    rng = np.random.default_rng(0)
    episode = {
        "task": "reach the red target",
        "frames": {"observation.images.top": rng.integers(0, 256, (8, 16, 16, 3), dtype=np.uint8)},
        "columns": {
            name: rng.standard_normal((8, 2)).astype(np.float32) for name in ("observation.state", "action")
        },
    }
    write_lerobot_dataset(root, [episode], fps=10)


def _folder(tmp_path: Path, files: Path) -> Path:
    """`tmp_path` holding links to the shared files, for a job file of its own."""
    for entry in files.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


@pytest.mark.parametrize("kind", sorted(job_kinds()))
def test_good_jobs_validate(tmp_path, files, app, kind):
    job = _folder(tmp_path, files) / "job.toml"
    job.write_text(good_job(kind))
    result = CliRunner().invoke(app, ["validate-config", str(job)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", sorted(job_kinds()))
def test_a_job_without_kind_is_a_job_of_the_command_that_runs_it(tmp_path, files, app, kind):
    """No `kind` key: the command's kind (validate-config takes --kind); a kind that disagrees is refused."""
    good = tomllib.loads(good_job(kind))
    del good["kind"]
    job = _folder(tmp_path, files) / "job.toml"
    job.write_text(_toml(good))
    result = CliRunner().invoke(app, ["validate-config", "--kind", kind, str(job)])
    assert result.exit_code == 0 and f"ok ({kind} job)" in result.stdout, result.output
    other = next(name for name in job_kinds() if name != kind)
    job.write_text(_toml({"kind": other, **good}))
    result = CliRunner().invoke(app, [kind, "-c", str(job)])
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip()
        == f"error: {job}: kind '{other}' is not a {kind} job; run `cosmos-train {other}` instead"
    )


def _refused_in_one_line(tmp_path, files, app, case: Case, command: str = "validate-config") -> None:
    job = _folder(tmp_path, files) / "job.toml"
    if isinstance(case.text, bytes):
        job.write_bytes(case.text)
    else:
        job.write_text(case.text)
    args = ["validate-config", str(job)] if command == "validate-config" else [command, "-c", str(job)]
    for override in case.overrides:
        args += ["--set", override]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # typer.Exit, not an escaped traceback
    message = result.stderr.strip()
    assert message.count("\n") == 0 and "Traceback" not in message, message
    assert message.startswith("error: ") and len(message) < 400 and "[?]" not in message, message
    if case.names_job and not message.startswith("error: --set"):
        assert str(job) in message, message
    for part in case.expect:
        assert part in message, (part, message)


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.kind}:{case.name}")
def test_malformed_job_is_one_line_naming_the_key(tmp_path, files, app, case):
    _refused_in_one_line(tmp_path, files, app, case)


SOURCE_CASES = [case for kind in job_kinds() for case in source_cases(kind)]


@pytest.mark.parametrize("case", SOURCE_CASES, ids=lambda case: f"{case.kind}:{case.name}")
def test_training_commands_refuse_a_missing_model_or_reward_in_one_line(tmp_path, files, app, case):
    """Each trainer's own command, not only validate-config: before any model loads, exit 2."""
    _refused_in_one_line(tmp_path, files, app, case, command=case.kind)


def test_a_registered_kind_is_fuzzed_without_an_edit_here(tmp_path_factory, files):
    """A new algorithm (its files and one registry entry, `tests/toy_algorithm/`) gets a good job made from its
    schema and every generated case."""
    from toy_algorithm import TOY_KIND

    from cosmos_train.kinds import register, unregister

    register(TOY_KIND)
    try:
        app = build_app()
        good = tmp_path_factory.mktemp("toy-good")
        job = _folder(good, files) / "job.toml"
        job.write_text(good_job(TOY_KIND.name))
        result = CliRunner().invoke(app, ["validate-config", str(job)])
        assert result.exit_code == 0 and "ok (toy-rl job)" in result.stdout, result.output
        cases = generated_cases(TOY_KIND.name) + source_cases(TOY_KIND.name)
        assert len(cases) >= 20 and any(case.name.startswith("toy.") for case in cases)
        for case in cases:
            _refused_in_one_line(tmp_path_factory.mktemp("toy"), files, app, case)
    finally:
        unregister(TOY_KIND.name)


def test_a_folder_given_as_the_job_file(tmp_path):
    result = CliRunner().invoke(build_app(), ["validate-config", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path}: is a folder, not a job file (TOML)"
