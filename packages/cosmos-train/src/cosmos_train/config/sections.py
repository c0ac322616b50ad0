"""The sections several job kinds share, and `JobSchema`, the top level every kind's schema subclasses.

Pure declarations: validating a job reads no file and loads no model (`cosmos_train.jobs` checks what a job names
outside its file, and the run functions load it). Path fields carry a `JobPath` marker: a relative value is
relative to the job file's folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Video families' conditioning modes: which leading latent frames are given clean (none, the first, or more).
CONDITIONING_MODES = ("t2v", "i2v", "v2v")
# The deterministic ODE solvers of `diffusion.sampling.ode_sample` (a rollout's `[rollout] solver`).
SOLVERS = ("dpm2", "euler", "heun", "pipeline")
# The copies of the trained weights a trainer may keep beside them (`JobSchema.weight_copies`): saved name -> what
# `estimate-memory` calls it.
WEIGHT_COPIES = {"ema": "EMA", "old_policy": "old policy", "reference": "KL reference"}


@dataclass(frozen=True)
class JobPath:
    """Marks a string field as a path: a relative value is relative to the job file's folder.

    With `hub_id` the value may also be a Hugging Face hub id: it is resolved only when that path
    exists beside the job file, and kept as written otherwise.
    """

    hub_id: bool = False


class Section(BaseModel):
    # strict: TOML values are typed, so "yes" is not a bool and "10" is not a number.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelSection(Section):
    """`[model]`: the model to train, a transformers model (an LM or VLM)."""

    name_or_path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="Hub id or local folder, in any Cosmos3 checkpoint layout."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype when loading ('auto': the checkpoint's)."
    )
    attn_implementation: (
        Literal["eager", "sdpa", "segment_sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
        | None
    ) = Field(None, description="transformers' attention kernel (default: sdpa; packing: segment_sdpa).")
    freeze: list[str] = Field(
        default_factory=list,
        description="Regexes of parameter names to freeze; 'vision' means the vision tower.",
    )
    trust_remote_code: bool = Field(
        False, description="Run model code the checkpoint ships (transformers' option)."
    )

    @field_validator("freeze")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"{pattern!r} is not a valid regex ({error})") from None
        return patterns


class PipelineSection(Section):
    """`[model]`: the diffusers pipeline whose transformer is trained."""

    name_or_path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="A diffusers pipeline: hub id or local folder with model_index.json."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights of the frozen parts (VAE, text encoders); the transformer trains in float32.",
    )
    adapter: str | None = Field(
        None,
        description="The model family's adapter as 'package.module:Class' (default: the one for the pipeline's "
        "class).",
    )
    trust_remote_code: bool = Field(
        False, description="Load components whose code ships in the pipeline's folders (diffusers' option)."
    )


class LoraSection(Section):
    """`[lora]`: a PEFT LoRA; only the adapters train. Absent: full fine-tuning."""

    r: int = Field(16, gt=0, description="The adapters' rank.")
    alpha: int = Field(32, gt=0, description="Scale numerator: the update is (alpha / r) B A.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input.")
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        default=None,
        description="Default: all-linear for LMs and VLMs, the family's attention projections for diffusion.",
    )
    exclude_modules: list[str] | None = Field(
        default=None,
        description="Regexes of modules to leave without adapters (defaults to the vision tower).",
    )


class MediaData(Section):
    """`[data]` fields every trainer on LLaVA JSON / JSONL / `datasets` data shares; trainers subclass it."""

    format: Literal["llava", "jsonl", "hf"] = Field(
        description="LLaVA JSON, typed-message JSONL, or a `datasets` source."
    )
    path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="JSON/JSONL file, a saved datasets folder, or a hub dataset name."
    )
    media_dir: Annotated[str | None, JobPath()] = Field(
        default=None, description="Folder that image/video paths are relative to."
    )
    split: str = Field("train", description="hf: the dataset split.")
    system_prompt: str | None = Field(None, description="A system turn put before every conversation.")
    fps: float = Field(2.0, gt=0, description="Frames per second sampled from videos.")
    max_frames: int = Field(16, gt=0, description="Cap on frames per video.")
    skip_bad: bool = Field(False, description="Skip and count bad records instead of failing.")


class ConversationData(MediaData):
    """`[data]`: conversations in LLaVA JSON, typed-message JSONL or a `datasets` dataset."""

    max_length: int | None = Field(default=2048, gt=0, description="Tokens per sample (longer ones are cut).")
    packing: bool = Field(False, description="Padding-free packing (text-only data).")
    train_on: Literal["assistant", "all"] = Field(
        "assistant", description="Loss on the assistant turns only, or on the whole conversation."
    )


class PromptData(MediaData):
    """`[data]`: prompts in JSONL, LLaVA JSON (images or video) or a `datasets` dataset (`data/chat_prompts.py`)."""


class PairData(Section):
    """`[data]` for diffusion training: images or videos paired with captions.

    `format = "auto"` recognises a Cosmos-Predict2.5 dataset (`videos/` + `metas/` folders), a folder of
    pairs sharing a basename (`0001.json` + `0001.jpg|png|mp4`), or else a `datasets` source.
    """

    path: Annotated[str, JobPath(hub_id=True)] = Field(
        description="A folder of pairs, a Cosmos-Predict2.5 dataset folder, or a datasets folder / hub name."
    )
    format: Literal["auto", "folder", "cosmos_predict", "hf"] = Field(
        "auto", description="How `path` is read; auto: by looking at it."
    )
    split: str = Field("train", description="hf: the dataset split.")
    image_column: str = Field("image", description="hf: the image column.")
    video_column: str | None = Field(
        None, description="hf: the video column (file paths or a datasets Video feature), for video data."
    )
    caption_column: str = Field("text", description="hf: the caption column.")
    height: int = Field(gt=0, description="Training height: media are resized and centre-cropped to it.")
    width: int = Field(gt=0, description="Training width.")
    num_frames: int | None = Field(None, gt=0, description="Videos: a random window of this many frames.")
    cache: bool = Field(
        False,
        description="Cache latents and text embeddings as safetensors; fixes each video's frame window and "
        "each item's VAE latent sample.",
    )
    cache_dir: Annotated[str | None, JobPath()] = Field(
        None, description="Where the cache lives (default: output_dir/cache)."
    )
    skip_bad: bool = Field(False, description="Skip and count bad pairs instead of failing.")


class PromptListData(Section):
    """`[data]` for diffusion RL: a prompt list (`cosmos_train.data.prompt_lists`).

    `path` alone is enough: `.txt` is one prompt per line, `*_metadata.jsonl` is GenEval, another `.jsonl` holds
    `{"prompt", ...metadata}` records; a folder is resolved by `split` (`train.txt`, `train_metadata.jsonl`, ...).
    """

    path: Annotated[str, JobPath()] = Field(
        description="A prompt file, or a folder holding {split}.txt / {split}_metadata.jsonl / {split}.jsonl."
    )
    format: Literal["auto", "txt", "geneval", "jsonl"] = Field(
        "auto", description="txt: a prompt a line; geneval: {split}_metadata.jsonl; auto: from the file name."
    )
    split: str = Field("train", min_length=1, description="For a folder: which split's file to read.")
    max_prompts: int | None = Field(None, gt=0, description="Use only the first this many prompts.")
    skip_bad: bool = Field(False, description="Skip and count bad lines instead of failing.")


class LeRobotData(Section):
    """`[data]` for action training: a LeRobot dataset (v3.0 or v2.1) read directly, not through the `lerobot`
    package (which pins an older torch and a newer Python): the cameras, the action and state columns, and how the
    actions are represented and normalised (`cosmos_train.data.lerobot`)."""

    path: Annotated[str, JobPath()] = Field(description="The dataset folder (holding meta/info.json).")
    format: Literal["lerobot"] = Field("lerobot", description="A LeRobot dataset.")
    cameras: list[str] = Field(
        min_length=1, description="Camera features, e.g. observation.images.agentview (one, or the layout's)."
    )
    layout: Literal["single", "side_by_side", "wrist_over_pair"] = Field(
        "single",
        description="single: one camera; side_by_side: concatenated along the width (LIBERO); wrist_over_pair: "
        "camera 1 on top, cameras 2 and 3 at half size below (DROID's concat view).",
    )
    action_columns: list[str] = Field(
        min_length=1,
        description="Action columns, concatenated in order (e.g. action, or DROID's split ones).",
    )
    state_columns: list[str] = Field(
        default_factory=list,
        description="State columns, read at each window's first frame ([action] use_state).",
    )
    representation: Literal["raw", "ee_delta_rot6d", "axis_angle_to_rot6d"] = Field(
        "raw",
        description="raw; ee_delta_rot6d: [dpos, drot6d, gripper] between end-effector poses (DROID forward "
        "dynamics); axis_angle_to_rot6d: LIBERO's 7-D [dpos, axis-angle, gripper] as 10-D.",
    )
    normalization: Literal["none", "mean_std", "quantile"] = Field(
        "none", description="From meta/stats.json: none, (a - mean) / std, or over [q01, q99] to [-1, 1]."
    )
    episodes: list[int] | None = Field(
        None, description="Train on these episode indexes only (default: all); hold the others out."
    )
    stride: int = Field(1, gt=0, description="Frames between the starts of consecutive windows.")
    tolerance_s: float = Field(
        1e-4, gt=0, description="A decoded frame further than this from its timestamp is an error (seconds)."
    )
    cache: bool = Field(
        False,
        description="Keep each window's latents in memory once encoded, and decode its frames no more (small "
        "datasets: about C x T/4 x H/16 x W/16 floats a window).",
    )

    @field_validator("cameras")
    @classmethod
    def _distinct(cls, cameras: list[str]) -> list[str]:
        if len(set(cameras)) != len(cameras):
            raise ValueError("cameras are listed twice")
        return cameras


class LaunchSection(Section):
    """`[launch]`: how the processes share the work."""

    backend: Literal["ddp", "zero2", "zero3", "fsdp"] = Field(
        "ddp",
        description="DDP, DeepSpeed ZeRO-2 / ZeRO-3 or FSDP2, with the configs shipped in cosmos_train/launch/.",
    )


@dataclass(frozen=True)
class ActivationBatch:
    """One training forward, as `estimate-memory` sizes its activations: `rows` sequences of `tokens` tokens
    (language models; `prompt_tokens` of them assumed, `generates`: generated first, with a KV cache), or `rows`
    samples of `size` (height, width, frames) with `text_tokens` (diffusion; None: the default assumption)."""

    rows: int
    tokens: int = 0
    prompt_tokens: int = 0
    generates: bool = False
    size: tuple[int, int, int | None] | None = None
    text_tokens: int | None = None


class JobSchema(Section):
    """The top level of a job file. Trainers subclass it with their sections."""

    # Each trainer adds its sections, ending with `train`: its config dataclass (`trainer_section`).
    kind: str | None = Field(
        None,
        description="The trainer that runs the job (its command's name); needed only by validate-config.",
    )
    launch: LaunchSection = LaunchSection()

    # cosmos-train's defaults for this kind's `[train]` keys where they differ from its config class's (a job's
    # `[train]` may change them): the reference implementations' optimizer settings.
    train_defaults: ClassVar[dict[str, Any]] = {}

    # Defaults by the pipeline's class (`model_index.json`'s `_class_name`), where this kind's reference trains a
    # family with other values than the schema's: {pipeline class: {section: {key: value}}}. `read_job` applies
    # them before validation to keys the job leaves out, and to an optional section (`[lora]`) only when present.
    family_defaults: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}

    # The pipeline classes (`model_index.json`'s `_class_name`) this kind trains; None: any with an adapter.
    pipeline_classes: ClassVar[tuple[str, ...] | None] = None

    def training_arguments(self, source: str) -> Any:
        """The trainer's TRL / transformers config for this job (raises `ConfigError`)."""
        raise NotImplementedError

    def lerobot_request(self) -> dict[str, Any] | None:
        """What a LeRobot `[data]` must hold for this job (`cosmos_train.data.lerobot.ActionSpec`'s fields), which
        `validate-config` checks from the dataset's meta without decoding video; None for other data."""
        return None

    def action_domain(self) -> str | int | None:
        """The Cosmos3 embodiment domain an action job trains (checked against the known names), or None."""
        return None

    def activation_batch(
        self, args: Any, family: Any = None, configured: tuple | None = None
    ) -> ActivationBatch:
        """What one training forward holds (`args`: the job's trainer config; `family`: a diffusion job's adapter
        class, for its defaults; `configured`: its `configured_size` from the pipeline's configs), for
        `estimate-memory`."""
        raise NotImplementedError

    def weight_copies(self) -> tuple[str, ...]:
        """The copies of the trained weights this job's trainer keeps beside them, by the names the trainers save
        them under (`WEIGHT_COPIES`): `estimate-memory` counts them, and the diffusion trainers keep exactly these
        (they refuse to start otherwise)."""
        return ()
