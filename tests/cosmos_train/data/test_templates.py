"""Assistant-only loss with and without `{% generation %}` markers, checked token by token.

The span of an assistant turn is what the model generates after the generation prompt through its
end-of-turn token (the content plus the end-of-turn token; for Mistral also the space after `[/INST]`);
whitespace after the end-of-turn token is context. The mask tests compare the masked tokens with those
spans and the unmasked tokens with the rest of the conversation, for text LMs (the pre-tokenized
dataset TRL consumes) and for a VLM processor (the collator, after media-token expansion).
"""

import json
import logging

import pytest
import torch
from sft_helpers import cli, write_job

from cosmos_train.algorithms.sft.schema import ConversationData
from cosmos_train.data import DataError, build_collator, load_conversations, tokenize_conversations
from transformers_cosmos3 import testing as tiny

# --- template styles: four without generation markers, two of them not prefix-preserving ------------------

# The tiny Cosmos3 template (typed content, image/video placeholders) with its markers taken out.
CHATML = tiny.CHAT_TEMPLATE.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")

LLAMA3 = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

# Mistral v0.2 style: no generation prompt, the space after [/INST] is generated, no system role.
MISTRAL = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{{- '[INST] ' + message['content'] + ' [/INST]' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- ' ' + message['content'] + eos_token -}}"
    "{%- else -%}{{- raise_exception('Only user and assistant roles are supported!') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

# Qwen3 style: the <think> block of every assistant turn before the last user message is dropped.
QWEN3_DROPS_THINK = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] -%}"
    "{%- if message['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# The last turn closes with another token than the turns before it.
LAST_TURN_DIFFERS = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] -}}"
    "{%- if loop.last -%}{{- '<|endoftext|>' -}}{%- else -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# The typed ChatML template with an end-of-text token closing only the last assistant turn.
CHATML_LAST_TURN_DIFFERS = CHATML.replace(
    "{{- '<|im_end|>' -}}{{- '\\n' -}}",
    "{{- '<|im_end|>' -}}{%- if loop.last -%}{{- '<|endoftext|>' -}}{%- endif -%}{{- '\\n' -}}",
)


def tokenizer_for(style: str):
    """The tiny byte-level tokenizer with the template (and special tokens) of `style`."""
    tokenizer = tiny.build_tokenizer()
    if style == "llama3":
        tokens = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        tokenizer.add_special_tokens({"bos_token": tokens[0], "additional_special_tokens": tokens[1:]})
    elif style == "mistral":
        tokenizer.add_special_tokens({"bos_token": "<s>", "eos_token": "</s>"})
    tokenizer.chat_template = {
        "chatml": CHATML,
        "llama3": LLAMA3,
        "mistral": MISTRAL,
        "qwen3_drops_think": QWEN3_DROPS_THINK,
        "last_turn_differs": LAST_TURN_DIFFERS,
        "marked": tiny.CHAT_TEMPLATE,
    }[style]
    return tokenizer


def expected_span(style: str, content: str) -> str:
    """What the model generates after the generation prompt, through its end-of-turn token."""
    return {
        "chatml": content + "<|im_end|>",
        "marked": content + "<|im_end|>",
        "llama3": content.strip() + "<|eot_id|>",
        "mistral": " " + content + "</s>",
    }[style]


# --- conversations --------------------------------------------------------------------------------------

SYSTEM_MULTI_TURN = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "Shape?"},
    {"role": "assistant", "content": "circle"},
    {"role": "user", "content": "And its color?"},
    {"role": "assistant", "content": "<think>\nIt looked blue.\n</think>\n\nblue"},
]
THREE_TURNS = [
    {"role": "user", "content": "Count to two."},
    {"role": "assistant", "content": "one two\n"},  # trailing newline of the content is the model's to learn
    {"role": "user", "content": "Again?"},
    {"role": "assistant", "content": "one, two"},
    {"role": "user", "content": "Thanks."},
    {"role": "assistant", "content": "You're welcome."},
]
SINGLE = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]


def write_chats(path, conversations):
    path.write_text("".join(json.dumps({"messages": messages}) + "\n" for messages in conversations))
    return ConversationData(format="jsonl", path=str(path))


