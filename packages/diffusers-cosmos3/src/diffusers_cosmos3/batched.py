"""Batched (varlen) training forward for upstream diffusers' `Cosmos3OmniTransformer`.

Upstream's transformer takes one packed sample per call: a causal text (AR) prefix of `und_len` tokens,
then generator (DM) tokens. Here several samples run in one call of upstream's own `forward`: all
samples' text tokens first, then all their vision tokens, with an attention processor that keeps the
samples apart. AR queries attend causally within their own sample's text; DM queries attend to their
own sample's AR keys and DM keys (full). The output equals the per-sample native forward.

    from diffusers_cosmos3.batched import Cosmos3TrainingSample, batched_forward, pack_samples
    ids, _ = pipeline.tokenize_prompt(prompt, num_frames=1, height=256, width=256)
    sample = Cosmos3TrainingSample(ids, x0=x0, noisy=x_t, timestep=sigma * 1000)   # t2i
    packed = pack_samples(pipeline, [sample, ...])
    preds = batched_forward(pipeline.transformer, packed)   # [1, C, T, H, W] each, zeros at clean frames

Action samples (a transformer built with `action_gen`: policy, forward and inverse dynamics) add their action
tokens after their vision tokens, with upstream's `_prepare_action_segment` positions, and
`batched_outputs(...).action` gives one `[T, action_dim]` velocity per sample (zeros at clean steps).

The per-sample inputs come from the pipeline's own helpers (`_prepare_text_segment`,
`_prepare_vision_segment`), so positions, noisy-frame indexes and timestep placement are upstream's.
`Cosmos3ReasonerCache` keeps the frozen reasoner's keys/values per prompt, so later calls with the same
prompts skip the text tower.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from diffusers.models.transformers.transformer_cosmos3 import Cosmos3AttnProcessor, _rotate_half

Attention = Literal["segments", "mask"]


@dataclass
class Cosmos3TrainingSample:
    """One training sample, in the pipeline's units.

    `input_ids`: the pipeline's `tokenize_prompt` output (EOS and vision-start included).
    `x0`: clean latent, `[C, T, H, W]` or `[1, C, T, H, W]` (normalised, as `pipeline._encode_video`).
    `noisy`: the noised latent `x_t = t * eps + (1 - t) * x0` of the same shape.
    `timestep`: `sigma * 1000` (the scheduler's timestep, as the pipeline passes it).
    `condition_frames`: latent frames fed clean (t2i / t2v: none, i2v: `(0,)`, v2v: `(0, 1)`).
    `fps`: video frame rate, for upstream's fps-modulated temporal positions (also the actions').

    Action modes (a transformer with `action_gen`), all optional:
    `action_x0` / `action_noisy`: `[T, action_dim]` clean and noised actions (channels past the domain's raw
    width zero), read like the latents: clean steps from `action_x0`, the rest from `action_noisy`.
    `action_condition_steps`: the clean action steps (forward dynamics: all; policy and inverse dynamics: none,
    or the state row 0).
    `domain_id`: the embodiment's row in the domain-aware action projections.
    `action_start_offset`: 1 puts action j on pixel frame j + 1, the frame its transition ends on (diffusers'
    pipeline); 0 puts row 0 on frame 0 (cosmos-framework with a state row first, `use_state`).
    """

    input_ids: Sequence[int]
    x0: torch.Tensor
    noisy: torch.Tensor
    timestep: float | torch.Tensor
    condition_frames: Sequence[int] = ()
    fps: float = 24.0
    action_x0: torch.Tensor | None = None
    action_noisy: torch.Tensor | None = None
    action_condition_steps: Sequence[int] = ()
    domain_id: int = 0
    action_start_offset: int = 1

    @property
    def has_action(self) -> bool:
        return self.action_x0 is not None

    def actions(self) -> torch.Tensor:
        """The transformer's action input `[T, action_dim]`: clean steps from `action_x0`, the rest from
        `action_noisy`."""
        if self.action_x0 is None or self.action_noisy is None:
            raise ValueError("an action sample needs both action_x0 and action_noisy")
        if self.action_x0.shape != self.action_noisy.shape or self.action_x0.ndim != 2:
            raise ValueError(
                f"action_x0 {tuple(self.action_x0.shape)} and action_noisy {tuple(self.action_noisy.shape)} "
                "must both be [T, action_dim]"
            )
        steps = self.clean_action_steps()
        if not steps:
            return self.action_noisy
        tokens = self.action_noisy.clone()
        tokens[steps] = self.action_x0[steps]
        return tokens

    def clean_action_steps(self) -> list[int]:
        steps = 0 if self.action_x0 is None else self.action_x0.shape[0]
        return sorted({int(i) for i in self.action_condition_steps if 0 <= int(i) < steps})

    def noisy_action_steps(self) -> list[int]:
        clean = set(self.clean_action_steps())
        steps = 0 if self.action_x0 is None else self.action_x0.shape[0]
        return [i for i in range(steps) if i not in clean]

    def latents(self) -> torch.Tensor:
        """The transformer's vision input `[1, C, T, H, W]`: clean frames from `x0`, the rest from `noisy`."""
        x0, noisy = _batched(self.x0), _batched(self.noisy)
        if x0.shape != noisy.shape:
            raise ValueError(f"x0 {tuple(x0.shape)} and noisy {tuple(noisy.shape)} differ in shape")
        frames = self.clean_frames()
        if not frames:
            return noisy
        tokens = noisy.clone()
        tokens[:, :, frames] = x0[:, :, frames]
        return tokens

    def clean_frames(self) -> list[int]:
        frames = _batched(self.x0).shape[2]
        return sorted({int(i) for i in self.condition_frames if 0 <= int(i) < frames})

    def noisy_frames(self) -> list[int]:
        """Latent frames the model predicts (the loss is taken on these only)."""
        clean = set(self.clean_frames())
        return [i for i in range(_batched(self.x0).shape[2]) if i not in clean]


