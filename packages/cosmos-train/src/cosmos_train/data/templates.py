"""Which tokens carry the loss, decided once per run from the chat template (`loss_plan`).

Span semantics, the same for every template: an assistant turn's loss covers what the model generates
after the generation prompt, through the end-of-turn token that stops generation (so the model learns
to stop). That is the assistant content plus its end-of-turn token, and also any text the template puts
between the generation prompt and the content (the space after Mistral's `[/INST]`), which the model
generates too. Whitespace after the end-of-turn token (the newline before the next turn) is not in the
loss: generation has stopped by then. Every other token (system, user, headers, media) is context only.

How the spans are found (`LossPlan.mode`):
- "markers": the template's `{% generation %}` markers, read with `return_assistant_tokens_mask`
  (whitespace-only tokens closing a span are dropped, to keep the semantics above).
- "turns": a template without markers that is prefix-preserving, i.e. rendering a conversation one
  more turn at a time only ever appends text. An assistant span is then what rendering its turn adds to
  the conversation before it rendered with the generation prompt. This works for any such template
  (ChatML, Llama-3, Mistral `[INST]`, ...), for tokenizers and processors alike.
- "all": `[data] train_on = "all"`: every token of the conversation.

A template with neither markers nor the prefix property (e.g. one that drops the `<think>` block of
earlier assistant turns) gets TRL's training variant when TRL knows it, else a one-line `DataError`.
TRL's own `is_chat_template_prefix_preserving` is not used for the check: it probes tool-call turns
only, and says nothing about plain user/assistant turns or reasoning blocks, which is what we render.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jinja2 import TemplateError

from cosmos_train.errors import DataError

logger = logging.getLogger("cosmos_train.data")

REMEDY = (
    "add {% generation %}...{% endgeneration %} markers around the assistant turns in the chat template, "
    'or set [data] train_on = "all" to train on the whole conversation'
)

Span = tuple[int, int]  # character offsets [start, end) in the rendered conversation
Render = Callable[[list[dict[str, Any]], bool], str]  # (messages, add_generation_prompt) -> text


class TemplateMismatch(ValueError):
    """Rendering a conversation turn by turn did not only append text, so its assistant spans are unknown."""


@dataclass(frozen=True)
class LossPlan:
    """How the loss is limited for a run: `mode` (see the module docstring) and the template to render with."""

    mode: Literal["markers", "turns", "all"]
    template: str


def loss_plan(processing_class, train_on: str = "assistant") -> LossPlan:
    """Check the chat template once, before training, and decide how assistant spans are found.

    `processing_class` is a tokenizer (text LM) or a processor (VLM). Raises `DataError` (one line, naming
    both remedies) when assistant-only loss is asked for and the template cannot provide it.
    """
    if train_on not in ("assistant", "all"):
        raise DataError(f'data.train_on must be "assistant" or "all", got {train_on!r}')
    owner, template = _chat_template(processing_class)
    if train_on == "all":
        return LossPlan("all", template)
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    typed = tokenizer is not processing_class
    if _has_markers(template):
        _check_probe(tokenizer, _marked_probe(tokenizer, template, typed), "{% generation %} span")
        return LossPlan("markers", template)

    try:
        probe = _turns_probe(owner, tokenizer, template, typed)
    except TemplateMismatch as mismatch:
        reason = str(mismatch)
    else:
        _check_probe(tokenizer, probe, "turn-by-turn assistant span")
        logger.info(
            "the chat template has no {%% generation %%} markers: assistant spans come from turn-by-turn rendering"
        )
        return LossPlan("turns", template)

    training = _trl_training_template(owner)
    if training:
        _check_probe(tokenizer, _marked_probe(tokenizer, training, typed), "{% generation %} span")
        logger.info("using TRL's training variant of the chat template (it adds {%% generation %%} markers)")
        return LossPlan("markers", training)
    raise DataError(
        f"the chat template has no {{% generation %}} markers and is not prefix-preserving ({reason}), "
        f"so the assistant turns cannot be found for the loss; {REMEDY}"
    )


def renderer(owner, template: str) -> Render:
    """Render messages to text with `template`, as `owner` (tokenizer or processor) does before tokenizing."""

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return owner.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    return render


def assistant_spans(render: Render, messages: list[dict[str, Any]]) -> tuple[str, list[Span]]:
    """The rendered conversation and the character span of each assistant turn, found turn by turn.

    Raises `TemplateMismatch` when the rendering of the turns before an assistant turn (with the
    generation prompt) is not a prefix of the rendering up to that turn, or that is not a prefix of the
    whole conversation.
    """
    text = render(messages, False)
    spans = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if index == 0:
            raise TemplateMismatch(
                "the conversation starts with an assistant turn, which has no prompt before it"
            )
        prompt = render(messages[:index], True)
        turn = render(messages[: index + 1], False)
        if not turn.startswith(prompt):
            raise TemplateMismatch(
                f"the turns before messages[{index}] (assistant), with the generation prompt, "
                "render differently once it is added"
            )
        if not text.startswith(turn):
            raise TemplateMismatch(f"the messages after messages[{index}] (assistant) change how it renders")
        # Up to the end-of-turn token: the newline after it belongs to no one's generation.
        spans.append((len(prompt), len(prompt) + len(turn[len(prompt) :].rstrip())))
    return text, spans


# How rendering one conversation can fail: the template refuses it, or it does not split into turns.
RENDER_FAILURES = (TemplateError, TemplateMismatch)


def why_unusable(error: Exception) -> str:
    """One line for a conversation that failed with one of `RENDER_FAILURES` (the caller names the sample)."""
    if isinstance(error, TemplateMismatch):
        return f"{error}, so its assistant turns cannot be found; {REMEDY}"
    return f"the chat template cannot render it: {_line(error)}"


def token_mask(
    offsets: Sequence[Sequence[int]], spans: Sequence[Span], replacements: Sequence[dict] = ()
) -> list[int]:
    """1 for every token overlapping a span, from the tokenizer's `offset_mapping`.

    `replacements` are a processor's `text_replacement_offsets`: where a media placeholder of the rendered
    text grew into its expanded tokens, which moves every span after it by the characters gained.
    """
    placeholder_ends = [r["span"][1] for r in replacements]
    gained = [0] + [r["new_span"][1] - r["span"][1] for r in replacements]
    moved = [[c + gained[bisect.bisect_right(placeholder_ends, c)] for c in span] for span in spans]
    # Padding and added BOS tokens are zero-width and never overlap.
    return [int(any(a < end and b > start for start, end in moved)) for a, b in offsets]


def trim_trailing_whitespace(input_ids: Sequence[int], mask: Sequence[int], tokenizer) -> list[int]:
    """`mask` with whitespace-only tokens at the end of each span dropped (e.g. the newline after `<|im_end|>`)."""
    mask = list(mask)
    for end in range(len(mask)):
        if mask[end] and (end + 1 == len(mask) or not mask[end + 1]):
            start = end
            while start > 0 and mask[start - 1]:
                start -= 1
            while end > start and not tokenizer.decode([input_ids[end]]).strip():
                mask[end] = 0
                end -= 1
    return mask


# --- the once-per-run checks ---------------------------------------------------------------------------

_ANSWERS = ("Hi!", "Goodbye!")
# A reasoning block in the first answer catches templates that rewrite earlier assistant turns (Qwen3 drops
# the <think> block of every assistant turn before the last user message).
_PROBE = (
    ("system", "Answer briefly."),
    ("user", "Hello."),
    ("assistant", "<think>\nA greeting.\n</think>\n\n" + _ANSWERS[0]),
    ("user", "Bye."),
    ("assistant", _ANSWERS[1]),
)


def _probe_messages(typed: bool, system: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for role, text in _PROBE if system else _PROBE[1:]:
        content: Any = text
        if typed:
            content = [{"type": "text", "text": text}]
            if role == "user" and not any(m["role"] == "user" for m in messages):
                content.insert(0, {"type": "image"})  # VLM data has media in a user turn
        messages.append({"role": role, "content": content})
    return messages


def _on_probe(use: Callable[[list[dict[str, Any]]], Any], typed: bool):
    """`use(probe conversation)`, retried without its system message, which some templates (early Mistral) reject."""
    failures = (TemplateError, TypeError, KeyError, IndexError)  # how a template refuses a conversation
    try:
        return use(_probe_messages(typed, system=True))
    except failures:
        pass
    try:
        return use(_probe_messages(typed, system=False))
    except failures as error:
        raise DataError(
            f"the chat template cannot render a user/assistant conversation: {_line(error)}"
        ) from None


def _turns_probe(owner, tokenizer, template: str, typed: bool) -> tuple[list[int], list[int]]:
    text, spans = _on_probe(lambda messages: assistant_spans(renderer(owner, template), messages), typed)
    for answer, (start, end) in zip(_ANSWERS, spans, strict=True):
        if answer not in text[start:end]:
            raise TemplateMismatch(f"the assistant answer {answer!r} does not render inside its turn")
    if not tokenizer.is_fast:
        raise DataError(
            "assistant masks from turn-by-turn rendering need a fast tokenizer (for token offsets)"
        )
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(encoded["input_ids"]), token_mask(encoded["offset_mapping"], spans)


def _marked_probe(tokenizer, template: str, typed: bool) -> tuple[list[int], list[int]]:
    encoded = _on_probe(
        lambda messages: tokenizer.apply_chat_template(
            messages,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        ),
        typed,
    )
    ids = list(encoded["input_ids"])
    return ids, trim_trailing_whitespace(ids, encoded["assistant_masks"], tokenizer)


def _check_probe(tokenizer, probe: tuple[list[int], list[int]], what: str) -> None:
    """The spans must mark tokens, and should end on the end-of-turn token (else the model never learns to stop)."""
    ids, mask = probe
    if not any(mask):
        raise DataError(f"the chat template's {what}s enclose no assistant tokens; {REMEDY}")
    stops = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    for index, keep in enumerate(mask):
        last_of_span = keep and (index + 1 == len(mask) or not mask[index + 1])
        if last_of_span and ids[index] not in stops:
            after = f" (it leaves out {tokenizer.decode([ids[index + 1]])})" if index + 1 < len(ids) else ""
            logger.warning(
                "the chat template's %s ends on %r, not on an end-of-turn token%s: the model may not learn to stop",
                what,
                tokenizer.decode([ids[index]]),
                after,
            )
            return


def _chat_template(processing_class) -> tuple[Any, str]:
    """The object that renders (processor or tokenizer) and its chat template."""
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    owner, template = processing_class, processing_class.chat_template
    if not template and tokenizer is not processing_class:
        owner, template = tokenizer, tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if not template:
        raise DataError(
            f"{type(processing_class).__name__} has no chat template to render conversations with"
        )
    return owner, template


def _has_markers(template: str) -> bool:
    from trl.chat_template_utils import has_generation_markers

    return has_generation_markers(template)


def _trl_training_template(owner) -> str | None:
    """TRL's training variant of a template it knows (with markers), else None."""
    from trl.chat_template_utils import get_training_chat_template

    try:
        template = get_training_chat_template(owner)
    except Exception:  # ValueError: no variant known; its tool-call probes can also fail on odd templates
        return None
    return template if template and _has_markers(template) else None


def _line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]
