"""Closed-loop RL of a Cosmos3 policy (`kind = "policy-rl"`): DiffusionNFT, FlowGRPO or DDRL on the outcomes of the
policy's own episodes in a gymnasium environment, on transformers' `Trainer`.

The story of a rollout (`PolicyRLTrainer._prepare_inputs`), told as the prompt-based RL kinds tell theirs:
1. episodes: per start state of the batch, K episodes, each in its own copy of the environment (worker processes,
   `environments.py`); at every re-plan the policy samples every running episode's chunk in one batch
   (`policy.py`): DiffusionNFT's old policy on the flow ODE, or FlowGRPO's (and DDRL's) current policy with the SDE
   on the action tokens, keeping its states and log-probs. Each policy call is kept with its clean sample;
2. score: each episode's success, progress and return, weighted (`[reward]`), become advantages per start state
   as per prompt (`group_advantages`); every call of an episode carries its episode's advantage;
3. micro-batches: `train_samples` calls, as many from each episode, in chunks of `train_batch_size`,
   each at the algorithm's training levels (NFT: random noise levels of the grid, the loss `nft_loss` on the action
   tokens, optionally the generated frames; FlowGRPO: each trained SDE step, the clipped ratio `clipped_policy_loss`
   plus the KL `step_kl`; DDRL: FlowGRPO's term plus the data term on demonstration windows, `data_loss`);
4. the weight copies (NFT's old policy, the EMA, the KL reference), checkpoints and exports are the diffusion
   trainers' own (`DiffusionTrainer`); the export is a policy (`Cosmos3ActionPolicy.from_pretrained` loads it).
`[eval]` runs held-out starts deterministically (Euler on the ODE, each episode's noise fixed), with the EMA weights
when kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from ...diffusion.sampling import gaussian_log_prob, sde_mean, sde_std_t
from ...diffusion.weights import OldPolicy, ParameterCopy
from ...jobs import Job
from ..common import train_and_save
from ..ddrl.loss import edm_data_loss
from ..diffusion.trainer import DiffusionTrainer, load_for_training
from ..diffusion_rl.advantages import group_advantages_across
from ..diffusion_rl.trainer import RolloutPrompts, frozen_base
from ..flow_grpo.loss import clipped_policy_loss, step_kl
from ..flow_grpo.trainer import draw_sde_steps
from ..nft.loss import nft_loss, optimality_probability
from .demonstrations import Demonstrations, stacked
from .environments import Episode, run_episodes, vector_env
from .policy import CosmosPolicy

logger = logging.getLogger(__name__)


def seeds_batch(items: list[int]) -> dict:
    return {"seeds": list(items)}


def shared_initial_noise(seeds: list[int]):
    """FlowGRPO's `same_latent` in closed loop: the episodes of one start draw the initial noise of their n-th policy
    call from the same generator, so they differ only by the SDE's noise, the part its log-probs credit. The rollout's
    key comes from the global RNG (a resumed run draws the same). -> episodes -> [generator per episode]."""
    key = int(torch.randint(0, 2**31 - 1, ()).item())
    calls_made: dict[int, int] = defaultdict(int)

    def generators(episodes) -> list[torch.Generator]:
        chosen = []
        for episode in episodes.tolist():
            start, call = seeds[episode], calls_made[episode]  # one wave: an episode per copy
            calls_made[episode] += 1
            chosen.append(torch.Generator().manual_seed((key * 1_000_003 + start) * 1_009 + call))
        return chosen

    return generators


class PolicyRLTrainer(DiffusionTrainer):
    def __init__(
        self, adapter, config, policy: CosmosPolicy, envs, args, lora=None, demonstrations=None, **kwargs
    ):
        self.config, self.policy, self.envs = config, policy, envs
        self.algorithm = config.rl.algorithm
        self.section = config.algorithm_section()
        # FlowGRPO and DDRL sample the current policy with the SDE and train its steps' log-probs.
        self.on_sde = self.algorithm != "nft"
        self.demonstrations: Demonstrations | None = demonstrations  # DDRL's data
        updates = config.rollout.updates_per_rollout
        ema_every = self.section.ema_every if self.on_sde else 1
        super().__init__(
            adapter,
            train_dataset=RolloutPrompts(config.rollout.seeds, args, updates),
            data_collator=seeds_batch,
            args=args,
            lora=lora,
            ema_decay=config.ema_decay(),
            ema_warmup=config.ema_warmup(),
            ema_every=ema_every,
            weight_copies=config.weight_copies(),
            **kwargs,
        )
        self.reference_copy = None
        if "reference" in config.weight_copies():
            self.reference_copy = self.keep(ParameterCopy(adapter.transformer), "reference")
        self.old_policy = None
        if self.algorithm == "nft":
            self.old_policy = self.keep_updated(
                OldPolicy(adapter.transformer, self.section.decay_type), lambda step: step % updates == 0
            )
        self.group_size = config.rollout.samples_per_start
        self.sigmas = policy.sigmas(config.rollout.sampling_steps)
        self.execute = config.env.execute or policy.settings.chunk_size
        self.micro_batches_per_rollout = config.micro_batches_per_update() * updates
        self._buffer: list[dict] = []
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self.env_steps_done = 0  # training episodes' environment steps so far (the evaluations' not counted)
        if config.eval is not None:
            self.add_callback(PolicyEvaluation(self, config.eval))

    # --- 1. episodes ----------------------------------------------------------------------------------------

    def _prepare_inputs(self, inputs: dict) -> dict:
        if not self._buffer:
            seeds = [seed for seed in inputs["seeds"] for _ in range(self.group_size)]
            calls, episodes = self.rollout(seeds)
            advantages = self.advantages(episodes)
            self._buffer = self.micro_batches(calls, advantages)
            if len(self._buffer) != self.micro_batches_per_rollout:
                raise RuntimeError(
                    f"{len(self._buffer)} micro-batches, but the job's gradient accumulation expects "
                    f"{self.micro_batches_per_rollout}"
                )
        return self._buffer.pop(0)

    def sampling_weights(self):
        """DiffusionNFT samples with its old policy; FlowGRPO with the current weights."""
        return self.old_policy.swapped_in() if self.old_policy is not None else contextlib.nullcontext()

    def rollout(self, seeds: list[int]) -> tuple[list[dict], list[Episode]]:
        """K episodes per start, one per copy of the environment (one wave); every policy call kept with the episode
        (its copy's row) it belongs to."""
        if len(seeds) != self.envs.num_envs:
            raise ValueError(f"{len(seeds)} episodes for {self.envs.num_envs} copies of the environment")
        calls: list[dict] = []
        on_sde = self.on_sde
        noise_level = self.section.noise_level if on_sde else None
        initial_noise = shared_initial_noise(seeds) if on_sde and self.section.same_latent else None
        # Every policy call of the rollout samples its SDE on the same steps (all, or FlowGRPO-Fast's window).
        sde_steps = draw_sde_steps(self.section, len(self.sigmas) - 1) if on_sde else None

        def act(observations, tasks, rows, episodes):
            inputs = self.policy_inputs(observations, tasks, rows)
            sample = self.policy.sample(
                self.adapter.transformer,
                inputs,
                self.sigmas,
                noise_level=noise_level,
                keep_trajectory=on_sde,
                initial_noise=initial_noise(episodes) if initial_noise else None,
                sde_steps=sde_steps,
            )
            for index, row in enumerate(rows):
                call = {"row": int(row), "input": inputs[index], "latents": sample["latents"][index],
                        "actions": sample["actions"][index]}  # fmt: skip
                if on_sde:
                    call["states"] = [(v[index], a[index]) for v, a in sample["states"]]
                    call["log_probs"] = {step: lp[index] for step, lp in sample["log_probs"].items()}
                calls.append(call)
            return self.policy.to_env_units(sample["actions"])

        began = time.perf_counter()
        with self.sampling_weights():
            episodes = run_episodes(self.envs, seeds, act, self.config.env)
        self._metrics["rollout_seconds"].append(time.perf_counter() - began)
        self._metrics["policy_calls"].append(len(calls))
        self._metrics["env_steps"].append(sum(e.steps for e in episodes))
        self.env_steps_done += sum(e.steps for e in episodes)
        return calls, episodes

    def policy_inputs(self, observations: dict, tasks: list[str], rows) -> list:
        """The policy calls of the running copies `rows`, their frames encoded in one batch."""
        env = self.config.env
        states = [None] * len(rows)
        if self.policy.settings.use_state:
            states = [observations[env.state_key][row] for row in rows]
        frames = [np.asarray(observations[env.image_key][row]) for row in rows]
        return self.policy.calls(frames, tasks, states)

    # --- 2. scores and advantages -----------------------------------------------------------------------------

    def score(self, episodes: list[Episode]) -> torch.Tensor:
        weights = self.config.reward
        complete = weights.success_completes_progress
        scores = torch.tensor(
            [
                weights.success_weight * e.success
                + weights.progress_weight * (1.0 if complete and e.success else (e.progress or 0.0))
                + weights.return_weight * e.env_return
                - weights.length_weight * e.steps
                for e in episodes
            ],
            dtype=torch.float64,
        )
        self._metrics["reward"].append(scores.mean().item())
        self._metrics["success"].append(float(np.mean([e.success for e in episodes])))
        self._metrics["episode_length"].append(float(np.mean([e.steps for e in episodes])))
        if episodes and episodes[0].progress is not None:
            self._metrics["progress"].append(float(np.mean([e.progress for e in episodes])))
        return scores

    def advantages(self, episodes: list[Episode]) -> torch.Tensor:
        """Per episode: its score normalised within its start's K episodes (`group_advantages`). Logs how much a
        start's K episodes differ, which bounds what the advantages can tell: `mixed_starts` (the share of starts
        whose episodes disagree in success) and `start_score_std` (a start's scores' std, averaged over starts)."""
        scores = self.score(episodes)
        by_start = scores.view(-1, self.group_size)
        successes = torch.tensor([e.success for e in episodes]).view(-1, self.group_size)
        self._metrics["mixed_starts"].append((successes.any(1) & ~successes.all(1)).double().mean().item())
        self._metrics["start_score_std"].append(by_start.std(1, correction=0).mean().item())
        return group_advantages_across(
            self.accelerator, scores, self.group_size, self.section.global_std
        ).float()

    # --- 3. micro-batches -------------------------------------------------------------------------------------

    def chosen_calls(self, calls: list[dict], advantages: torch.Tensor) -> list[list[dict]]:
        """`train_samples` of the rollout's calls, in chunks of `train_batch_size`: the same number from every episode
        (the rest from episodes drawn at random), a call drawn at random within its episode. Drawing calls uniformly
        instead would weigh an episode by its length, and failed episodes run longer: the advantages of a start's
        K episodes sum to 0, their calls' would not, and DiffusionNFT's negative term would push the policy off its
        own samples. FlowGRPO with `drop_zero_advantage` draws from the episodes whose advantage is not 0."""
        by_episode: dict[int, list[dict]] = defaultdict(list)
        for call in calls:
            by_episode[call["row"]].append(call)
        episodes = sorted(by_episode)
        if self.on_sde and self.section.drop_zero_advantage:
            informative = [e for e in episodes if advantages[e] != 0]
            self._metrics["trained_fraction"].append(len(informative) / max(len(episodes), 1))
            episodes = informative or episodes
        wanted = self.config.rollout.train_samples
        each, rest = divmod(wanted, len(episodes))
        drawn = [e for e in episodes for _ in range(each)]
        drawn += [episodes[i] for i in torch.randperm(len(episodes))[:rest].tolist()]
        chosen = [by_episode[e][int(torch.randint(len(by_episode[e]), ()))] for e in drawn]
        chosen = [chosen[i] for i in torch.randperm(len(chosen)).tolist()]
        size = self.config.rollout.train_batch_size
        return [chosen[i : i + size] for i in range(0, wanted, size)]

    def micro_batches(self, calls: list[dict], advantages: torch.Tensor) -> list[dict]:
        batches = []
        levels = len(self.sigmas) - 1
        steps = self.config.train_timesteps()
        if self.on_sde:
            # The trained steps, or FlowGRPO-Fast's: the window the rollout drew, the steps with log-probs.
            trained_steps = self.section.trained_steps(levels) or sorted(calls[0]["log_probs"])
        device = calls[0]["latents"].device  # the policy's: its calls' tensors stay there
        sigmas = torch.tensor(self.sigmas[:levels], dtype=torch.float32, device=device)
        for chunk in self.chosen_calls(calls, advantages):
            chunk_advantages = torch.stack([advantages[call["row"]] for call in chunk]).to(device)
            common = {
                "inputs": [call["input"] for call in chunk],
                "advantages": chunk_advantages,
            }
            if self.algorithm == "nft":
                x0 = torch.stack([call["latents"] for call in chunk])
                a0 = torch.stack([call["actions"] for call in chunk])
                r = optimality_probability(chunk_advantages, self.section.adv_clip_max, self.section.adv_mode)
                chosen = torch.rand(len(chunk), levels).argsort(dim=1)[:, :steps].to(device)
                for slot in range(steps):
                    batches.append(common | {
                        "x0": x0, "a0": a0, "r": r, "sigmas": sigmas[chosen[:, slot]],
                        "noise": torch.randn_like(x0), "action_noise": torch.randn_like(a0),
                    })  # fmt: skip
            else:
                for step in trained_steps:
                    batches.append(common | {
                        "step": step,
                        "latents": torch.stack([call["states"][step][0] for call in chunk]),
                        "actions": torch.stack([call["states"][step][1] for call in chunk]),
                        "next_actions": torch.stack([call["states"][step + 1][1] for call in chunk]),
                        "old_log_prob": torch.stack([call["log_probs"][step] for call in chunk]),
                    } | self.data_batch())  # fmt: skip
        return batches

    # --- the losses ---------------------------------------------------------------------------------------------

    def action_part(self, actions: torch.Tensor) -> torch.Tensor:
        """The trained action tokens: rows past the state row (the executed ones alone with
        `[rl] executed_actions_only`), channels up to the raw width."""
        first = self.policy.first_action_row
        stop = first + self.execute if self.config.rl.executed_actions_only else None
        return actions[:, first:stop, : self.policy.settings.raw_action_dim]

    def reference(self):
        return frozen_base(self.adapter.transformer, self.reference_copy)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = self.nft_loss(model, inputs) if self.algorithm == "nft" else self.flow_grpo_loss(model, inputs)
        if "data" in inputs:
            data = self.data_loss(model, inputs["data"], self.sigmas[inputs["step"]])
            self._metrics["data_loss"].append(data.item())
            loss = loss + self.section.data_beta * data
        return (loss, None) if return_outputs else loss

    def nft_loss(self, model, inputs) -> torch.Tensor:
        policy, nft = self.policy, self.section
        calls, sigmas, x0, a0 = inputs["inputs"], inputs["sigmas"], inputs["x0"], inputs["a0"]
        latents, actions = policy.noisy(x0, a0, sigmas, inputs["noise"], inputs["action_noise"])
        packed = policy.pack(calls, latents, actions, sigmas)  # one input for the three predictions
        # The frozen predictions first: swapping weights after the trained forward would touch its graph.
        with torch.no_grad():
            with self.old_policy.swapped_in():
                v_old, a_old = policy.velocities(
                    self.adapter.transformer, calls, latents, actions, sigmas, packed
                )
            a_reference = None
            if nft.kl_beta > 0:
                with self.reference() as reference:
                    a_reference = policy.velocities(reference, calls, latents, actions, sigmas, packed)[1]
        v_theta, a_theta = policy.velocities(model, calls, latents, actions, sigmas, packed)
        part = self.action_part
        loss = nft_loss(part(a_theta), part(a_old), part(actions), part(a0), sigmas, inputs["r"], nft.beta,
                        nft.adv_clip_max)  # fmt: skip
        self._metrics["policy_loss"].append(loss.item())
        video_weight = self.config.rl.video_loss_weight
        if video_weight:
            frames = (slice(None), slice(None), slice(1, None))  # the generated frames (0 is the clean one)
            video = nft_loss(v_theta[frames], v_old[frames], latents[frames], x0[frames], sigmas, inputs["r"],
                             nft.beta, nft.adv_clip_max)  # fmt: skip
            self._metrics["video_loss"].append(video.item())
            loss = loss + video_weight * video
        if a_reference is not None:
            kl = ((part(a_theta) - part(a_reference)) ** 2).mean()
            self._metrics["kl"].append(kl.item())
            loss = loss + nft.kl_beta * kl
        return loss.float()

    def flow_grpo_loss(self, model, inputs) -> torch.Tensor:
        policy, algorithm = self.policy, self.section
        step, calls = inputs["step"], inputs["inputs"]
        sigma, sigma_next = self.sigmas[step], self.sigmas[step + 1]
        latents, actions = inputs["latents"], inputs["actions"]
        levels = torch.full((len(calls),), sigma)
        std_t = sde_std_t(sigma, algorithm.noise_level, self.sigmas[1])
        part = self.action_part
        mean_reference = None
        packed = policy.pack(calls, latents, actions, levels)  # one input for both predictions
        if algorithm.kl_beta > 0:
            with torch.no_grad(), self.reference() as reference:
                a_reference = policy.velocities(reference, calls, latents, actions, levels, packed)[1]
                mean_reference = sde_mean(part(actions), part(a_reference), sigma, sigma_next, std_t)
        a_theta = policy.velocities(model, calls, latents, actions, levels, packed)[1]
        mean = sde_mean(part(actions), part(a_theta), sigma, sigma_next, std_t)
        log_prob = gaussian_log_prob(
            part(inputs["next_actions"]), mean, std_t * math.sqrt(sigma - sigma_next)
        )
        a_max = algorithm.adv_clip_max
        advantages = inputs["advantages"].double().clamp(-a_max, a_max)
        loss, stats = clipped_policy_loss(
            log_prob, inputs["old_log_prob"].double(), advantages, algorithm.clip_range
        )
        for key, value in stats.items():
            self._metrics[key].append(value)
        self._metrics["policy_loss"].append(loss.item())
        if mean_reference is not None:
            kl = step_kl(mean, mean_reference, std_t, sigma_next - sigma, algorithm.kl_form)
            self._metrics["kl"].append(kl.item())
            loss = loss + algorithm.kl_beta * kl
        return loss.float()

    def data_batch(self) -> dict:
        """DDRL: the micro-batch's demonstration windows (`[ddrl] data_batch_size`, drawn at random; else nothing).
        Every process draws the same indexes from its global RNG (the same on all, and in a resumed run), each moved
        by its own share of the windows, so that the processes train on different windows."""
        if self.demonstrations is None:
            return {}
        accelerator = self.accelerator
        shift = accelerator.process_index * len(self.demonstrations) // accelerator.num_processes
        return {"data": stacked(self.demonstrations.draw(self.section.data_batch_size, shift))}

    def data_loss(self, model, data, sigma: float) -> torch.Tensor:
        """DDRL's data term on demonstrations (`edm_data_loss`, cosmos-rl's EDM-weighted flow-matching loss) at the
        trained step's level `sigma` (its `use_rl_sigma_and_noise`; fresh noise): on the action rows past the state
        row and their raw channels, plus on the future frames (frame 0 is clean), as action-sft trains both."""
        calls, x0, a0 = data
        sigmas = torch.full((len(calls),), float(sigma), device=x0.device)
        noise, action_noise = torch.randn_like(x0), torch.randn_like(a0)
        latents, actions = self.policy.noisy(x0, a0, sigmas, noise, action_noise)
        v_theta, a_theta = self.policy.velocities(model, calls, latents, actions, sigmas)
        rows = (
            slice(None),
            slice(self.policy.first_action_row, None),
            slice(None, self.policy.settings.raw_action_dim),
        )
        frames = (slice(None), slice(None), slice(1, None))
        return edm_data_loss(a_theta[rows], a0[rows], action_noise[rows], sigmas) + edm_data_loss(
            v_theta[frames], x0[frames], noise[frames], sigmas
        )

    # --- logs and exports ---------------------------------------------------------------------------------------

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if not any(key.startswith("eval/") for key in logs):
            for key, values in self._metrics.items():
                logs[key] = sum(values) / len(values)
            self._metrics.clear()
        super().log(logs, start_time)

    def export_extras(self, folder: Path, adapter) -> None:
        from ..action_sft.trainer import write_action_files

        record = self.policy.record
        units = {key: record.get(key) for key in ("normalization", "stats", "normalize_state")}
        units["normalization"] = units["normalization"] or "none"
        units["normalize_state"] = bool(units["normalize_state"])
        write_action_files(folder, adapter, self.policy.settings, units, self.lora is not None,
                           self.config.model.name_or_path)  # fmt: skip


class PolicyEvaluation(TrainerCallback):
    """`[eval]`: one episode per held-out start, sampled deterministically (Euler on the ODE, each episode its own
    noise, the same every time; the EMA weights when kept), before training (`on_start`), every `every` steps and at
    the end (and `curves.png`, train and held-out success per step). Logs `eval/success`, `eval/episode_length` (and
    `eval/progress`), and appends each point to `output_dir/eval.json` with the training environment steps and
    seconds (evaluations left out) that led to it."""

    def __init__(self, trainer: PolicyRLTrainer, section):
        self.trainer, self.section = trainer, section
        self.sigmas = trainer.policy.sigmas(section.sampling_steps)
        self.history: list[dict] = []
        self.started, self.evaluating, self.seconds_before = time.perf_counter(), 0.0, 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.evaluating, self.seconds_before = time.perf_counter(), 0.0, 0.0
        path = Path(args.output_dir) / "eval.json"
        if path.is_file():  # a resumed run continues its curve, and its counts
            self.history = [p for p in json.loads(path.read_text()) if p["step"] <= state.global_step]
            if self.history:
                self.trainer.env_steps_done = self.history[-1]["train_env_steps"]
                self.seconds_before = self.history[-1]["train_seconds"]
        if state.global_step == 0 and self.section.on_start:
            self.evaluate(0, args)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.section.every == 0:
            self.evaluate(state.global_step, args)

    def on_train_end(self, args, state, control, **kwargs):
        from ..diffusion_rl.evaluation import write_curves

        if not self.history or self.history[-1]["step"] != state.global_step:
            self.evaluate(state.global_step, args)
        if state.is_world_process_zero:
            curves = (("success", "train success (its episodes)"), ("eval/success", "held-out success"))
            write_curves(Path(args.output_dir) / "curves.png", state.log_history, curves, "success rate")

    @torch.no_grad()
    def episodes(self, envs) -> list[Episode]:
        """One deterministic episode per held-out start on `envs` (the EMA weights when kept)."""
        trainer = self.trainer
        # Each episode draws from its own generator: its noise, so its outcome, does not depend on which episodes
        # share its wave (how many copies of the environment run side by side).
        generators = {}

        def act(observations, tasks, rows, episodes):
            inputs = trainer.policy_inputs(observations, tasks, rows)
            for e in episodes.tolist():
                if e not in generators:  # an episode's first call
                    generators[e] = torch.Generator().manual_seed(self.section.seed * 1_000_003 + e)
            mine = [generators[e] for e in episodes.tolist()]
            sample = trainer.policy.sample(trainer.adapter.transformer, inputs, self.sigmas, generator=mine)
            return trainer.policy.to_env_units(sample["actions"])

        with trainer.weights_for_export():
            return run_episodes(envs, self.section.seeds, act, trainer.config.env)

    def evaluate(self, step: int, args) -> dict:
        trainer = self.trainer
        began = time.perf_counter()
        episodes = self.episodes(trainer.envs)
        point = {
            "step": step,
            "train_env_steps": trainer.env_steps_done,
            "train_seconds": round(self.seconds_before + began - self.started - self.evaluating, 2),
            "success": float(np.mean([e.success for e in episodes])),
            "episode_length": float(np.mean([e.steps for e in episodes])),
            "env_steps": int(sum(e.steps for e in episodes)),
        }
        if episodes[0].progress is not None:
            point["progress"] = float(np.mean([e.progress for e in episodes]))
        point["seconds"] = round(time.perf_counter() - began, 2)
        self.evaluating += time.perf_counter() - began
        self.history.append(point)
        if trainer.is_world_process_zero():
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            path = Path(args.output_dir) / "eval.json"
            temporary = path.with_suffix(".json.tmp")
            temporary.write_text(json.dumps(self.history, indent=1) + "\n")
            temporary.replace(path)
        trainer.log({f"eval/{k}": point[k] for k in ("success", "episode_length", "progress") if k in point})
        logger.info("eval at step %d: %s", step, point)
        return point


def policy_for(adapter, record: dict) -> CosmosPolicy:
    """The adapter's pipeline as a policy, with the adapter's reasoner cache where the reasoner is frozen (the
    generator and action heads train; a LoRA on the reasoner would change its keys and values)."""
    frozen = adapter.reasoner_frozen(adapter.transformer)
    return CosmosPolicy(adapter.pipeline, record, adapter.reasoner_cache if frozen else None)


def run_policy_rl(job: Job, callbacks: list | None = None) -> PolicyRLTrainer:
    """Run a `policy-rl` job; the trained policy is under `output_dir/safetensors/step_N/`."""
    from ...errors import ConfigError
    from ..action_sft.trainer import train_action_heads

    config = job.config
    record = CosmosPolicy.settings_record(config.model.name_or_path)
    adapter, lora = load_for_training(job)
    if adapter.pipeline_class != "Cosmos3OmniPipeline":
        raise ConfigError(
            f"{job.source}: [model] policy-rl trains Cosmos3 policies, not {adapter.pipeline_class}"
        )
    train_action_heads(adapter.transformer, fresh=False)
    policy = policy_for(adapter, record)
    execute = config.env.execute or policy.settings.chunk_size
    if execute > policy.settings.chunk_size:
        raise ConfigError(
            f"{job.source}: [env] execute {execute} is longer than the policy's chunk ({policy.settings.chunk_size})"
        )
    demonstrations = None
    if config.data is not None:
        demonstrations = Demonstrations(config.data, policy, f"{job.source}: [data]")
        logger.info("DDRL's data term: %d demonstration windows", len(demonstrations))
    count = config.starts_per_rollout(job.args) * config.rollout.samples_per_start
    envs = vector_env(config.env, Path(job.source).parent, count, execute)
    try:
        trainer = PolicyRLTrainer(adapter, config, policy, envs, job.args, lora=lora, callbacks=callbacks,
                                  demonstrations=demonstrations)  # fmt: skip
        train_and_save(trainer, job)
    finally:
        envs.close()
    return trainer