@dataclass
class Cosmos3PackedBatch:
    """Transformer keyword arguments for several samples in one sequence, plus their segment lengths.

    Layout: text of sample 0..B-1 (`und_lengths`), then vision of sample 0..B-1 (`gen_lengths`).
    """

    kwargs: dict[str, Any]
    und_lengths: list[int]
    gen_lengths: list[int]
    prompts: list[tuple[int, ...]] = field(default_factory=list)
    # Per sample, what fixes its positions and indexes (`_layout`): `repack` keeps them when only noise changes.
    layouts: list[tuple] = field(default_factory=list)
    noisy_counts: list[tuple[int, int]] = field(default_factory=list)  # noisy (vision, action) tokens


def _batched(latent: torch.Tensor) -> torch.Tensor:
    if latent.ndim == 4:
        return latent.unsqueeze(0)
    if latent.ndim == 5 and latent.shape[0] == 1:
        return latent
    raise ValueError(f"expected a latent [C, T, H, W] or [1, C, T, H, W], got {tuple(latent.shape)}")


def pack_samples(pipeline, samples: Sequence[Cosmos3TrainingSample]) -> Cosmos3PackedBatch:
    """Pack samples into one call of `Cosmos3OmniTransformer.forward` (text first, then vision).

    With one sample this is exactly what `Cosmos3OmniPipeline.__call__` passes the transformer.
    """
    if not samples:
        raise ValueError("pack_samples needs at least one sample")
    transformer = pipeline.transformer
    device, dtype = transformer.device, transformer.dtype
    texts = [pipeline._prepare_text_segment(list(s.input_ids), device=device) for s in samples]
    und_total = sum(t["und_len"] for t in texts)

    visions, latents, actions = [], [], []
    curr = (
        und_total  # the generator tokens of sample i (vision, then actions) follow all text and those before
    )
    for sample, text in zip(samples, texts, strict=True):
        latent = sample.latents().to(device=device, dtype=dtype)
        clean = sample.clean_frames()
        vision = pipeline._prepare_vision_segment(
            input_vision_tokens=latent,
            has_image_condition=bool(clean),
            mrope_offset=text["vision_start_temporal_offset"],
            vision_fps=sample.fps,
            curr=curr,
            device=device,
            condition_frame_indexes=clean,
        )
        curr += vision["num_vision_tokens"]
        visions.append(vision)
        latents.append(latent)
        if sample.has_action:
            action = _action_segment(pipeline, sample, text["vision_start_temporal_offset"], curr, device)
            curr += action["action_len"]
            actions.append(action)
    if actions and len(actions) != len(samples):
        raise ValueError("pack_samples: either every sample has actions or none does")

    timesteps = [
        torch.full((v["num_noisy_vision_tokens"],), float(s.timestep), device=device)
        for s, v in zip(samples, visions, strict=True)
    ]
    mrope = [t["text_mrope_ids"] for t in texts]
    for index, vision in enumerate(visions):
        mrope += [vision["vision_mrope_ids"]] + ([actions[index]["action_mrope_ids"]] if actions else [])
    kwargs = {
        "input_ids": torch.cat([t["input_ids"] for t in texts]),
        "text_indexes": torch.arange(und_total, device=device),
        "position_ids": torch.cat(mrope, dim=1),
        "und_len": und_total,
        "sequence_length": curr,
        "vision_tokens": latents,
        "vision_token_shapes": [shape for v in visions for shape in v["vision_token_shapes"]],
        "vision_sequence_indexes": torch.cat([v["vision_sequence_indexes"] for v in visions]),
        "vision_mse_loss_indexes": torch.cat([v["vision_mse_loss_indexes"] for v in visions]),
        "vision_timesteps": torch.cat(timesteps),
        "vision_noisy_frame_indexes": [idx for v in visions for idx in v["vision_noisy_frame_indexes"]],
    }
    if actions:
        kwargs |= {
            "action_tokens": [s.actions().to(device=device, dtype=dtype) for s in samples],
            "action_token_shapes": [shape for a in actions for shape in a["action_token_shapes"]],
            "action_sequence_indexes": torch.cat([a["action_sequence_indexes"] for a in actions]),
            "action_mse_loss_indexes": torch.cat([a["action_mse_loss_indexes"] for a in actions]),
            "action_timesteps": torch.cat(
                [
                    torch.full((a["num_noisy_action_tokens"],), float(s.timestep), device=device)
                    for s, a in zip(samples, actions, strict=True)
                ]
            ),
            "action_noisy_frame_indexes": [idx for a in actions for idx in a["action_noisy_frame_indexes"]],
            "action_domain_ids": [
                torch.tensor([s.domain_id], dtype=torch.long, device=device) for s in samples
            ],
        }
    gen_lengths = [
        v["num_vision_tokens"] + (actions[i]["action_len"] if actions else 0) for i, v in enumerate(visions)
    ]
    return Cosmos3PackedBatch(
        kwargs=kwargs,
        und_lengths=[t["und_len"] for t in texts],
        gen_lengths=gen_lengths,
        prompts=[tuple(int(i) for i in s.input_ids) for s in samples],
        layouts=[_layout(s) for s in samples],
        noisy_counts=[
            (v["num_noisy_vision_tokens"], actions[i]["num_noisy_action_tokens"] if actions else 0)
            for i, v in enumerate(visions)
        ],
    )


