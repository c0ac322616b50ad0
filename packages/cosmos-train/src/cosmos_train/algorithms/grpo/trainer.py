"""GRPO on TRL's `GRPOTrainer`, for text LMs, VLMs and the Cosmos3 reasoner, with video prompts.

The story of a run (`run_grpo`), once `read_job` has validated the job and built its `GRPOConfig`
(`schema.py`):
1. build the rewards, so that a bad reward or a reward service that is down fails before any model loads;
2. load the model and the prompts;
3. hand them to TRL, which samples `num_generations` completions per prompt, scores them and updates;
4. train and save on the shared skeleton (`common.train_and_save`).

What `CosmosGRPOTrainer` adds to TRL's trainer:
- **Prompt media, video included** (TRL's GRPO takes dataset images only). Each row's images and videos are
  decoded with the SFT data machinery (`fps` / `max_frames`) and encoded by the model's processor once per
  rollout. The same tensors feed generation and every log-prob forward (old policy, reference, loss):
  they travel with the rollout as one entry per row (`prompt_media`), so TRL's shuffling and splitting keep
  them with their row.
- **Shared-prompt rollouts** (`[rollout] shared_prompt`, on by default): TRL's transformers path prefills
  each prompt `num_generations` times, through the vision tower too. Here each distinct prompt is
  prefilled once and its KV cache repeated for its K samples (`_generate_single_turn`).
- **Dynamic sampling** (DAPO, `[rollout] dynamic_sampling`): groups whose rewards have no spread teach
  nothing; they are dropped and fresh prompts are sampled until the batch is full of groups with spread, as DAPO
  does. Past `max_resample_rounds` extra rounds the run stops with an error (DAPO's `max_num_gen_batches`): no
  zero-spread group is ever trained on.
- **Bit-equal resume**: each epoch's prompt order is drawn from `seed + epoch` (`EpochSeededRepeatSampler`),
  and a checkpoint inside a generation cycle keeps the buffered rollout its next steps train on.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import RepeatSampler, pad

from ...config import ConfigError
from ...data import DataError
from ...data.chat_prompts import load_prompts
from ...data.collate import encode_prompts, media_token_ids, messages_with_media
from ...errors import RunError
from ...jobs import Job
from ...launch.zero3 import held_bytes, is_partitioned
from ...models import load_model, lora_config
from ...rewards import build_rewards
from ..common import CrashSafeTrainerMixin, log_weight_copies, train_and_save
from .schema import GRPORolloutSection, PromptData

logger = logging.getLogger(__name__)

# Processor outputs with one row per patch (split per media item by its grid) and their grid keys.
_PATCH_ROWS = {"pixel_values": "image_grid_thw", "pixel_values_videos": "video_grid_thw"}
_TOKEN_TYPES = "mm_token_type_ids"
# Per process, in each checkpoint: TRL's micro-step counter and, inside a generation cycle, the buffered rollout.
_ROLLOUT_STATE = "grpo_rollout_state_{}.pt"


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` with epoch `e` shuffled from `seed + e`, set by the Trainer's `set_epoch` (the rule
    of torch's `DistributedSampler` and accelerate's `SeedableRandomSampler`; epoch 0's order is TRL's).

    TRL's draws each epoch's permutation from one generator seeded once, so epoch e's order depends on the e
    permutations drawn before it in the same process. A resumed process builds a fresh sampler: the epoch
    it resumes in (e >= 1) would follow epoch 0's order, and each later epoch an earlier epoch's.
    """

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed + self.epoch)
        yield from super().__iter__()


