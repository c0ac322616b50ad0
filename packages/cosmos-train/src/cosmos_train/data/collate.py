"""VLM batches on TRL's vision-language collator: lazy media decoding, assistant-only labels, media-safe truncation.

Labels cover the assistant turns as `templates.loss_plan` decides once, when the collator is built: from
the template's `{% generation %}` markers, or for a template without them from turn-by-turn rendering,
mapped to tokens after media-token expansion. With `[data] train_on = "all"` every non-pad token is a
target. Text LMs do not come here: `text.tokenize_conversations` tokenizes them for TRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

from cosmos_train.data.conversations import MEDIA
from cosmos_train.data.media import VideoClip, load_image, load_video
from cosmos_train.data.templates import (
    RENDER_FAILURES,
    LossPlan,
    assistant_spans,
    loss_plan,
    renderer,
    token_mask,
    trim_trailing_whitespace,
    why_unusable,
)
from cosmos_train.errors import DataError, first_line

# Per-token tensors that truncation must cut together.
_SEQUENCE_KEYS = (
    "input_ids",
    "attention_mask",
    "labels",
    "mm_token_type_ids",
    "token_type_ids",
    "position_ids",
    "assistant_masks",
)


def build_collator(processor, data, max_length: int | None) -> VisionLanguageCollator:
    """The `data_collator` for a VLM: `collate(examples) -> dict[str, torch.Tensor]`.

    `processor` is a multimodal processor (Qwen2.5-VL / Qwen3-VL / Cosmos3); examples are rows of
    `load_conversations`. The chat template is checked here, once (`loss_plan`). Sequences longer than
    `max_length` are cut unless the cut would drop media tokens, which is a `DataError` naming the sample.
    """
    from transformers import ProcessorMixin

    if not isinstance(processor, ProcessorMixin):
        raise TypeError(
            f"expected a multimodal processor, got {type(processor).__name__} "
            "(text LMs are tokenized by cosmos_train.data.tokenize_conversations)"
        )
    if data.packing:
        raise DataError("data.packing: padding-free packing is only supported for text-only models")
    plan = loss_plan(processor, getattr(data, "train_on", "assistant"))
    video_processor = getattr(processor, "video_processor", None)
    return VisionLanguageCollator(
        processor=_ChatProcessor(processor, plan),
        assistant_only_loss=plan.mode != "all",
        chat_template=plan.template,
        truncate_to=max_length,
        fps=data.fps,
        max_frames=data.max_frames,
        # The Qwen-VL video processors reject clips shorter than one temporal patch.
        min_frames=getattr(video_processor, "temporal_patch_size", None) or 1,
        media_token_ids=media_token_ids(processor),
    )


def media_token_ids(processor) -> torch.Tensor:
    tokenizer = processor.tokenizer
    ids = [getattr(processor, "image_token_id", None), getattr(processor, "video_token_id", None)]
    for name in ("vision_start_token", "vision_end_token"):
        token = getattr(processor, name, None)
        if token is not None:
            ids.append(tokenizer.convert_tokens_to_ids(token))
    return torch.tensor(sorted({i for i in ids if isinstance(i, int) and i != tokenizer.unk_token_id}))


def _truncate(batch: dict[str, Any], limit: int | None, sources: list[str], media_ids: torch.Tensor | None):
    input_ids = batch["input_ids"]
    if limit is None or input_ids.shape[1] <= limit:
        return batch
    cut = batch["attention_mask"][:, limit:].bool()
    if media_ids is not None and media_ids.numel():
        cut_media = torch.isin(input_ids[:, limit:], media_ids) & cut
        if cut_media.any():
            row = int(cut_media.any(dim=1).nonzero()[0])
            length = int(batch["attention_mask"][row].sum())
            raise DataError(
                f"{sources[row]}: {length} tokens exceed max_length={limit} and truncating would cut media tokens"
            )
    for key in _SEQUENCE_KEYS:
        if key in batch and isinstance(batch[key], torch.Tensor) and batch[key].dim() >= 2:
            batch[key] = batch[key][:, :limit]
    return batch


class _RowFailure(Exception):
    """A conversation of the batch (by row) that the template refuses or cannot split into turns."""

    def __init__(self, row: int, reason: str):
        super().__init__(reason)
        self.row = row


class _ChatProcessor:
    """The processor as TRL's collator calls it, plus clip timing and our assistant masks.

    TRL's collator calls `apply_chat_template` with fixed arguments. Pre-decoded frames need `video_metadata`
    (native fps and sampled frame indices, from which Qwen3-VL writes frame timestamps and Qwen2.5-VL its
    `second_per_grid_ts`) and `do_sample_frames=False` (the frames are already sampled), so this adds them.
    When TRL asks for assistant masks, they follow the `LossPlan`: the template's markers (whitespace after
    the end-of-turn token dropped), or spans from turn-by-turn rendering, moved past the expanded media
    tokens with the processor's `offset_mapping` and `text_replacement_offsets`.
    """

    def __init__(self, processor, plan: LossPlan | None):
        self._processor = processor
        self._plan = plan

    def __getattr__(self, name: str):
        if name in ("_processor", "_plan") or name.startswith("__"):  # keeps copy/pickle from recursing
            raise AttributeError(name)
        return getattr(self._processor, name)

    def apply_chat_template(
        self, conversation, processor_kwargs: dict | None = None, return_assistant_tokens_mask=False, **kwargs
    ):
        batched = bool(conversation) and isinstance(conversation[0], list)
        conversations, metadata = _with_frames(conversation if batched else [conversation])
        # The 3-axis M-RoPE models need the token types; Qwen's processors return them by default, Cosmos3
        # Edge's does not (its model then refuses image inputs).
        processor_kwargs = {"return_mm_token_type_ids": True} | dict(processor_kwargs or {})
        if metadata:
            processor_kwargs |= {"video_metadata": metadata, "do_sample_frames": False}
        turns = return_assistant_tokens_mask and self._plan.mode == "turns"
        rendered = self._render_rows(conversations, turns) if return_assistant_tokens_mask else None
        if turns:
            processor_kwargs |= {"return_offsets_mapping": True, "return_text_replacement_offsets": True}
        output = self._processor.apply_chat_template(
            conversations if batched else conversations[0],
            processor_kwargs=processor_kwargs,
            return_assistant_tokens_mask=return_assistant_tokens_mask and not turns,
            **kwargs,
        )
        if not return_assistant_tokens_mask:
            return output
        ids = output["input_ids"].tolist()
        if turns:
            offsets = output.pop("offset_mapping").tolist()
            replacements = output.pop("text_replacement_offsets", None) or [[]] * len(ids)
            masks = [token_mask(*row) for row in zip(offsets, rendered, replacements, strict=True)]
        else:
            tokenizer = self._processor.tokenizer
            masks = [
                trim_trailing_whitespace(row, mask, tokenizer)
                for row, mask in zip(ids, output["assistant_masks"].tolist(), strict=True)
            ]
        output["assistant_masks"] = torch.tensor(masks, dtype=torch.long)
        return output

    def _render_rows(self, conversations: list[list[dict[str, Any]]], turns: bool) -> list:
        """Each conversation rendered alone (its assistant spans for `turns`): a failure names its row."""
        render = renderer(self._processor, self._plan.template)
        rendered = []
        for row, messages in enumerate(conversations):
            try:
                rendered.append(assistant_spans(render, messages)[1] if turns else render(messages, False))
            except RENDER_FAILURES as error:
                raise _RowFailure(row, why_unusable(error)) from None
        return rendered


def encode_prompts(processor, conversations: list[list[dict[str, Any]]]):
    """Chat prompts whose media are decoded (`messages_with_media`) as the processor's padded tensors, each
    ending with the generation prompt: the same clip timing and token types as SFT batches."""
    return _ChatProcessor(processor, None).apply_chat_template(
        conversations,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        processor_kwargs={"padding": True, "return_tensors": "pt"},
    )


def _with_frames(conversations: list[list[dict[str, Any]]]) -> tuple[list[list[dict[str, Any]]], list[dict]]:
    """The conversations with each `VideoClip` replaced by its frames, and the clips' metadata in order."""
    metadata = []
    converted = []
    for messages in conversations:
        new_messages = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, list):
                new_content = []
                for part in content:
                    if part.get("type") == "video" and isinstance(part.get("video"), VideoClip):
                        clip = part["video"]
                        metadata.append(clip.metadata())
                        part = {**part, "video": clip.frames}
                    new_content.append(part)
                message = {**message, "content": new_content}
            new_messages.append(message)
        converted.append(new_messages)
    return converted, metadata