def _layout(sample: Cosmos3TrainingSample) -> tuple:
    """Everything of a sample that its packed positions, indexes and lengths depend on (not its values)."""
    action = None
    if sample.has_action:
        action = (tuple(sample.action_x0.shape), tuple(sample.clean_action_steps()), sample.domain_id,
                  sample.action_start_offset)  # fmt: skip
    return (tuple(int(i) for i in sample.input_ids), tuple(_batched(sample.x0).shape),
            tuple(sample.clean_frames()), float(sample.fps), action)  # fmt: skip


def repack(
    pipeline, packed: Cosmos3PackedBatch, samples: Sequence[Cosmos3TrainingSample]
) -> Cosmos3PackedBatch:
    """`pack_samples(pipeline, samples)` for samples laid out as `packed`'s (the same prompts, shapes, clean frames
    and steps: a sampler's next step, or the same inputs for another model), reusing its positions and indexes:
    only the tokens and timesteps are new."""
    layouts = [_layout(s) for s in samples]
    if layouts != packed.layouts:
        raise ValueError("repack: the samples are not laid out as the packed batch's; pack them anew")
    transformer = pipeline.transformer
    device, dtype = transformer.device, transformer.dtype
    kwargs = dict(packed.kwargs)
    kwargs["vision_tokens"] = [s.latents().to(device=device, dtype=dtype) for s in samples]
    kwargs["vision_timesteps"] = torch.cat(
        [
            torch.full((n,), float(s.timestep), device=device)
            for s, (n, _) in zip(samples, packed.noisy_counts, strict=True)
        ]
    )
    if "action_tokens" in kwargs:
        kwargs["action_tokens"] = [s.actions().to(device=device, dtype=dtype) for s in samples]
        kwargs["action_timesteps"] = torch.cat(
            [
                torch.full((n,), float(s.timestep), device=device)
                for s, (_, n) in zip(samples, packed.noisy_counts, strict=True)
            ]
        )
    return Cosmos3PackedBatch(kwargs, packed.und_lengths, packed.gen_lengths, packed.prompts, packed.layouts,
                              packed.noisy_counts)  # fmt: skip


