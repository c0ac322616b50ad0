"""VLM collation through the real processors: media tokens match the grids, labels cover exactly the assistant turns."""

import json
import math

import pytest
import torch

from cosmos_train.algorithms.sft.schema import ConversationData
from cosmos_train.data import DataError, build_collator, load_conversations


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def image_turn(image, text):
    return {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def mixed(shapes_dir, tmp_path_factory):
    """Rows: single-turn image, two-turn image with a system turn, text-only, and the two video records."""
    path = write_jsonl(
        tmp_path_factory.mktemp("mixed") / "mixed.jsonl",
        [
            {
                "messages": [
                    image_turn("images/red_square.png", "What color is the shape?"),
                    {"role": "assistant", "content": "red"},
                ]
            },
            {
                "messages": [
                    {"role": "system", "content": "Answer in one word."},
                    image_turn("images/blue_circle.png", "Shape?"),
                    {"role": "assistant", "content": "circle"},
                    {"role": "user", "content": "And its color?"},
                    {"role": "assistant", "content": "blue"},
                ]
            },
            {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]},
        ],
    )
    data = ConversationData(format="jsonl", path=str(path), media_dir=str(shapes_dir))
    rows, _ = load_conversations(data)
    videos, _ = load_conversations(ConversationData(format="jsonl", path=str(shapes_dir / "chat.jsonl")))
    return data, [rows[i] for i in range(len(rows))] + [videos[24], videos[25]]


def assistant_spans(input_ids, tokenizer):
    """Expected loss mask, computed from the tokens: after each `<|im_start|>assistant\\n` up to its `<|im_end|>`."""
    ids = input_ids.tolist()
    start = [tokenizer.convert_tokens_to_ids("<|im_start|>"), *tokenizer.encode("assistant\n")]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    mask = torch.zeros(len(ids), dtype=torch.bool)
    i = 0
    while i < len(ids):
        if ids[i : i + len(start)] == start:
            j = i + len(start)
            while ids[j] != end:
                j += 1
            j += 1
            mask[i + len(start) : j] = True
            i = j
        else:
            i += 1
    return mask


def check_labels(batch, tokenizer, answers):
    eot = "<|im_end|>"
    for row, expected in enumerate(answers):
        ids, labels = batch["input_ids"][row], batch["labels"][row]
        mask = assistant_spans(ids, tokenizer)
        assert torch.equal(labels != -100, mask & batch["attention_mask"][row].bool())
        assert torch.equal(labels[mask], ids[mask])
        assert tokenizer.decode(labels[mask]) == "".join(answer + eot for answer in expected)


def check_media_tokens(batch, processor, kind):
    merge = processor.image_processor.merge_size**2
    grid = batch[f"{kind}_grid_thw"]
    pad = getattr(processor, f"{kind}_token_id")
    counts = (batch["input_ids"] == pad).sum(dim=1)
    assert int(counts.sum()) == int(grid.prod(dim=1).sum()) // merge
    pixels = batch["pixel_values" if kind == "image" else "pixel_values_videos"]
    assert pixels.shape[0] == int(grid.prod(dim=1).sum())
    return counts


def test_cosmos3_image_batch(mixed, tokenizer, cosmos_processor):
    from transformers import Cosmos3OmniForConditionalGeneration

    from transformers_cosmos3 import testing as tiny

    data, rows = mixed
    batch = build_collator(cosmos_processor, data, 4096)(rows[:3])
    assert {"input_ids", "attention_mask", "labels", "pixel_values", "image_grid_thw"} <= set(batch)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["labels"].shape
    assert batch["input_ids"].shape[0] == 3 and "pixel_values_videos" not in batch
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4]]  # 32x32 images, 8px patches
    assert check_media_tokens(batch, cosmos_processor, "image").tolist() == [4, 4, 0]
    # Right padding: the attention mask is a prefix of ones, padding is never a target.
    lengths = batch["attention_mask"].sum(dim=1)
    assert torch.equal(
        batch["attention_mask"], (torch.arange(batch["input_ids"].shape[1]) < lengths[:, None]).long()
    )
    assert (batch["input_ids"][2, lengths[2] :] == tokenizer.pad_token_id).all()
    check_labels(batch, tokenizer, [["red"], ["circle", "blue"], ["hi"]])

    model = Cosmos3OmniForConditionalGeneration(tiny.reasoner_config(tokenizer))
    assert torch.isfinite(model(**batch).loss)