def runs(mask):
    """Maximal runs of equal mask values: [(value, start, end)]."""
    found, start = [], 0
    for index in range(1, len(mask) + 1):
        if index == len(mask) or mask[index] != mask[start]:
            found.append((int(mask[start]), start, index))
            start = index
    return found


def check_masks(tokenizer, ids, mask, text, spans):
    """Token by token: masked runs decode to `spans` in order, unmasked runs to the text around them.

    `text` is the whole sequence as text: the rendered conversation (text LMs), or the decoded sequence
    with its media tokens expanded (VLMs).
    """
    expected, cursor = [], 0
    for span in spans:
        at = text.index(span, cursor)
        expected += [(0, text[cursor:at]), (1, span)]
        cursor = at + len(span)
    expected.append((0, text[cursor:]))
    expected = [(value, piece) for value, piece in expected if piece]
    actual = [(value, tokenizer.decode(ids[start:end])) for value, start, end in runs(mask)]
    assert actual == expected


def assistant_contents(messages):
    return [message["content"] for message in messages if message["role"] == "assistant"]


# --- text LMs: the pre-tokenized dataset TRL consumes ---------------------------------------------------


@pytest.mark.parametrize("style", ["chatml", "llama3", "mistral", "marked"])
def test_text_masks_follow_the_assistant_turns(tmp_path, style):
    tokenizer = tokenizer_for(style)
    conversations = [THREE_TURNS, SINGLE] + ([] if style == "mistral" else [SYSTEM_MULTI_TURN])
    data = write_chats(tmp_path / "chats.jsonl", conversations)
    rows, _ = load_conversations(data)
    dataset = tokenize_conversations(rows, tokenizer, data)
    assert dataset.column_names == ["input_ids", "assistant_masks"] and len(dataset) == len(conversations)
    for messages, row in zip(conversations, dataset, strict=True):
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        # The sequence is the rendered conversation, exactly as inference tokenizes it.
        assert (
            row["input_ids"]
            == tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        )
        spans = [expected_span(style, content) for content in assistant_contents(messages)]
        check_masks(tokenizer, row["input_ids"], row["assistant_masks"], text, spans)


def test_train_on_all_keeps_every_token(tmp_path):
    tokenizer = tokenizer_for("qwen3_drops_think")  # no assistant spans needed, so any template trains
    data = write_chats(tmp_path / "chats.jsonl", [SYSTEM_MULTI_TURN, SINGLE])
    rows, _ = load_conversations(data)
    dataset = tokenize_conversations(rows, tokenizer, data.model_copy(update={"train_on": "all"}))
    assert dataset.column_names == ["input_ids"]
    assert tokenizer.decode(dataset[1]["input_ids"]) == tokenizer.apply_chat_template(SINGLE, tokenize=False)


@pytest.mark.parametrize(
    ("style", "reason"),
    [
        ("qwen3_drops_think", "(the messages after messages[2] (assistant) change how it renders)"),
        (
            "last_turn_differs",
            "(the turns before messages[2] (assistant), with the generation prompt, render differently once it "
            "is added)",
        ),
    ],
)
def test_template_neither_marked_nor_prefix_preserving_is_one_line_with_both_remedies(
    tmp_path, style, reason
):
    tokenizer = tokenizer_for(style)
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE])
    rows, _ = load_conversations(data)
    with pytest.raises(DataError) as error:
        tokenize_conversations(rows, tokenizer, data)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "the chat template has no {% generation %} markers and is not prefix-preserving"
    )
    assert reason in message
    assert "add {% generation %}...{% endgeneration %} markers around the assistant turns" in message
    assert 'set [data] train_on = "all"' in message


def test_a_conversation_that_breaks_the_prefix_property_names_its_source(tmp_path):
    """A template that passes the probe but rewrites earlier turns for some data fails on that record."""
    tokenizer = tokenizer_for("chatml")
    # Rewrites an earlier assistant turn only when it mentions "secret", which the probe does not.
    tokenizer.chat_template = QWEN3_DROPS_THINK.replace(
        "'</think>' in content", "'secret' in content"
    ).replace("content.split('</think>')[-1].lstrip('\\n')", "'[redacted]'")
    leaky = [SINGLE[0], {"role": "assistant", "content": "the secret"}, *THREE_TURNS[2:4]]
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE, leaky])
    rows, _ = load_conversations(data)
    with pytest.raises(DataError) as error:
        tokenize_conversations(rows, tokenizer, data)
    assert str(error.value) == (
        f"{data.path}:2: the messages after messages[1] (assistant) change how it renders, so its assistant turns "
        "cannot be found; add {% generation %}...{% endgeneration %} markers around the assistant turns in the "
        'chat template, or set [data] train_on = "all" to train on the whole conversation'
    )