def _action_segment(
    pipeline, sample: Cosmos3TrainingSample, mrope_offset, curr: int, device
) -> dict[str, Any]:
    """Upstream's action segment; with `action_start_offset` 0 (a state row first) its positions start one frame
    earlier, computed by the same mRoPE helper."""
    tokens = sample.actions()
    segment = pipeline._prepare_action_segment(
        input_action_tokens=tokens,
        condition_frame_indexes=sample.clean_action_steps(),
        mrope_offset=mrope_offset,
        action_fps=sample.fps,
        curr=curr,
        device=device,
    )
    if sample.action_start_offset == 1:
        return segment
    if sample.action_start_offset != 0:
        raise ValueError(f"action_start_offset must be 0 or 1, got {sample.action_start_offset}")
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import get_3d_mrope_ids_vae_tokens

    config = pipeline.transformer.config
    mrope_ids, _ = get_3d_mrope_ids_vae_tokens(
        grid_t=tokens.shape[0],
        grid_h=1,
        grid_w=1,
        temporal_offset=mrope_offset,
        reset_spatial_indices=config.unified_3d_mrope_reset_spatial_ids,
        fps=sample.fps if config.enable_fps_modulation else None,
        base_fps=float(config.base_fps),
        temporal_compression_factor=1,
        base_temporal_compression_factor=pipeline.vae_scale_factor_temporal,
        start_frame_offset=0,
    )
    return {**segment, "action_mrope_ids": mrope_ids.to(device)}


def per_sample_outputs(transformer, pipeline, samples: Sequence[Cosmos3TrainingSample]) -> list[Any]:
    """The reference: upstream's forward with its own processors, one sample per call (its output objects)."""
    return [transformer(**pack_samples(pipeline, [s]).kwargs) for s in samples]


def per_sample_forward(transformer, pipeline, samples: Sequence[Cosmos3TrainingSample]) -> list[torch.Tensor]:
    """The reference's vision predictions, one `[1, C, T, H, W]` per sample."""
    return [output.sample[0] for output in per_sample_outputs(transformer, pipeline, samples)]


# ---------------------------------------------------------------------------------------------------------
# Reasoner key/value cache
# ---------------------------------------------------------------------------------------------------------

# Parameters the AR keys/values depend on. With any of them trainable the cache would drop their gradient.
_REASONER_PARAM = re.compile(
    r"(^|\.)embed_tokens\.|\.self_attn\.(to_q|to_k|to_v|to_out|norm_q|norm_k)\."
    r"|\.mlp\.|\.input_layernorm\.|\.post_attention_layernorm\."
)