class CosmosGRPOTrainer(CrashSafeTrainerMixin, GRPOTrainer):
    """TRL's `GRPOTrainer` with video/image prompts, shared-prompt rollouts, dynamic sampling, crash-safe
    checkpoints and a stop on non-finite loss.

    `data` (the job's `[data]`) sets how prompt videos are sampled; `rollout` (`[rollout]`) switches
    shared-prompt rollouts and dynamic sampling. Rows carry media as `prompt_images` / `prompt_videos`
    (see `data/chat_prompts.py`).
    """

    def __init__(
        self,
        *args,
        data: PromptData | None = None,
        rollout: GRPORolloutSection | None = None,
        greedy_eval: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.prompt_data = data
        self.rollout = rollout or GRPORolloutSection()
        self.greedy_eval = greedy_eval
        self._forward_media: list[dict[str, Any]] | None = None  # per-row media of the batch being scored
        self._last_rewards: torch.Tensor | None = None  # gathered rewards of the last rollout
        # Completion tokens sampled in training so far, on every process, dropped groups included (logged).
        self.generated_tokens = 0
        if self._is_vlm and not self.use_vllm:
            self._suppress_media_tokens()
        # TRL's reference model: partitioned like the policy under ZeRO-3 (`prepare_deepspeed`).
        if self.ref_model is not None:
            parameters = list(self.ref_model.parameters())
            partitioned = any(map(is_partitioned, parameters))
            log_weight_copies(self.args, {"reference": held_bytes(parameters)}, partitioned)

    def _suppress_media_tokens(self) -> None:
        """A sampled media token would not match the prompt's media features in the loss forward: TRL
        suppresses the image token; videos and the vision start/end markers need the same."""
        media = media_token_ids(self.processing_class).tolist()
        suppressed = sorted(set(self.generation_kwargs.get("suppress_tokens") or []) | set(media))
        self.generation_kwargs["suppress_tokens"] = suppressed
        self.generation_config.suppress_tokens = suppressed

    # --- rollouts -------------------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.model.training and self.rollout.dynamic_sampling:
            return self._dynamic_sampling(inputs)
        return self._scored_rollout(inputs)

    def _scored_rollout(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One TRL rollout (generate, score, old/reference log-probs), with the rows' media decoded."""
        if self._is_vlm and any(row.get("prompt_images") or row.get("prompt_videos") for row in inputs):
            inputs = [{**row, "prompt": self._decoded_prompt(row)} for row in inputs]
        try:
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                self.generated_tokens += int(self.accelerator.gather(output["completion_mask"].sum()).sum())
            if self._forward_media is not None:
                output["prompt_media"] = self._forward_media
        finally:
            self._forward_media = None
        return output

    def _decoded_prompt(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        video_processor = getattr(self.processing_class, "video_processor", None)
        return messages_with_media(
            row["prompt"],
            row.get("prompt_images"),
            row.get("prompt_videos"),
            row.get("source", "prompt"),
            fps=self.prompt_data.fps if self.prompt_data else 2.0,
            max_frames=self.prompt_data.max_frames if self.prompt_data else 16,
            # The Qwen-VL video processors reject clips shorter than one temporal patch.
            min_frames=getattr(video_processor, "temporal_patch_size", None) or 1,
        )

    def _tokenize_prompts(self, prompts: list):
        if not self._has_decoded_media(prompts):
            return super()._tokenize_prompts(prompts)
        encoded = encode_prompts(self.processing_class, prompts)
        # The processor pads on its tokenizer's side; TRL wants each prompt's ids unpadded.
        keep = encoded["attention_mask"].bool()
        prompt_ids = [ids[row].tolist() for ids, row in zip(encoded["input_ids"], keep, strict=True)]
        media = _split_media_per_row(encoded, prompts, keep)
        self._forward_media = media
        fields = {key: value for key, value in encoded.items() if key not in ("input_ids", "attention_mask")}
        if _TOKEN_TYPES in fields:  # per-token: unpadded lists, which TRL left-pads with the ids
            fields[_TOKEN_TYPES] = [entry[_TOKEN_TYPES] for entry in media]
        # No `images` for TRL's forward (it would re-encode them, images only); ours carries `prompt_media`.
        # vLLM rollouts take the images themselves (videos are refused when the trainer is built).
        images = [_images_of(prompt) or None for prompt in prompts] if self.use_vllm else None
        return prompt_ids, images, fields

    @staticmethod
    def _has_decoded_media(prompts: list) -> bool:
        return any(
            isinstance(message.get("content"), list)
            and any(part.get("type") in ("image", "video") for part in message["content"])
            for prompt in prompts
            if isinstance(prompt, list)
            for message in prompt
        )

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        if self.greedy_eval and not self.model.training:
            with self._greedy_generation():
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
        group = _repeat_length(prompt_ids)
        if (
            not self.rollout.shared_prompt
            or group < 2
            or max(map(len, prompt_ids)) < 2  # nothing to prefill before the last token
            or self.use_vllm
            or self.use_transformers_continuous_batching
            or self.tools
        ):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        return self._shared_prompt_rollout(prompt_ids, group)

    @contextlib.contextmanager
    def _greedy_generation(self) -> Iterator[None]:
        """TRL samples in evaluation too; `[eval] greedy` answers with the most likely tokens."""
        sampling = self.generation_config
        self.generation_config = copy.deepcopy(sampling)
        self.generation_config.update(do_sample=False, temperature=None, top_p=None, top_k=None, min_p=None)
        try:
            yield
        finally:
            self.generation_config = sampling

    def _shared_prompt_rollout(self, prompt_ids: list[list[int]], group: int):
        """Prefill each distinct prompt once, then sample its `group` completions from copies of its cache.

        The prefill is HF `generate` itself on the prompts minus their last token (so positions, padding
        and multimodal RoPE are computed exactly as in TRL's path); the expanded cache then continues from
        the last prompt token. Greedy completions equal TRL's token for token.
        """
        device = self.accelerator.device
        firsts = list(range(0, len(prompt_ids), group))
        unique = [torch.tensor(prompt_ids[i]) for i in firsts]
        pad_id = self._tokenizer.pad_token_id
        ids = pad(
            unique, padding_value=pad_id, padding_side="left", pad_to_multiple_of=self.pad_to_multiple_of
        )
        mask = pad(
            [torch.ones_like(t) for t in unique],
            padding_value=0,
            padding_side="left",
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        ids, mask = ids.to(device), mask.to(device)
        media = {}
        if self._forward_media is not None:  # this batch's prompt media, one entry per row
            media = _batch_media([self._forward_media[i] for i in firsts], ids.size(1), ids.size(1), device)
        prefix_media = {k: v[:, :-1] if k == _TOKEN_TYPES else v for k, v in media.items()}
        with (
            profiling_context(self, "transformers.generate"),
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            prefill = model.generate(
                input_ids=ids[:, :-1],
                attention_mask=mask[:, :-1],
                **prefix_media,
                generation_config=self.generation_config,
                max_new_tokens=1,
                min_new_tokens=0,  # the user's minimum applies to the completions, not to this prefill
                return_dict_in_generate=True,
            )
            cache = prefill.past_key_values
            cache.batch_repeat_interleave(group)
            # The multimodal RoPE offsets, per row, sit on the VLM's inner model (below PEFT's wrapper, if any).
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            language_model = getattr(base, "model", None)
            if getattr(language_model, "rope_deltas", None) is not None:
                language_model.rope_deltas = language_model.rope_deltas.repeat_interleave(group, dim=0)
            rest = (
                {_TOKEN_TYPES: media[_TOKEN_TYPES].repeat_interleave(group, dim=0)}
                if _TOKEN_TYPES in media
                else {}
            )
            sequences = model.generate(
                input_ids=ids.repeat_interleave(group, dim=0),
                attention_mask=mask.repeat_interleave(group, dim=0),
                past_key_values=cache,
                **rest,
                generation_config=self.generation_config,
            )
        completion_ids = sequences[:, ids.size(1) :]
        return _until_eos(completion_ids, self.eos_token_ids), None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # Logged prompts keep their media placeholders, not the decoded frames (not serialisable).
        prompts = self._logs["prompt"]
        self._logs["prompt"] = type(prompts)((_placeholders(p) for p in prompts), maxlen=prompts.maxlen)
        if self.model.training:
            logs["generated_tokens"] = self.generated_tokens
        super().log(logs, start_time)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards_per_func
        return rewards_per_func

    # --- log-probs with the prompt media --------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        with self._media_for_forward(inputs.get("prompt_media")):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    @contextlib.contextmanager
    def _media_for_forward(self, media: list[dict[str, Any]] | None) -> Iterator[None]:
        previous, self._forward_media = self._forward_media, media
        try:
            yield
        finally:
            self._forward_media = previous

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **image_inputs,
    ):
        media = self._forward_media
        if media is None:
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **image_inputs,
            )
        # TRL's loop, with each chunk's rows' media (TRL's takes images only).
        batch_size = batch_size or input_ids.size(0)
        prompt_length = input_ids.size(1) - logits_to_keep
        logps, entropies, aux_losses = [], [], []
        for start in range(0, input_ids.size(0), batch_size):
            end = min(start + batch_size, input_ids.size(0))
            ids = input_ids[start:end]
            inputs = {
                "input_ids": ids,
                "attention_mask": attention_mask[start:end],
                **_batch_media(media[start:end], prompt_length, ids.size(1), ids.device),
            }
            if compute_aux_loss:
                inputs["output_router_logits"] = True
            labels = ids.masked_fill(attention_mask[start:end] == 0, -100)
            labels[:, :-logits_to_keep] = -100
            with self.accelerator.autocast():
                outputs = model(**inputs, labels=labels, fused_lm_head=True)
            logps.append(outputs.log_probs[:, -logits_to_keep:])
            if compute_entropy:
                entropies.append(outputs.entropy[:, -logits_to_keep:])
            if compute_aux_loss:
                aux_losses.append(outputs.aux_loss)
        return (
            torch.cat(logps),
            torch.cat(entropies) if compute_entropy else None,
            torch.stack(aux_losses).mean() if compute_aux_loss else None,
        )

    # --- resume --------------------------------------------------------------------------------------------

    def _get_train_sampler(self, dataset=None) -> EpochSeededRepeatSampler:
        trl = super()._get_train_sampler(dataset)
        self._train_sampler = EpochSeededRepeatSampler(
            trl.data_source, trl.mini_repeat_count, trl.batch_size, trl.repeat_count, trl.shuffle, trl.seed
        )
        return self._train_sampler

    def get_train_dataloader(self):
        dataloader = super().get_train_dataloader()
        sampler = getattr(self, "_train_sampler", None)
        if sampler is not None and hasattr(dataloader, "set_sampler"):
            # As accelerate links its own seedable sampler: with several processes `set_epoch` then reaches
            # ours through the BatchSamplerShard, also from the loader that skips a resumed epoch's batches.
            dataloader.set_sampler(sampler)
        return dataloader

    def _save_extra_state(self, checkpoint: Path) -> None:
        """TRL restarts its micro-step counter at 0 on resume and regenerates when its rollout buffer is empty:
        a checkpoint inside a generation cycle (`steps_per_generation` or `num_iterations` > 1) would
        resume on a fresh rollout, out of phase. Keep the counter, and the buffer while it is still in use."""
        super()._save_extra_state(checkpoint)
        inside_cycle = self._step % (self.args.steps_per_generation * self.num_iterations) != 0
        state = {
            "step": self._step,
            "buffer": self._buffered_inputs if inside_cycle else None,
            "generated_tokens": self.generated_tokens,
        }
        torch.save(state, checkpoint / _ROLLOUT_STATE.format(self.accelerator.process_index))

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / _ROLLOUT_STATE.format(self.accelerator.process_index)
        if path.is_file():  # absent from checkpoints of earlier versions: resumed as TRL resumes
            state = torch.load(path, map_location=self.accelerator.device, weights_only=True)
            self._step, self._buffered_inputs = state["step"], state["buffer"]
            self.generated_tokens = state.get("generated_tokens", 0)

    # --- dynamic sampling (DAPO) -----------------------------------------------------------------------

    def _dynamic_sampling(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Keep the groups whose rewards differ; sample fresh prompts until the batch is full of them, for at most
        `max_resample_rounds` extra rounds (then stop: padding with zero-spread groups would put their tokens in
        the loss's denominator, which DAPO never does).

        Groups stay on their process (the config checks the local batch holds whole groups), and every
        process runs the same number of rounds, since each rollout gathers rewards across processes.
        """
        size = self.num_generations
        wanted = len(inputs) // size
        informative: list[tuple[dict[str, Any], list[int]]] = []
        rounds, dropped, batch = 0, 0, inputs
        while True:
            output = self._scored_rollout(batch)
            spread = self._group_has_spread(len(batch))
            informative += [
                (output, list(range(group * size, (group + 1) * size)))
                for group, has_spread in enumerate(spread.tolist())
                if has_spread
            ]
            dropped += int((~spread).sum())
            short = torch.tensor([max(0, wanted - len(informative))], device=self.accelerator.device)
            short_total = int(self.accelerator.gather(short).sum().item())
            if short_total == 0:
                break
            if rounds == self.rollout.max_resample_rounds:
                raise RunError(
                    f"[rollout] dynamic_sampling: after {rounds} extra rounds at step {self.state.global_step}, "
                    f"{short_total} of the batch's {wanted * self.accelerator.num_processes} groups still lack "
                    "reward spread (every answer to their prompts scores the same): raise "
                    "[rollout] max_resample_rounds, or make the prompts or rewards tell answers apart"
                )
            rounds += 1
            batch = self._fresh_groups(wanted, rounds)
        merged = _merge_rollouts(informative[:wanted], self._tokenizer.pad_token_id)
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        # Totals over every process (each rank logs its own values otherwise).
        dropped_total = self.accelerator.gather(torch.tensor([dropped], device=self.accelerator.device)).sum()
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/dropped_groups"].append(float(dropped_total.item()))
        metrics["dynamic_sampling/extra_rounds"].append(float(rounds))
        return merged

    def _group_has_spread(self, rows: int) -> torch.Tensor:
        """Per local group: do its (weighted, summed) rewards differ? Computed as TRL computes advantages."""
        rewards = (self._last_rewards * self.reward_weights.to(self._last_rewards.device)).nansum(dim=1)
        index = self.accelerator.process_index
        local = rewards[index * rows : (index + 1) * rows].view(-1, self.num_generations)
        std = local.std(dim=1)
        return ~torch.isclose(std, torch.zeros_like(std))

    def _fresh_groups(self, groups: int, round_index: int) -> list[dict[str, Any]]:
        """`groups` prompts drawn from the dataset (seeded by step, round and process, so a resumed run draws
        the same), each repeated `num_generations` times as TRL's sampler does."""
        seed = hash((self.args.seed, self.state.global_step, round_index, self.accelerator.process_index))
        generator = torch.Generator().manual_seed(seed % (2**63))
        picks = torch.randint(len(self.train_dataset), (groups,), generator=generator).tolist()
        return [dict(self.train_dataset[i]) for i in picks for _ in range(self.num_generations)]


def _repeat_length(prompt_ids: list[list[int]]) -> int:
    """K when the prompts come as runs of K identical prompts (TRL's sampler repeats each K times), else 1."""
    first = prompt_ids[0]
    group = next((i for i, ids in enumerate(prompt_ids) if ids != first), len(prompt_ids))
    if len(prompt_ids) % group:
        return 1
    for start in range(0, len(prompt_ids), group):
        if any(prompt_ids[i] != prompt_ids[start] for i in range(start, start + group)):
            return 1
    return group


def _until_eos(completion_ids: torch.Tensor, eos_token_ids: list[int]) -> list[list[int]]:
    """Each row's tokens up to and including its first EOS (TRL's rule for its generate path)."""
    rows = []
    for row in completion_ids.cpu().tolist():
        end = next((i for i, token in enumerate(row) if token in eos_token_ids), len(row) - 1)
        rows.append(row[: end + 1])
    return rows


def _split_media_per_row(encoded, prompts: list, keep: torch.Tensor) -> list[dict[str, Any]]:
    """The processor's batch tensors cut into one dict per prompt (patch rows by their grids)."""
    counts = {
        key: [sum(part.get("type") == kind for m in p for part in _parts(m)) for p in prompts]
        for key, kind in (("pixel_values", "image"), ("pixel_values_videos", "video"))
    }
    rows: list[dict[str, Any]] = [{} for _ in prompts]
    for key, grid_key in _PATCH_ROWS.items():
        if key not in encoded:
            continue
        grids = encoded[grid_key]
        patches = grids.prod(dim=-1).tolist()
        item = patch = 0
        for row, count in enumerate(counts[key]):
            span = sum(patches[item : item + count])
            rows[row][key] = encoded[key][patch : patch + span]
            rows[row][grid_key] = grids[item : item + count]
            item, patch = item + count, patch + span
    if _TOKEN_TYPES in encoded:
        for row, (types, mask) in enumerate(zip(encoded[_TOKEN_TYPES], keep, strict=True)):
            rows[row][_TOKEN_TYPES] = types[mask].tolist()
    unknown = set(encoded) - {
        "input_ids",
        "attention_mask",
        _TOKEN_TYPES,
        *_PATCH_ROWS,
        *_PATCH_ROWS.values(),
    }
    if unknown:
        raise DataError(
            f"GRPO prompt media: the processor returned {sorted(unknown)}, which cosmos-train cannot split per prompt yet"
        )
    return rows


def _placeholders(prompt: Any) -> Any:
    """A chat prompt with its decoded media parts back to bare placeholders."""
    if not isinstance(prompt, list):
        return prompt
    return [
        {
            **message,
            "content": [{"type": p["type"]} if p.get("type") in ("image", "video") else p for p in parts],
        }
        if isinstance(parts := message.get("content"), list)
        else message
        for message in prompt
    ]


def _images_of(prompt: list[dict[str, Any]]) -> list:
    return [part["image"] for message in prompt for part in _parts(message) if part.get("type") == "image"]


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _batch_media(
    media: list[dict[str, Any]], prompt_length: int, length: int, device
) -> dict[str, torch.Tensor]:
    """Model inputs for a chunk of rows: patch tensors concatenated, token types placed like the prompts
    (left-padded to `prompt_length`, zeros over the completion)."""
    inputs: dict[str, torch.Tensor] = {}
    for key in (*_PATCH_ROWS, *_PATCH_ROWS.values()):
        pieces = [row[key] for row in media if key in row and len(row[key])]
        if pieces:
            inputs[key] = torch.cat(pieces).to(device)
    if any(_TOKEN_TYPES in row for row in media):
        types = torch.zeros(len(media), length, dtype=torch.long, device=device)
        for index, row in enumerate(media):
            values = row.get(_TOKEN_TYPES, [])
            if values:
                types[index, prompt_length - len(values) : prompt_length] = torch.tensor(
                    values, device=device
                )
        inputs[_TOKEN_TYPES] = types
    return inputs


# Rollout tensors and how they pad when rollouts are merged: prompts on the left, completions on the right.
_LEFT = {"prompt_ids", "prompt_mask"}


def _merge_rollouts(chosen: list[tuple[dict[str, Any], list[int]]], pad_token_id: int) -> dict[str, Any]:
    """One rollout from rows of several (dynamic sampling), re-padded to a common width."""
    keys = [key for key in chosen[0][0] if key != "num_items_in_batch"]
    merged: dict[str, Any] = {}
    for key in keys:
        values = [(output[key], rows) for output, rows in chosen]
        if isinstance(values[0][0], list):
            merged[key] = [value[i] for value, rows in values for i in rows]
            continue
        pieces = [value[rows] for value, rows in values]
        if pieces[0].dim() == 1 or all(p.size(1) == pieces[0].size(1) for p in pieces):
            merged[key] = torch.cat(pieces)
            continue
        fill = pad_token_id if key.endswith("_ids") else 0
        side = "left" if key in _LEFT else "right"
        merged[key] = pad([row for piece in pieces for row in piece], padding_value=fill, padding_side=side)
    return merged


def run_grpo(job: Job, callbacks: list | None = None) -> CosmosGRPOTrainer:
    """Run a GRPO job (from `cosmos_train.jobs.read_job`); the final model is in `job.args.output_dir`."""
    trainer = build_grpo_trainer(job, callbacks)
    train_and_save(trainer, job, trainer.processing_class)
    return trainer


def build_grpo_trainer(job: Job, callbacks: list | None = None) -> CosmosGRPOTrainer:
    """The job's rewards, model, prompts and trainer, ready to train (rewards first: they fail fastest)."""
    config = job.config
    if job.args.use_vllm:
        from trl.import_utils import is_vllm_available

        if not is_vllm_available():
            raise ConfigError(
                f"{job.source}: [train] use_vllm needs vLLM on a GPU machine (pip install vllm)"
            )
    rewards = build_rewards(
        config.reward_specs(),
        train={"max_completion_length": job.args.max_completion_length},
        search_path=Path(job.source).resolve().parent,
    )
    loaded = load_model(config.model)
    dataset, report = load_prompts(config.data)
    logger.info("training on %d prompts (%d skipped)", report.kept, report.skipped)
    held_out = None
    if config.eval is not None:
        held_out, report = load_prompts(config.eval)
        logger.info("evaluating on %d held-out prompts (%d skipped)", report.kept, report.skipped)
    if not loaded.is_vision_language:
        dataset = _text_only(dataset)
        held_out = held_out if held_out is None else _text_only(held_out)
    elif job.args.use_vllm and any(videos for videos in dataset["prompt_videos"]):
        raise ConfigError(
            f"{job.source}: [train] use_vllm: TRL's vLLM rollouts take images only, and {config.data.path} has "
            "video prompts; set use_vllm = false (transformers generation, with [rollout] shared_prompt)"
        )
    return CosmosGRPOTrainer(
        model=loaded.model,
        reward_funcs=rewards,
        args=job.args,
        train_dataset=dataset,
        eval_dataset=held_out,
        processing_class=loaded.processing_class,
        peft_config=lora_config(config.lora, loaded.is_vision_language) if config.lora else None,
        callbacks=callbacks,
        data=config.data,
        rollout=config.rollout,
        greedy_eval=config.eval is not None and config.eval.greedy,
    )


def _text_only(dataset):
    """Chat prompts as plain-string messages for a text LM; media are an error naming the record."""
    from ...data import to_text_messages

    if isinstance(dataset[0]["prompt"], str):
        return dataset
    for row in dataset:
        if row["prompt_images"] or row["prompt_videos"]:
            raise DataError(f"{row['source']}: has media but the model is text-only")
    return dataset.map(lambda row: {"prompt": to_text_messages(row["prompt"], row["source"])})
