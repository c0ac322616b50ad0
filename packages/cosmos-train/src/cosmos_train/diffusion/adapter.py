"""The model adapter: everything a diffusion trainer needs from one pipeline family, and nothing else.

Trainers (flow-matching SFT, DiffusionNFT, FlowGRPO, DDRL) speak only to `DiffusionAdapter`; each family
(`sd3.py`, `sana.py`, ...) is one subclass in this folder, picked by the pipeline's `_class_name` in its
`model_index.json`. Adding a model means adding a file here that subclasses `DiffusionAdapter` and sets
`pipeline_class`; discovery is automatic (`adapter_class_for`). An adapter outside this folder is named by a
dotted path in the job (`[model] adapter = "package.module:MyAdapter"`).

Conventions every adapter keeps (rectified flow, `docs/diffusion-algorithms.md`):
- latents are batch-first, `B x C x H x W` for images and `B x C x T x H x W` for videos, already
  normalised the way the family's transformer expects them;
- sigma in [0, 1] is the noise level: x_sigma = (1 - sigma) * x0 + sigma * noise;
- the transformer predicts the velocity v = noise - x0, so one Euler step is x + (sigma_next - sigma) * v;
- `condition_frames` (video families) marks latent frames given clean (i2v, v2v): they are not noised,
  get no loss, and keep their clean value while sampling.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..config.sections import CONDITIONING_MODES
from ..errors import ConfigError, UnsupportedPipelineError


@dataclass
class AdapterOptions:
    """Per-job choices an adapter reads (from `[diffusion]`); families ignore what they do not use."""

    # Video families: how often each conditioning mode is drawn in training ({"t2v": 0.7, "i2v": 0.2, ...}).
    conditioning_mix: dict[str, float] = field(default_factory=lambda: {"t2v": 1.0})
    max_sequence_length: int | None = None  # text tokens (None: the pipeline's default)


class DiffusionAdapter:
    """One diffusers pipeline family. Subclasses set the class attributes and implement the hooks."""

    pipeline_class: ClassVar[str]  # the pipeline's `_class_name`, e.g. "StableDiffusion3Pipeline"
    video: ClassVar[bool] = False
    frames_argument: ClassVar[str] = "num_frames"  # what the pipeline's `__call__` calls the frame count
    # PEFT target modules for LoRA when the job names none (the attention projections, as upstream's examples).
    lora_target_modules: ClassVar[tuple[str, ...]] = ()
    # Extra `__call__` arguments for validation samples at the trained size.
    generate_kwargs: ClassVar[dict[str, Any]] = {}
    # Extra `from_pretrained` arguments (e.g. to leave out a run-time safety filter that training never uses).
    pipeline_load_kwargs: ClassVar[dict[str, Any]] = {}
    # Keys of `encode_prompts` output whose length may differ per prompt: right-padded with zeros when rows of
    # different lengths are batched (training batches, the guided call's [conditional; unconditional] rows), so
    # only keys whose padding the model ignores (text with its attention mask, the mask padded with 0s).
    ragged_conditioning: ClassVar[tuple[str, ...]] = ()
    # DiffusionNFT's deterministic rollout solver when `[rollout] solver` is unset (`sampling.SOLVERS`): the
    # references' per-family choice (cosmos-rl: dpm2 for SD3 and Cosmos, euler for SANA).
    rollout_solver: ClassVar[str] = "dpm2"
    # RL sampling size when `[rollout]` leaves it unset ("height", "width", "max_sequence_length"), where the
    # references train below the pipeline's own default; absent keys: the pipeline's.
    rl_sample_defaults: ClassVar[dict[str, int]] = {}
    # Prompts per pipeline call in `generate`: 1 for pipelines that take one prompt per call; more where the
    # pipeline draws each sample's noise from its own generator (a list), so batching leaves samples unchanged.
    generation_batch: ClassVar[int] = 1

    def __init__(self, pipeline, options: AdapterOptions | None = None):
        self.pipeline = pipeline
        self.options = options or AdapterOptions()
        self._latent_shapes: dict[tuple, tuple[int, ...]] = {}

    # --- the parts -------------------------------------------------------------------------------------

    @property
    def transformer(self) -> torch.nn.Module:
        return self.pipeline.transformer

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    def frozen_modules(self) -> list[torch.nn.Module]:
        """Everything besides the transformer that runs in training (VAE, text encoders): kept frozen."""
        return [
            m
            for m in self.pipeline.components.values()
            if isinstance(m, torch.nn.Module) and m is not self.transformer
        ]

    def prepare_full_finetuning(self) -> None:
        """Full fine-tuning: let the parameters that train require grad (all of the transformer by default;
        a family with parts that must stay frozen, such as Cosmos3's reasoner, narrows this)."""
        self.transformer.requires_grad_(True)

    # --- text ------------------------------------------------------------------------------------------

    def encode_prompts(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        """Batch-first conditioning tensors for `predict_velocity` (the empty prompt is the unconditional one)."""
        raise NotImplementedError

    def text_encoder_modules(self) -> list[torch.nn.Module]:
        """The modules `encode_prompts` runs: their weights key the text-embedding cache."""
        return []

    # --- pixels <-> latents ----------------------------------------------------------------------------

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """`B x 3 x H x W` (images) or `B x 3 x T x H x W` (videos) in [-1, 1] -> normalised latents."""
        raise NotImplementedError

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalised latents -> pixels in [-1, 1], the shape `encode_pixels` takes."""
        raise NotImplementedError

    def vae_modules(self) -> list[torch.nn.Module]:
        """The modules `encode_pixels` runs: their weights key the latent cache."""
        return [self.pipeline.vae]

    def latent_shape(self, height: int, width: int, num_frames: int | None = None) -> tuple[int, ...]:
        """One sample's latent shape at this pixel size (found once by encoding a blank image or clip)."""
        key = (height, width, num_frames)
        if key not in self._latent_shapes:
            frames = (num_frames,) if self.video and num_frames else ()
            blank = torch.zeros(1, 3, *frames, height, width, device=self.device)
            # fork_rng: a VAE that samples its posterior must not shift the training RNG stream (resume).
            devices = [self.device] if self.device.type == "cuda" else []
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                self._latent_shapes[key] = tuple(self.encode_pixels(blank).shape[1:])
        return self._latent_shapes[key]

    def default_size(self) -> tuple[int, int, int | None]:
        """The pipeline's own default (height, width, frames or None), as its `__call__` would pick them:
        its signature's defaults, else its default sample size times the VAE's scale."""
        import inspect

        pipeline = self.pipeline
        defaults = {
            name: parameter.default
            for name, parameter in inspect.signature(type(pipeline).__call__).parameters.items()
            if isinstance(parameter.default, int) and not isinstance(parameter.default, bool)
        }
        frames = defaults.get(self.frames_argument) if self.video else None
        if "height" in defaults and "width" in defaults:
            return defaults["height"], defaults["width"], frames
        sample = getattr(pipeline, "default_sample_size", None) or self.transformer.config.get("sample_size")
        scale = getattr(pipeline, "vae_scale_factor", None) or getattr(
            pipeline, "vae_scale_factor_spatial", None
        )
        if not sample or not scale:
            raise ValueError(f"{type(pipeline).__name__} has no default size; set [rollout] height and width")
        return int(sample * scale), int(sample * scale), frames

    @classmethod
    def configured_size(
        cls, configs: dict[str, dict]
    ) -> tuple[tuple[int | None, int | None, int | None], int | None]:
        """From the pipeline's component configs alone (`{"transformer": {...}, "vae": {...}}`, no weights): its
        own default (height, width, frames; None where unknown) and the largest height or width its transformer
        can take (None: no limit the family knows of). `estimate-memory` and the job's checks read it before any
        model loads; `max_sample_side` answers the same for a loaded pipeline."""
        return (None, None, None), None

    def max_sample_side(self) -> int | None:
        """The largest height or width the loaded transformer can take (`configured_size`), None for no limit."""
        vae = getattr(self.pipeline, "vae", None)
        configs = {
            "transformer": dict(self.transformer.config),
            "vae": dict(vae.config) if vae is not None else {},
        }
        return type(self).configured_size(configs)[1]

    # --- noise and time --------------------------------------------------------------------------------

    @property
    def shift(self) -> float:
        """The time shift s of the family's scheduler: sigma' = s * sigma / (1 + (s - 1) * sigma)."""
        config = self.pipeline.scheduler.config
        return float(config.get("shift", None) or config.get("flow_shift", None) or 1.0)

    def shift_sigmas(self, sigmas: torch.Tensor) -> torch.Tensor:
        shift = self.shift
        return shift * sigmas / (1 + (shift - 1) * sigmas)

    def model_timesteps(self, sigmas: torch.Tensor, timesteps: torch.Tensor | None = None) -> torch.Tensor:
        """What the transformer takes as its timestep: the scheduler's own `timesteps` when sampling on its grid
        (the pipeline feeds exactly those: DPM-Solver's are integers), else sigma on the 0..1000 training scale."""
        if timesteps is not None:
            return timesteps
        return sigmas * self.pipeline.scheduler.config.num_train_timesteps

    def condition_frames(self, latents: torch.Tensor, generator: torch.Generator | None = None):
        """`B x T` bool of latent frames given clean (drawn from the conditioning mix), or None (images)."""
        return None

    # --- classifier-free guidance ----------------------------------------------------------------------

    @property
    def negative_prompt(self) -> str:
        """The prompt of the unconditional branch, as the pipeline's `__call__` picks it ("" for most)."""
        return ""

    def guide(self, conditional: torch.Tensor, unconditional: torch.Tensor, scale: float) -> torch.Tensor:
        """Classifier-free guidance in the pipeline's own form (most: uncond + g (cond - uncond))."""
        return unconditional + scale * (conditional - unconditional)

    def stack_conditioning(
        self, conditional: dict[str, torch.Tensor], unconditional: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor] | None:
        """The conditioning of one guided transformer call: the conditional rows, then the unconditional ones
        (`torch.cat` on dim 0, key by key), or None where the two cannot share a call (the sampler then makes two).
        Keys of equal non-batch shapes are concatenated as they are; `ragged_conditioning` keys of different
        lengths (dim 1) are right-padded with zeros to the longer one first; any other difference gives None.
        A family whose model cannot take both branches in one batch overrides this to return None."""
        if set(conditional) != set(unconditional):
            return None
        stacked = {}
        for key, cond in conditional.items():
            uncond = unconditional[key]
            if cond.shape[1:] != uncond.shape[1:]:
                if (
                    key not in self.ragged_conditioning
                    or cond.dim() < 2
                    or cond.shape[2:] != uncond.shape[2:]
                ):
                    return None
                length = max(cond.shape[1], uncond.shape[1])
                cond, uncond = (_pad_dim1(value, length) for value in (cond, uncond))
            stacked[key] = torch.cat([cond, uncond])
        return stacked

    def grid_kwargs(self, num_steps: int, latent_shape: tuple[int, ...]) -> dict[str, Any]:
        """Extra `scheduler.set_timesteps` arguments the pipeline passes at this latent shape (none for most)."""
        return {}

    # --- the model call --------------------------------------------------------------------------------

    def predict_velocity(
        self,
        transformer: torch.nn.Module,
        noisy_latents: torch.Tensor,
        sigmas: torch.Tensor,
        conditioning: dict[str, torch.Tensor],
        condition_frames: torch.Tensor | None = None,
        timesteps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """v_theta(x_sigma, sigma, c), shaped like the latents. `transformer` is the module to call (it may be
        wrapped by DDP/DeepSpeed, or be the frozen reference), `sigmas` has one value per row, `timesteps` (one
        per row, optional) are the scheduler's own values for them (`model_timesteps`)."""
        raise NotImplementedError

    # --- sampling with the pipeline itself (validation samples) -----------------------------------------

    def generate(
        self,
        prompts: list[str],
        height: int,
        width: int,
        num_frames: int | None = None,
        num_inference_steps: int = 20,
        guidance_scale: float | None = None,
        seed: int = 0,
        **kwargs,
    ) -> torch.Tensor:
        """The pipeline's own sampler: `B x 3 x H x W` images or `B x T x 3 x H x W` videos in [0, 1].
        Prompt i uses seed `seed + i`, so samples are comparable across steps."""
        call = {"height": height, "width": width, "num_inference_steps": num_inference_steps}
        call |= self.generate_kwargs | kwargs
        if guidance_scale is not None:
            call["guidance_scale"] = guidance_scale
        if self.video and num_frames is not None:
            call[self.frames_argument] = num_frames
        if self.options.max_sequence_length and "max_sequence_length" in _call_parameters(self.pipeline):
            call["max_sequence_length"] = self.options.max_sequence_length
        was_training = self.transformer.training
        self.transformer.eval()
        limits = f"max_sequence_length {call.get('max_sequence_length', 'the pipeline default')}"
        try:
            outputs = []
            generators = [torch.Generator(self.device).manual_seed(seed + i) for i in range(len(prompts))]
            with truncation_warned_once(self, limits):
                for start in range(0, len(prompts), self.generation_batch):
                    chunk = slice(start, start + self.generation_batch)
                    if self.generation_batch == 1:
                        outputs.append(self.sample(prompts[start], generators[start], call))
                    else:
                        outputs.append(self.sample(prompts[chunk], generators[chunk], call))
        finally:
            self.transformer.train(was_training)
        return torch.cat(outputs).float().clamp(0, 1)

    def sample(self, prompt, generator, call: dict[str, Any]) -> torch.Tensor:
        """One prompt (or, with `generation_batch` > 1, a list with a generator each) through the pipeline:
        `B x 3 x H x W` or `B x T x 3 x H x W` in [0, 1]."""
        images, *_ = self.pipeline(
            prompt=prompt, generator=generator, output_type="pt", return_dict=False, **call
        )
        return images

    # --- LoRA export -----------------------------------------------------------------------------------

    def save_lora(
        self, folder: Path, lora_state_dict: dict[str, torch.Tensor], alpha: int, rank: int
    ) -> None:
        """Write a LoRA that plain diffusers loads with `pipeline.load_lora_weights(folder)`."""
        metadata = {
            "r": rank,
            "lora_alpha": alpha,
            "target_modules": sorted(self.transformer.peft_config["default"].target_modules),
        }
        type(self.pipeline).save_lora_weights(
            folder, transformer_lora_layers=lora_state_dict, transformer_lora_adapter_metadata=metadata
        )

    def lora_loading_call(self, folder: Path) -> str:
        """The documented diffusers call that loads `save_lora`'s output (shown in export model cards)."""
        return f'pipe.load_lora_weights("{folder}")'


# ---------------------------------------------------------------------------------------------------------
# Discovery


def adapters() -> dict[str, type[DiffusionAdapter]]:
    """{pipeline class name: adapter class} for every module of `diffusion/families/` (one file a family)."""
    package = importlib.import_module(f"{__package__}.families")
    found: dict[str, type[DiffusionAdapter]] = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, DiffusionAdapter)
                and value.__module__ == module.__name__
                and "pipeline_class" in vars(value)
            ):
                found[value.pipeline_class] = value
    return found


def pipeline_class_name(name_or_path: str) -> str:
    """The `_class_name` of a pipeline repo (hub id or folder), from its `model_index.json`."""
    from diffusers import DiffusionPipeline

    config = DiffusionPipeline.load_config(name_or_path)
    return config["_class_name"]


def adapter_class_for(class_name: str, reference: str | None = None) -> type[DiffusionAdapter]:
    """The adapter for a pipeline class: the one named by `reference` (`package.module:Class`), else the one of
    `diffusion/families/` whose `pipeline_class` is `class_name`."""
    if reference is not None:
        from ..references import BadReferenceError, load_reference

        try:
            adapter = load_reference(reference)
        except BadReferenceError as error:
            raise ConfigError(f"[model] adapter {reference!r}: {error}") from None
        if not (isinstance(adapter, type) and issubclass(adapter, DiffusionAdapter)):
            raise ConfigError(f"[model] adapter {reference!r} is not a DiffusionAdapter subclass")
        return adapter
    known = adapters()
    if class_name not in known:
        raise UnsupportedPipelineError(
            f"no cosmos-train adapter for {class_name}; supported pipelines: {', '.join(sorted(known))} "
            "(to add one, write a DiffusionAdapter subclass, see DEVELOPERS.md)"
        )
    return known[class_name]


class _Truncations(logging.Filter):
    """Drops a pipeline's per-call "... was truncated ..." warnings, counting them."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "was truncated" in record.getMessage():
            self.count += 1
            return False
        return True


@contextlib.contextmanager
def truncation_warned_once(adapter: DiffusionAdapter, limits: str) -> Iterator[None]:
    """Prompt encoding in which the pipeline's truncation warnings (one per call, so one per training step, and
    showing the cut text as '' when `max_sequence_length` is set) become one warning per adapter, naming the
    text encoders' `limits`."""
    pipeline_logger = logging.getLogger(type(adapter.pipeline).__module__)
    truncations = _Truncations()
    pipeline_logger.addFilter(truncations)
    try:
        yield
    finally:
        pipeline_logger.removeFilter(truncations)
    if truncations.count and not getattr(adapter, "_warned_truncation", False):
        adapter._warned_truncation = True
        logging.getLogger(__name__).warning(
            "%s: prompts longer than the text encoders take (%s) lose their ends; raise max_sequence_length "
            "([diffusion] or [rollout]) to keep more (said once)",
            adapter.pipeline_class,
            limits,
        )