class Cosmos3ReasonerCache:
    """Per-prompt reasoner keys/values of every layer, kept across calls (the reasoner is frozen, and AR
    tokens never attend to DM tokens, so they do not depend on the noise, timestep or latents).

    Stores keys after `norm_k`, before RoPE and before Edge's `k_norm_und_for_gen` (a generator weight, so
    its gradient still flows), with the text RoPE tables. Entries are detached; keep `max_prompts` in mind
    for memory (layers x text tokens x kv heads x head_dim x 2 per prompt).
    """

    def __init__(self, max_prompts: int | None = None):
        self.max_prompts = max_prompts
        # prompt -> (cos, sin, [(k_und, v_und) per layer])
        self._entries: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, list]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, prompt: tuple[int, ...]) -> bool:
        return prompt in self._entries

    def clear(self) -> None:
        self._entries.clear()

    def _store(self, prompt, layer: int, num_layers: int, cos, sin, k, v) -> None:
        if prompt not in self._entries:
            if self.max_prompts is not None and len(self._entries) >= self.max_prompts:
                self._entries.pop(next(iter(self._entries)))  # oldest first
            self._entries[prompt] = (cos.detach(), sin.detach(), [None] * num_layers)
        self._entries[prompt][2][layer] = (k.detach(), v.detach())

    def _get(self, prompt, layer: int):
        cos, sin, layers = self._entries[prompt]
        return cos, sin, layers[layer]


# ---------------------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------------------


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos.unsqueeze(1) + _rotate_half(x) * sin.unsqueeze(1)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    """[L, H, D] -> [1, H, L, D], the layout SDPA takes."""
    return x.transpose(0, 1).unsqueeze(0)


def _starts(lengths: Sequence[int]) -> list[int]:
    starts, total = [], 0
    for n in lengths:
        starts.append(total)
        total += n
    return starts


