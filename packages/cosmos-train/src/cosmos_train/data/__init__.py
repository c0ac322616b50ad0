"""Conversation data for SFT: load and validate LLaVA / JSONL / `datasets` data, and collate it for TRL.

`dataset, report = load_conversations(job.data)`, then `build_collator(processing_class, job.data, max_length)`
as the trainer's `data_collator`.
"""

from cosmos_train.data.loading import DataError, DataReport, load_conversations, to_text_messages
from cosmos_train.data.media import VideoClip, load_video, sample_frame_indices

__all__ = [
    "DataError",
    "DataReport",
    "VideoClip",
    "build_collator",
    "load_conversations",
    "load_video",
    "sample_frame_indices",
    "to_text_messages",
]


def __getattr__(name: str):
    # The collator needs TRL, whose import takes seconds; loading and validating data does not.
    if name == "build_collator":
        from cosmos_train.data.collate import build_collator

        return build_collator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