def test_cosmos3_video_batch_carries_real_frame_timing(mixed, tokenizer, cosmos_processor):
    from transformers import Cosmos3OmniForConditionalGeneration

    from transformers_cosmos3 import testing as tiny

    data, rows = mixed
    batch = build_collator(cosmos_processor, data, None)(rows[3:] + rows[:1])
    # clip.mp4: 8 frames at 4 fps; data.fps=2 samples frames 0, 2, 4, 6 -> two temporal patches of 4x4.
    assert batch["video_grid_thw"].tolist() == [[2, 4, 4], [2, 4, 4]]
    assert check_media_tokens(batch, cosmos_processor, "video").tolist() == [8, 8, 0]
    assert check_media_tokens(batch, cosmos_processor, "image").tolist() == [0, 0, 4]
    # Qwen3-VL writes each patch's mean timestamp from the metadata: (0/4 + 2/4) / 2 and (4/4 + 6/4) / 2 s.
    text = tokenizer.decode(batch["input_ids"][0])
    assert "<0.2 seconds>" in text and "<1.2 seconds>" in text
    check_labels(batch, tokenizer, [["red"], ["right"], ["red"]])
    model = Cosmos3OmniForConditionalGeneration(tiny.reasoner_config(tokenizer))
    assert torch.isfinite(model(**batch).loss)

    capped = build_collator(cosmos_processor, data.model_copy(update={"max_frames": 2}), None)(rows[3:4])
    assert capped["video_grid_thw"].tolist() == [[1, 4, 4]]  # frames 0 and 7
    assert "<0.9 seconds>" in tokenizer.decode(capped["input_ids"][0])


@pytest.fixture(scope="module")
def qwen25_processor(tokenizer):
    """A tiny Qwen2.5-VL processor with the stock Qwen2.5-VL template, which has no generation markers."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor
    from trl.chat_template_utils import qwen2_5_vl_chat_template

    sizes = {
        "patch_size": 8,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 256, "longest_edge": 16384},
    }
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**sizes),
        video_processor=Qwen2VLVideoProcessor(**sizes),
        tokenizer=tokenizer,
        chat_template=qwen2_5_vl_chat_template,
    )


def test_qwen25_vl_stock_template_masks_turn_by_turn(mixed, tokenizer, qwen25_processor):
    data, rows = mixed
    batch = build_collator(qwen25_processor, data, 4096)(rows[:3] + rows[3:4])
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4]]
    assert check_media_tokens(batch, qwen25_processor, "image").tolist() == [4, 4, 0, 0]
    assert check_media_tokens(batch, qwen25_processor, "video").tolist() == [0, 0, 0, 8]
    # Two frames per temporal patch at the sampled 2 frames/s: one second per grid step.
    assert batch["second_per_grid_ts"].tolist() == [1.0]
    text = tokenizer.decode(batch["input_ids"][0])
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    # No markers: the spans come from rendering turn by turn, and end with <|im_end|> (not the newline after it).
    check_labels(batch, tokenizer, [["red"], ["circle", "blue"], ["hi"], ["red"]])


def test_truncation_never_cuts_media_tokens(mixed, tokenizer, cosmos_processor):
    data, rows = mixed
    full = build_collator(cosmos_processor, data, None)([rows[0]])
    length = full["input_ids"].shape[1]
    cut = build_collator(cosmos_processor, data, length - 2)([rows[0]])  # drops "<|im_end|>\n"
    assert cut["input_ids"].shape == cut["labels"].shape == cut["mm_token_type_ids"].shape == (1, length - 2)
    assert torch.equal(cut["input_ids"], full["input_ids"][:, : length - 2])
    assert tokenizer.decode(cut["labels"][0][cut["labels"][0] != -100]) == "red"

    first_pad = int((full["input_ids"][0] == cosmos_processor.image_token_id).nonzero()[0])
    with pytest.raises(DataError) as error:
        build_collator(cosmos_processor, data, first_pad + 1)([rows[2], rows[0]])
    assert str(error.value) == (
        f"{rows[0]['source']}: {length} tokens exceed max_length={first_pad + 1} and truncating would cut media tokens"
    )


def test_packing_is_text_only(mixed, cosmos_processor, tokenizer):
    data, _ = mixed
    with pytest.raises(DataError, match="packing"):
        build_collator(cosmos_processor, data.model_copy(update={"packing": True}), None)
    with pytest.raises(TypeError, match="tokenize_conversations"):  # text LMs are tokenized up front
        build_collator(tokenizer, data, None)


def test_frame_count_follows_data_fps(mixed, cosmos_processor):
    data, rows = mixed
    for fps, frames in ((1, 2), (4, 8)):  # clip.mp4 is 2 s long
        batch = build_collator(cosmos_processor, data.model_copy(update={"fps": fps}), None)(rows[3:4])
        assert batch["video_grid_thw"][0, 0].item() == math.ceil(frames / 2)