def test_a_conversation_the_template_refuses_names_its_source(tmp_path):
    tokenizer = tokenizer_for("mistral")  # accepts the probe without its system turn, not this record
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE, SYSTEM_MULTI_TURN])
    rows, _ = load_conversations(data)
    with pytest.raises(DataError) as error:
        tokenize_conversations(rows, tokenizer, data)
    assert str(error.value) == (
        f"{data.path}:2: the chat template cannot render it: Only user and assistant roles are supported!"
    )


def test_text_lm_rejects_media(tmp_path, shapes_dir):
    path = tmp_path / "media.jsonl"
    path.write_text(json.dumps({"messages": SINGLE, "images": ["images/red_square.png"]}) + "\n")
    data = ConversationData(format="jsonl", path=str(path), media_dir=str(shapes_dir))
    rows, _ = load_conversations(data)
    with pytest.raises(DataError, match=r"media.jsonl:1: has image content but the model is text-only$"):
        tokenize_conversations(rows, tokenizer_for("chatml"), data)


def test_end_of_turn_token_outside_the_span_is_flagged(tmp_path, caplog):
    tokenizer = tokenizer_for("chatml")
    # The end-of-turn token opens the next message instead of closing the assistant's.
    tokenizer.chat_template = (
        "{%- for message in messages -%}{%- if not loop.first -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_end|>\\n<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE])
    rows, _ = load_conversations(data)
    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        tokenize_conversations(rows, tokenizer, data)
    assert [r.getMessage() for r in caplog.records] == [
        "the chat template's turn-by-turn assistant span ends on '!', not on an end-of-turn token (it leaves out "
        "<|im_end|>): the model may not learn to stop"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        tokenize_conversations(rows, tokenizer_for("chatml"), data)
    assert not caplog.records


def test_a_generation_span_without_the_end_of_turn_token_is_flagged(tmp_path, caplog):
    tokenizer = tokenizer_for("marked")
    closing = "{{- '<|im_end|>' -}}{%- endgeneration -%}"
    assert closing in tiny.CHAT_TEMPLATE
    tokenizer.chat_template = tiny.CHAT_TEMPLATE.replace(closing, "{%- endgeneration -%}{{- '<|im_end|>' -}}")
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE])
    rows, _ = load_conversations(data)
    with caplog.at_level(logging.WARNING, logger="cosmos_train.data"):
        dataset = tokenize_conversations(rows, tokenizer, data)
    assert [r.getMessage() for r in caplog.records] == [
        "the chat template's {% generation %} span ends on '!', not on an end-of-turn token (it leaves out "
        "<|im_end|>): the model may not learn to stop"
    ]
    ids, mask = dataset[0]["input_ids"], dataset[0]["assistant_masks"]
    assert tokenizer.decode([t for t, keep in zip(ids, mask, strict=True) if keep]) == "hi"


def test_a_template_trl_knows_gets_its_training_variant(tmp_path):
    """Stock Qwen3 drops earlier <think> blocks (not prefix-preserving); TRL has a marked variant of it."""
    from trl.chat_template_utils import qwen3_chat_template, qwen3_training_chat_template

    from cosmos_train.data.templates import LossPlan, loss_plan

    tokenizer = tiny.build_tokenizer()
    tokenizer.chat_template = qwen3_chat_template
    assert loss_plan(tokenizer) == LossPlan("markers", qwen3_training_chat_template)
    data = write_chats(tmp_path / "chats.jsonl", [SYSTEM_MULTI_TURN])
    rows, _ = load_conversations(data)
    row = tokenize_conversations(rows, tokenizer, data)[0]
    spans = [tokenizer.decode(row["input_ids"][a:b]) for keep, a, b in runs(row["assistant_masks"]) if keep]
    assert len(spans) == 2 and spans[0].endswith("circle<|im_end|>") and spans[1].endswith("blue<|im_end|>")


