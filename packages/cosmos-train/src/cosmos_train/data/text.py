"""Text-LM conversations tokenized for TRL's `SFTTrainer`, with the assistant masks of `templates.loss_plan`.

TRL takes the result as an already tokenized dataset: it builds `labels` from `assistant_masks`, truncates
to `max_length` and packs. Run it with `assistant_only_loss=False`, so it does not swap the chat template.
"""

from __future__ import annotations

import logging

from cosmos_train.data.conversations import to_text_messages
from cosmos_train.data.templates import (
    RENDER_FAILURES,
    assistant_spans,
    loss_plan,
    renderer,
    token_mask,
    trim_trailing_whitespace,
    why_unusable,
)
from cosmos_train.errors import DataError

logger = logging.getLogger("cosmos_train.data")


def tokenize_conversations(dataset, tokenizer, data):
    """Rows of `load_conversations` as a `datasets.Dataset` of `input_ids` plus `assistant_masks`.

    With `[data] train_on = "all"` there is no mask column: every token is a target. The chat template is
    checked once, up front (`loss_plan`); a conversation with media, or that the template refuses or
    cannot split into turns, is a one-line `DataError` naming it.
    """
    from datasets import Dataset

    plan = loss_plan(tokenizer, getattr(data, "train_on", "assistant"))
    render = renderer(tokenizer, plan.template)
    input_ids: list[list[int]] = []
    masks: list[list[int]] = []
    # Only the text columns: reading `images` would decode embedded pictures.
    for row in dataset.select_columns(["messages", "source"]):
        messages = to_text_messages(row["messages"], row["source"])
        try:
            ids, mask = _tokenize(messages, tokenizer, plan, render)
        except RENDER_FAILURES as error:
            raise DataError(f"{row['source']}: {why_unusable(error)}") from None
        input_ids.append(ids)
        masks.append(mask)
    columns = {"input_ids": input_ids}
    if plan.mode != "all":
        columns["assistant_masks"] = masks
    logger.info(
        "tokenized %d conversations (loss on %s)", len(input_ids), getattr(data, "train_on", "assistant")
    )
    return Dataset.from_dict(columns)


def _tokenize(messages, tokenizer, plan, render) -> tuple[list[int], list[int]]:
    if plan.mode == "turns":
        text, spans = assistant_spans(render, messages)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoded["input_ids"]), token_mask(encoded["offset_mapping"], spans)
    encoded = tokenizer.apply_chat_template(
        messages,
        chat_template=plan.template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=plan.mode == "markers",
    )
    ids = list(encoded["input_ids"])
    if plan.mode == "markers":
        return ids, trim_trailing_whitespace(ids, encoded["assistant_masks"], tokenizer)
    return ids, []