@dataclass
class VisionLanguageCollator(DataCollatorForVisionLanguageModeling):
    """TRL's VLM collator plus lazy media decoding and truncation that never cuts media tokens."""

    truncate_to: int | None = None
    fps: float = 2.0
    max_frames: int = 16
    min_frames: int = 1
    media_token_ids: torch.Tensor | None = None

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        sources = [example.get("source", f"batch[{i}]") for i, example in enumerate(examples)]
        prepared = [
            {"messages": self._with_media(example, source), "images": []}
            for example, source in zip(examples, sources, strict=True)
        ]
        try:
            batch = super().torch_call(prepared)
        except _RowFailure as failure:
            raise DataError(f"{sources[failure.row]}: {failure}") from None
        return _truncate(batch, self.truncate_to, sources, self.media_token_ids)

    def _with_media(self, example: dict[str, Any], source: str) -> list[dict[str, Any]]:
        return messages_with_media(
            example["messages"],
            example.get("images"),
            example.get("videos"),
            source,
            fps=self.fps,
            max_frames=self.max_frames,
            min_frames=self.min_frames,
        )


def messages_with_media(
    messages: list[dict[str, Any]],
    images: list | None,
    videos: list | None,
    source: str,
    *,
    fps: float,
    max_frames: int,
    min_frames: int = 1,
) -> list[dict[str, Any]]:
    """Messages with each placeholder carrying its decoded image (PIL) or clip (`VideoClip`), in order."""
    pending = {"image": list(images or []), "video": list(videos or [])}
    decoded = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts = []
        for part in content:
            kind = part["type"]
            if kind in MEDIA:
                if not pending[kind]:
                    raise DataError(f"{source}: more {kind} placeholders than {kind}s")
                item = pending[kind].pop(0)
                parts.append({"type": kind, kind: _decode(kind, item, source, fps, max_frames, min_frames)})
            else:
                parts.append({"type": "text", "text": part["text"]})
        decoded.append({"role": message["role"], "content": parts})
    for kind, left in pending.items():
        if left:
            raise DataError(f"{source}: {len(left)} {kind}(s) without a placeholder")
    return decoded


def _decode(kind: str, item: Any, source: str, fps: float, max_frames: int, min_frames: int):
    try:
        if kind == "image":
            return load_image(item)
        return load_video(item, fps, max_frames, min_frames)
    except Exception as error:  # a file that changed since loading: name the sample, in one line
        name = item if isinstance(item, str) else "(embedded)"
        raise DataError(f"{source}: cannot decode {kind} {name}: {first_line(error)}") from None