def sft_trainer(tmp_path, tokenizer, dataset, **config):
    """TRL's SFTTrainer on a tiny in-memory Qwen3, as `run_sft` builds it for a text LM."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import SFTConfig, SFTTrainer

    model = Qwen3ForCausalLM(Qwen3Config(**tiny.text_config(tokenizer)))
    args = SFTConfig(output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True, **config)
    return SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_trl_builds_labels_truncates_and_packs_the_tokenized_conversations(tmp_path):
    tokenizer = tokenizer_for("chatml")
    data = write_chats(tmp_path / "chats.jsonl", [SINGLE, SINGLE])
    rows, _ = load_conversations(data)
    dataset = tokenize_conversations(rows, tokenizer, data)
    text = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n"
    length = len(tokenizer(text)["input_ids"])

    def batch_of(trainer):
        return trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])

    batch = batch_of(sft_trainer(tmp_path, tokenizer, dataset, max_length=None))
    assert batch["input_ids"].shape == (2, length) and tokenizer.decode(batch["input_ids"][0]) == text
    labels = batch["labels"][0]
    assert tokenizer.decode(labels[labels != -100]) == "hi<|im_end|>"
    assert torch.equal(labels[labels != -100], batch["input_ids"][0][labels != -100])

    cut = batch_of(sft_trainer(tmp_path, tokenizer, dataset, max_length=length - 2))  # drops "<|im_end|>\n"
    assert cut["input_ids"].shape == (2, length - 2)
    assert tokenizer.decode(cut["labels"][0][cut["labels"][0] != -100]) == "hi"

    packing = {"max_length": 1024, "packing": True, "padding_free": True, "packing_strategy": "bfd"}
    packed = batch_of(sft_trainer(tmp_path, tokenizer, dataset, **packing))
    assert packed["input_ids"].shape == (1, 2 * length) and "attention_mask" not in packed
    assert packed["position_ids"][0].tolist() == list(range(length)) * 2
    assert tokenizer.decode(packed["labels"][0][packed["labels"][0] != -100]) == "hi<|im_end|>" * 2


# --- end to end: `cosmos-train sft` on a text LM whose template has no markers ---------------------------

# Plain ChatML on string content, as many text LMs ship it: no markers, not known to TRL.
PLAIN_CHATML = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def text_lm_job(tmp_path, template):
    from transformers import AutoTokenizer

    from cosmos_train.tiny_models import save_tiny_text_lm

    model = save_tiny_text_lm(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(model)
    chats = tmp_path / "text.jsonl"
    words = ["red", "green", "blue", "yellow"] * 4
    write_chats(
        chats,
        [[{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": w}] for w in words],
    )
    train = {"max_steps": 20, "learning_rate": 1e-2, "save_steps": 20}
    return write_job(tmp_path, model, data="jsonl", train=train), f'data.path="{chats}"'


def test_cosmos_train_sft_on_a_text_lm_without_markers(tmp_path):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    job, data_path = text_lm_job(tmp_path, PLAIN_CHATML)
    with pytest.raises(ValueError):  # TRL alone cannot limit the loss to the assistant turns here
        get_training_chat_template(AutoTokenizer.from_pretrained(tmp_path / "lm"))
    result = cli("sft", "--config", job, "--set", data_path)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "checkpoint-20" / "trainer_state.json").read_text())
    history = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(history) == 20 and sum(history[-3:]) / 3 < 0.7 * sum(history[:3]) / 3


def test_cosmos_train_sft_refuses_a_template_neither_marked_nor_prefix_preserving(tmp_path):
    job, data_path = text_lm_job(tmp_path, QWEN3_DROPS_THINK)
    result = cli("sft", "--config", job, "--set", data_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0])
    assert "not prefix-preserving" in errors[0]
    assert "{% generation %}...{% endgeneration %} markers around the assistant turns" in errors[0]
    assert 'set [data] train_on = "all"' in errors[0]


# --- VLMs: the collator, with media-token expansion -----------------------------------------------------


def image_turn(image, text):
    return {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def vlm_rows(shapes_dir, tmp_path_factory):
    """An image conversation with a system turn and two assistant turns, a text-only one, and a video one."""
    image_chat = [
        {"role": "system", "content": "Answer in one word."},
        image_turn("images/blue_circle.png", "Shape?"),
        {"role": "assistant", "content": "circle"},
        {"role": "user", "content": "And its color?"},
        {"role": "assistant", "content": "blue"},
    ]
    path = tmp_path_factory.mktemp("vlm") / "chats.jsonl"
    path.write_text(json.dumps({"messages": image_chat}) + "\n" + json.dumps({"messages": SINGLE}) + "\n")
    data = ConversationData(format="jsonl", path=str(path), media_dir=str(shapes_dir))
    rows, _ = load_conversations(data)
    videos, _ = load_conversations(ConversationData(format="jsonl", path=str(shapes_dir / "chat.jsonl")))
    answers = [["circle", "blue"], ["hi"], ["red"]]
    media_tokens = [(4, 0), (0, 0), (0, 8)]  # (image, video) pads after expansion: 32x32 image, 2x4x4 clip
    return data, [rows[0], rows[1], videos[24]], answers, media_tokens


def vlm_processor(template):
    processor = tiny.build_processor(tiny.build_tokenizer())
    processor.chat_template = template
    return processor


@pytest.mark.parametrize("template", ["chatml", "marked"])
def test_vlm_masks_follow_the_assistant_turns_after_media_expansion(vlm_rows, template):
    data, rows, answers, media_tokens = vlm_rows
    processor = vlm_processor(CHATML if template == "chatml" else tiny.CHAT_TEMPLATE)
    batch = build_collator(processor, data, None)(rows)
    tokenizer = processor.tokenizer
    for row, expected in enumerate(answers):
        length = int(batch["attention_mask"][row].sum())
        ids, labels = batch["input_ids"][row, :length], batch["labels"][row]
        assert (labels[length:] == -100).all()  # padding is never a target
        labels = labels[:length]
        assert torch.equal(labels[labels != -100], ids[labels != -100])
        text = tokenizer.decode(ids)
        assert (text.count("<|image_pad|>"), text.count("<|video_pad|>")) == media_tokens[row]
        spans = [answer + "<|im_end|>" for answer in expected]
        check_masks(tokenizer, ids.tolist(), (labels != -100).long().tolist(), text, spans)


def test_vlm_train_on_all_targets_every_non_pad_token(vlm_rows):
    data, rows, _, _ = vlm_rows
    processor = vlm_processor(CHATML_LAST_TURN_DIFFERS)  # no assistant spans needed: any template trains
    batch = build_collator(processor, data.model_copy(update={"train_on": "all"}), None)(rows[:2])
    targets = batch["attention_mask"].bool()
    assert torch.equal(batch["labels"][targets], batch["input_ids"][targets])
    assert (batch["labels"][~targets] == -100).all() and not targets.all()


def test_vlm_template_neither_marked_nor_prefix_preserving_fails_when_the_collator_is_built(vlm_rows):
    data, _, _, _ = vlm_rows
    with pytest.raises(DataError) as error:
        build_collator(vlm_processor(CHATML_LAST_TURN_DIFFERS), data, None)
    message = str(error.value)
    assert "\n" not in message and "not prefix-preserving" in message
    assert "{% generation %}...{% endgeneration %}" in message and 'train_on = "all"' in message


def test_vlm_conversation_that_breaks_the_prefix_property_names_its_source(vlm_rows):
    data, rows, _, _ = vlm_rows
    # Rewrites an earlier assistant turn only when it says "circle", which the probe does not.
    template = CHATML.replace(
        "{%- if message['role'] == 'assistant' -%}",
        "{%- if message['role'] == 'assistant' and not loop.last and message['content'][0]['text'] == 'circle' -%}"
        "{{- '[redacted]<|im_end|>' -}}{%- elif message['role'] == 'assistant' -%}",
    )
    assert template != CHATML
    collate = build_collator(vlm_processor(template), data, None)
    collate(rows[1:])
    with pytest.raises(DataError) as error:
        collate(rows)
    assert str(error.value).startswith(
        f"{rows[0]['source']}: the messages after messages[2] (assistant) change how it renders, so its assistant "
        "turns cannot be found; add {% generation %}"
    )
