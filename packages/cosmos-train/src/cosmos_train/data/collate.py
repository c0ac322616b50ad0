"""Batch collation on TRL's collators: lazy media decoding, assistant-only labels, media-safe truncation.

Labels come from the chat template's `{% generation %}` markers (`return_assistant_tokens_mask=True`), so the
loss covers exactly the assistant turns including their end-of-turn token. A template without markers is
swapped for TRL's training variant (`get_training_chat_template`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from trl.chat_template_utils import get_training_chat_template, has_generation_markers
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling, DataCollatorForVisionLanguageModeling

from cosmos_train.data.loading import MEDIA, DataError, to_text_messages
from cosmos_train.data.media import VideoClip, load_image, load_video

logger = logging.getLogger("cosmos_train.data")

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


def build_collator(processing_class, data, max_length: int | None):
    """The `data_collator` for HF Trainer: `collate(examples) -> dict[str, torch.Tensor]`.

    `processing_class` is a multimodal processor (Qwen2.5-VL / Qwen3-VL / Cosmos3) or a tokenizer (text-only
    model). Examples are rows of `load_conversations`. Sequences longer than `max_length` are cut unless the
    cut would drop media tokens, which is a `DataError` naming the sample.
    """
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

    template = _training_template(processing_class)
    if isinstance(processing_class, ProcessorMixin):
        if data.packing:
            raise DataError("data.packing: padding-free packing is only supported for text-only models")
        video_processor = getattr(processing_class, "video_processor", None)
        return VisionLanguageCollator(
            processor=_VideoAwareProcessor(processing_class),
            assistant_only_loss=True,
            chat_template=template,
            truncate_to=max_length,
            fps=data.fps,
            max_frames=data.max_frames,
            # The Qwen-VL video processors reject clips shorter than one temporal patch.
            min_frames=getattr(video_processor, "temporal_patch_size", None) or 1,
            media_token_ids=_media_token_ids(processing_class),
        )
    if isinstance(processing_class, PreTrainedTokenizerBase):
        pad_token_id = processing_class.pad_token_id
        if pad_token_id is None:
            pad_token_id = processing_class.eos_token_id
        return TextCollator(
            pad_token_id=pad_token_id,
            padding_free=data.packing,
            tokenizer=processing_class,
            chat_template=template,
            truncate_to=max_length,
        )
    raise TypeError(f"expected a processor or a tokenizer, got {type(processing_class).__name__}")


def _training_template(processing_class) -> str:
    """The template to render with: the model's own if it has generation markers, else TRL's training variant."""
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    owner, template = processing_class, processing_class.chat_template
    if not template and tokenizer is not processing_class:
        owner, template = tokenizer, tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if not template:
        raise DataError(f"{type(processing_class).__name__} has no chat template")
    if not has_generation_markers(template):
        try:
            template = get_training_chat_template(owner) or template
        except ValueError:
            raise DataError(
                "the chat template has no {% generation %} markers and TRL knows no training variant of it; "
                "add the markers around assistant turns so the loss can be limited to them"
            ) from None
        logger.info("using TRL's training variant of the chat template (adds {%% generation %%} markers)")
    _check_loss_span(tokenizer, template, typed=tokenizer is not processing_class)
    return template


def _check_loss_span(tokenizer, template: str, typed: bool) -> None:
    """Render a probe turn: the generation span must mark tokens, and should end with the end-of-turn token."""
    content = (lambda text: [{"type": "text", "text": text}]) if typed else (lambda text: text)
    probe = [{"role": "user", "content": content("hi")}, {"role": "assistant", "content": content("ok")}]
    encoded = tokenizer.apply_chat_template(
        probe, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(encoded["input_ids"]), list(encoded["assistant_masks"])
    marked = [index for index, keep in enumerate(mask) if keep]
    if not marked:
        raise DataError("the chat template's {% generation %} markers enclose no assistant tokens")
    after = marked[-1] + 1
    if after < len(ids) and ids[after] in tokenizer.all_special_ids:
        # The special token that closes the turn is outside the loss: the model would never learn to stop.
        logger.warning(
            "the chat template's {%% generation %%} span leaves out the end-of-turn token %s",
            tokenizer.convert_ids_to_tokens(ids[after]),
        )


def _media_token_ids(processor) -> torch.Tensor:
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


class _VideoAwareProcessor:
    """A processor whose `apply_chat_template` passes decoded clips with their timing.

    TRL's collator calls `apply_chat_template` with fixed arguments; pre-decoded frames need `video_metadata`
    (native fps and sampled frame indices, from which Qwen3-VL writes frame timestamps and Qwen2.5-VL its
    `second_per_grid_ts`) and `do_sample_frames=False` (the frames are already sampled), so this adds them.
    """

    def __init__(self, processor):
        self._processor = processor

    def __getattr__(self, name: str):
        if name == "_processor" or name.startswith("__"):  # keeps copy/pickle from recursing
            raise AttributeError(name)
        return getattr(self._processor, name)

    def apply_chat_template(self, conversation, processor_kwargs: dict | None = None, **kwargs):
        batched = bool(conversation) and isinstance(conversation[0], list)
        conversations = conversation if batched else [conversation]
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
        if metadata:
            processor_kwargs = {
                **(processor_kwargs or {}),
                "video_metadata": metadata,
                "do_sample_frames": False,
            }
        return self._processor.apply_chat_template(
            converted if batched else converted[0], processor_kwargs=processor_kwargs, **kwargs
        )


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
        batch = super().torch_call(prepared)
        return _truncate(batch, self.truncate_to, sources, self.media_token_ids)

    def _with_media(self, example: dict[str, Any], source: str) -> list[dict[str, Any]]:
        """Messages with each placeholder carrying its decoded image (PIL) or clip (`VideoClip`)."""
        pending = {"image": list(example.get("images") or []), "video": list(example.get("videos") or [])}
        messages = []
        for message in example["messages"]:
            content = message["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            parts = []
            for part in content:
                kind = part["type"]
                if kind in MEDIA:
                    if not pending[kind]:
                        raise DataError(f"{source}: more {kind} placeholders than {kind}s")
                    parts.append({"type": kind, kind: self._decode(kind, pending[kind].pop(0), source)})
                else:
                    parts.append({"type": "text", "text": part["text"]})
            messages.append({"role": message["role"], "content": parts})
        for kind, left in pending.items():
            if left:
                raise DataError(f"{source}: {len(left)} {kind}(s) without a placeholder")
        return messages

    def _decode(self, kind: str, item: Any, source: str):
        try:
            if kind == "image":
                return load_image(item)
            return load_video(item, self.fps, self.max_frames, self.min_frames)
        except Exception as error:  # a file that changed since loading: name the sample, in one line
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            name = item if isinstance(item, str) else "(embedded)"
            raise DataError(f"{source}: cannot decode {kind} {name}: {reason}") from None


@dataclass
class TextCollator(DataCollatorForLanguageModeling):
    """TRL's language-modeling collator fed by the chat template, with assistant-only labels."""

    tokenizer: Any = None
    chat_template: str | None = None
    truncate_to: int | None = None

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        tokenized = []
        for index, example in enumerate(examples):
            source = example.get("source", f"batch[{index}]")
            if example.get("images") or example.get("videos"):
                raise DataError(f"{source}: has images or videos but the model is text-only")
            encoded = self.tokenizer.apply_chat_template(
                to_text_messages(example["messages"], source),
                chat_template=self.chat_template,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
            input_ids = list(encoded["input_ids"])[: self.truncate_to]
            masks = list(encoded["assistant_masks"])[: self.truncate_to]
            labels = [token if keep else -100 for token, keep in zip(input_ids, masks, strict=True)]
            tokenized.append({"input_ids": input_ids, "labels": labels})
        return super().torch_call(tokenized)
