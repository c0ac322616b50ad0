"""Conversation data for SFT: load and validate LLaVA / JSONL / `datasets` data, and prepare it for TRL.

`dataset, report = load_conversations(job.data)`; then for a VLM `build_collator(processor, job.data,
max_length)` as the trainer's `data_collator`, for a text LM `tokenize_conversations(dataset, tokenizer,
job.data)` as its (pre-tokenized) `train_dataset`. Both check the chat template once and limit the loss
to the assistant turns (`[data] train_on = "assistant"`) as `templates.py` describes.

Chat prompts for GRPO, with images or video: `load_prompts` (`chat_prompts.py`).
Image/video + caption pairs for diffusion training: `load_pairs` and `collate_pairs` (`pairs.py`; their encodings
are cached by `cosmos_train.diffusion.latent_cache`).
Prompt lists for diffusion RL (txt, GenEval, JSONL): `load_prompt_list` and `collate_prompts` (`prompt_lists.py`).
"""

from cosmos_train.data.conversations import load_conversations, to_text_messages
from cosmos_train.data.media import VideoClip, load_video, sample_frame_indices
from cosmos_train.data.records import DataReport
from cosmos_train.errors import DataError

__all__ = [
    "DataError",
    "DataReport",
    "PairDataset",
    "PromptDataset",
    "VideoClip",
    "build_collator",
    "collate_pairs",
    "collate_prompts",
    "load_conversations",
    "load_pairs",
    "load_prompt_list",
    "load_prompts",
    "load_video",
    "read_data_section",
    "sample_frame_indices",
    "to_text_messages",
    "tokenize_conversations",
]

_PAIRS = {"PairDataset", "collate_pairs", "load_pairs"}
_PROMPT_LISTS = {"PromptDataset", "collate_prompts", "load_prompt_list"}


def read_data_section(section, video: bool | None = None):
    """Read and validate a job's data section with the loader its type names (`cosmos_train.config`'s data
    sections): (dataset, DataReport). `video`: whether a pipeline's pairs are videos."""
    from cosmos_train.config import ConversationData, PairData, PromptData, PromptListData

    if isinstance(section, ConversationData):
        return load_conversations(section)
    if isinstance(section, PromptData):
        return __getattr__("load_prompts")(section)
    if isinstance(section, PairData):
        return __getattr__("load_pairs")(section, video=bool(video))
    if isinstance(section, PromptListData):
        return __getattr__("load_prompt_list")(section)
    raise TypeError(f"no loader reads a {type(section).__name__}")


def __getattr__(name: str):
    # These need TRL, whose import takes seconds; loading and validating data does not.
    if name == "build_collator":
        from cosmos_train.data.collate import build_collator

        return build_collator
    if name == "tokenize_conversations":
        from cosmos_train.data.text import tokenize_conversations

        return tokenize_conversations
    if name in _PAIRS:  # these need torch
        from cosmos_train.data import pairs

        return getattr(pairs, name)
    if name in _PROMPT_LISTS:  # these need torch too
        from cosmos_train.data import prompt_lists

        return getattr(prompt_lists, name)
    if name == "load_prompts":  # datasets
        from cosmos_train.data.chat_prompts import load_prompts

        return load_prompts
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