def _pad_dim1(value: torch.Tensor, length: int) -> torch.Tensor:
    """`value` right-padded with zeros along dim 1 (the sequence) to `length`."""
    missing = length - value.shape[1]
    if missing == 0:
        return value
    return torch.cat([value, value.new_zeros(value.shape[0], missing, *value.shape[2:])], dim=1)


def _call_parameters(pipeline) -> dict[str, Any]:
    import inspect

    return dict(inspect.signature(type(pipeline).__call__).parameters)


def call_default(pipeline, name: str):
    """A default of the pipeline's `__call__` (what a plain `pipeline(prompt)` uses)."""
    return _call_parameters(pipeline)[name].default


def draw_condition_frames(
    adapter: DiffusionAdapter,
    latents: torch.Tensor,
    clean_frames: dict[str, int],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`B x T` bool: per row a mode drawn from `adapter.options.conditioning_mix`, whose leading `clean_frames[mode]`
    latent frames are given clean. A mode that would leave no frame to generate falls back to t2v. Draws from the
    global RNG when `generator` is None (so a resumed run draws the same modes)."""
    mix = adapter.options.conditioning_mix
    unknown = set(mix) - set(CONDITIONING_MODES)
    if unknown:
        raise ValueError(
            f"conditioning_mix for {adapter.pipeline_class}: unknown modes {sorted(unknown)}; "
            f"expected {CONDITIONING_MODES}"
        )
    weights = torch.tensor([float(mix.get(mode, 0.0)) for mode in CONDITIONING_MODES])
    if (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(
            f"conditioning_mix for {adapter.pipeline_class} needs non-negative weights summing > 0"
        )
    batch, frames = latents.shape[0], latents.shape[2]
    device = generator.device if generator is not None else torch.device("cpu")
    drawn = torch.multinomial(weights.to(device), batch, replacement=True, generator=generator).cpu()
    clean = torch.tensor([clean_frames[mode] for mode in CONDITIONING_MODES])[drawn]
    clean = torch.where(clean < frames, clean, torch.zeros_like(clean))
    return (torch.arange(frames)[None] < clean[:, None]).to(latents.device)