class Cosmos3SegmentAttnProcessor(Cosmos3AttnProcessor):
    """`Cosmos3AttnProcessor` over several packed samples: AR queries attend causally within their own
    sample's text, DM queries to their own sample's AR and DM keys.

    `attention="segments"` runs one SDPA per sample and pathway (no wasted work); `"mask"` runs one SDPA
    per pathway with a block-diagonal boolean mask. With `cache` in replay mode the AR stream is empty and
    the AR keys/values come from the cache; in record mode they are written to it.
    """

    def __init__(
        self,
        und_lengths: Sequence[int],
        gen_lengths: Sequence[int],
        attention: Attention = "segments",
        cache: Cosmos3ReasonerCache | None = None,
        prompts: Sequence[tuple[int, ...]] = (),
        layer_index: dict[torch.nn.Module, int] | None = None,
        replay: bool = False,
    ):
        if attention not in ("segments", "mask"):
            raise ValueError(f"attention must be 'segments' or 'mask', got {attention!r}")
        self.und_lengths = list(und_lengths)
        self.gen_lengths = list(gen_lengths)
        self.attention = attention
        self.cache = cache
        self.prompts = list(prompts)
        self.layer_index = layer_index or {}
        self.replay = replay
        self._masks: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, attn, und_seq, gen_seq, rotary_emb):
        heads, kv_heads, dim = attn.num_attention_heads, attn.num_key_value_heads, attn.head_dim
        cos_und, sin_und, cos_gen, sin_gen = rotary_emb
        q_gen = attn.norm_added_q(attn.add_q_proj(gen_seq).view(-1, heads, dim))
        k_gen = attn.norm_added_k(attn.add_k_proj(gen_seq).view(-1, kv_heads, dim))
        v_gen = attn.add_v_proj(gen_seq).view(-1, kv_heads, dim)
        q_gen, k_gen = _rope(q_gen, cos_gen, sin_gen), _rope(k_gen, cos_gen, sin_gen)

        if self.replay:
            k_und, v_und, cos_und, sin_und = self._replay(attn)
            q_und = None
        else:
            q_und = attn.norm_q(attn.to_q(und_seq).view(-1, heads, dim))
            k_und = attn.norm_k(attn.to_k(und_seq).view(-1, kv_heads, dim))
            v_und = attn.to_v(und_seq).view(-1, kv_heads, dim)
            if self.cache is not None:
                self._record(attn, k_und, v_und, cos_und, sin_und)
        k_und_for_gen = attn.k_norm_und_for_gen(k_und) if attn.k_norm_und_for_gen is not None else k_und
        k_und_for_gen = _rope(k_und_for_gen, cos_und, sin_und)

        gen_out = self._generator_attention(q_gen, k_und_for_gen, v_und, k_gen, v_gen)
        gen_out = attn.to_add_out(gen_out.flatten(-2))
        if q_und is None:
            return und_seq, gen_out  # empty AR stream: nothing to update
        q_und, k_und = _rope(q_und, cos_und, sin_und), _rope(k_und, cos_und, sin_und)
        und_out = attn.to_out(self._reasoner_attention(q_und, k_und, v_und).flatten(-2))
        return und_out, gen_out

    # AR: causal within each sample's text.
    def _reasoner_attention(self, q, k, v) -> torch.Tensor:
        q, k, v = _heads_first(q), _heads_first(k), _heads_first(v)
        if self.attention == "mask":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self._mask()[0], enable_gqa=True)
        else:
            out = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        q[:, :, s : s + n],
                        k[:, :, s : s + n],
                        v[:, :, s : s + n],
                        is_causal=True,
                        enable_gqa=True,
                    )
                    for s, n in zip(_starts(self.und_lengths), self.und_lengths, strict=True)
                ],
                dim=2,
            )
        return out[0].transpose(0, 1)

    # DM: full over the sample's own AR keys then DM keys (upstream's key order).
    def _generator_attention(self, q, k_und, v_und, k_gen, v_gen) -> torch.Tensor:
        q = _heads_first(q)
        if self.attention == "mask":
            k = _heads_first(torch.cat([k_und, k_gen]))
            v = _heads_first(torch.cat([v_und, v_gen]))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self._mask()[1], enable_gqa=True)
            return out[0].transpose(0, 1)
        k_und, v_und, k_gen, v_gen = (_heads_first(x) for x in (k_und, v_und, k_gen, v_gen))
        pieces = []
        for su, nu, sg, ng in zip(
            _starts(self.und_lengths),
            self.und_lengths,
            _starts(self.gen_lengths),
            self.gen_lengths,
            strict=True,
        ):
            k = torch.cat([k_und[:, :, su : su + nu], k_gen[:, :, sg : sg + ng]], dim=2)
            v = torch.cat([v_und[:, :, su : su + nu], v_gen[:, :, sg : sg + ng]], dim=2)
            pieces.append(F.scaled_dot_product_attention(q[:, :, sg : sg + ng], k, v, enable_gqa=True))
        return torch.cat(pieces, dim=2)[0].transpose(0, 1)

    def _mask(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Boolean masks (True = attend): AR [U, U] causal block-diagonal, DM [G, U + G] block-diagonal."""
        if self._masks is None:
            idx = torch.arange(len(self.und_lengths))
            und_ids = idx.repeat_interleave(torch.tensor(self.und_lengths))
            gen_ids = idx.repeat_interleave(torch.tensor(self.gen_lengths))
            pos = torch.arange(len(und_ids))
            ar = (und_ids[:, None] == und_ids[None, :]) & (pos[None, :] <= pos[:, None])
            dm = gen_ids[:, None] == torch.cat([und_ids, gen_ids])[None, :]
            self._masks = (ar, dm)
        return self._masks

    def _record(self, attn, k_und, v_und, cos_und, sin_und) -> None:
        layer, layers = self.layer_index[attn], len(self.layer_index)
        for prompt, s, n in zip(self.prompts, _starts(self.und_lengths), self.und_lengths, strict=True):
            self.cache._store(
                prompt,
                layer,
                layers,
                cos_und[s : s + n],
                sin_und[s : s + n],
                k_und[s : s + n],
                v_und[s : s + n],
            )

    def _replay(self, attn):
        layer = self.layer_index[attn]
        entries = [self.cache._get(prompt, layer) for prompt in self.prompts]
        cos = torch.cat([e[0] for e in entries])
        sin = torch.cat([e[1] for e in entries])
        k = torch.cat([e[2][0] for e in entries])
        v = torch.cat([e[2][1] for e in entries])
        return k, v, cos, sin


# ---------------------------------------------------------------------------------------------------------
# The batched call
# ---------------------------------------------------------------------------------------------------------


def _with_processor(layer_call, processor):
    """Run a decoder layer with `processor` installed, also when checkpointing recomputes it in backward
    (after `segment_attention` has put the original processors back)."""
    attn = layer_call.__self__.self_attn

    def call(*args):
        previous = attn.processor
        attn.processor = processor
        try:
            return layer_call(*args)
        finally:
            attn.processor = previous

    return call


@contextmanager
def segment_attention(transformer, processor: Cosmos3SegmentAttnProcessor) -> Iterator[None]:
    """Install `processor` on every attention layer for the duration; restore the originals after."""
    originals = transformer.attn_processors
    transformer.set_attn_processor(processor)
    checkpoint = transformer.__dict__.get("_gradient_checkpointing_func")
    if checkpoint is not None:
        transformer._gradient_checkpointing_func = lambda fn, *args: checkpoint(
            _with_processor(fn, processor), *args
        )
    try:
        yield
    finally:
        transformer.set_attn_processor(originals)
        if checkpoint is not None:
            transformer._gradient_checkpointing_func = checkpoint


def _check_reasoner_frozen(transformer) -> None:
    if not torch.is_grad_enabled():
        return
    trainable = [
        n for n, p in transformer.named_parameters() if p.requires_grad and _REASONER_PARAM.search(n)
    ]
    if trainable:
        raise ValueError(
            "the reasoner cache needs a frozen reasoner (its keys/values would lose their gradient), but "
            f"{len(trainable)} reasoner parameters are trainable, e.g. {trainable[0]}"
        )


def _generator_only(packed: Cosmos3PackedBatch) -> dict[str, Any]:
    """The same call without the text tokens (their keys/values come from the cache)."""
    kw, und = dict(packed.kwargs), packed.kwargs["und_len"]
    device = kw["input_ids"].device
    kw["input_ids"] = kw["input_ids"][:0]
    kw["text_indexes"] = torch.zeros(0, dtype=torch.long, device=device)
    kw["position_ids"] = kw["position_ids"][:, und:]
    kw["und_len"] = 0
    kw["sequence_length"] -= und
    for key in (
        "vision_sequence_indexes",
        "vision_mse_loss_indexes",
        "action_sequence_indexes",
        "action_mse_loss_indexes",
    ):
        if key in kw:
            kw[key] = kw[key] - und
    return kw


def _unwrap(transformer):
    """The `Cosmos3OmniTransformer` inside a DDP / DeepSpeed wrapper (those keep it as `.module`)."""
    while not hasattr(transformer, "layers") and hasattr(transformer, "module"):
        transformer = transformer.module
    return transformer


def batched_forward(
    transformer,
    packed: Cosmos3PackedBatch,
    attention: Attention = "segments",
    cache: Cosmos3ReasonerCache | None = None,
) -> list[torch.Tensor]:
    """The vision velocities of `batched_outputs`: one `[1, C, T, H, W]` per sample."""
    return batched_outputs(transformer, packed, attention, cache).sample


def batched_outputs(
    transformer,
    packed: Cosmos3PackedBatch,
    attention: Attention = "segments",
    cache: Cosmos3ReasonerCache | None = None,
):
    """Velocity predictions for every packed sample in one call of upstream's forward, as upstream's
    `Cosmos3OmniTransformerOutput` (`sample`: vision; `action`: one `[T, action_dim]` per action sample).

    `transformer` may be wrapped by DDP / DeepSpeed: the attention processors are installed on the module
    inside, and the wrapper's forward is called.
    Upstream's convention: zeros at the clean frames and action steps.
    With `cache`, prompts seen before skip the reasoner (their AR keys/values are replayed); a batch
    with any unseen prompt runs the full sequence and records them.
    """
    module = _unwrap(transformer)
    layer_index = {layer.self_attn: i for i, layer in enumerate(module.layers)}
    replay = cache is not None and all(p in cache for p in packed.prompts)
    if cache is not None:
        _check_reasoner_frozen(transformer)
    processor = Cosmos3SegmentAttnProcessor(
        packed.und_lengths,
        packed.gen_lengths,
        attention=attention,
        cache=cache,
        prompts=packed.prompts,
        layer_index=layer_index,
        replay=replay,
    )
    kwargs = _generator_only(packed) if replay else packed.kwargs
    # Processors go on the inner module; the call goes through the wrapper, so DDP still syncs gradients.
    with segment_attention(module, processor):
        return transformer(**kwargs)
