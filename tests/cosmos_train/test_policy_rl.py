"""`cosmos-train policy-rl`: closed-loop RL of a Cosmos3 policy in a gymnasium environment.

The episodes are Reach2D's own (`domains.reach2d.env.rollout` is the reference they are compared with); FlowGRPO's
stored log-probs are recomputed at training under the same weights (ratio 1), and FlowGRPO-Fast's window takes its
steps with the SDE and the rest on the ODE; a run's export is a policy, and a run resumed from its checkpoint ends
bit-equal to one that was not stopped. The shipped base is the flawed expert's SFT policy
(`benchmarks/cosmos3_policy_rl.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from benchmark_helpers import load_benchmark, with_a_flipped_byte
from safetensors.torch import load_file
from sft_helpers import cli, cli_in_process

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "benchmarks" / "cosmos3_policy_rl" / "base"


def env_section(**values) -> SimpleNamespace:
    from cosmos_train.algorithms.policy_rl.schema import EnvSection

    return SimpleNamespace(**EnvSection(factory="domains.reach2d.env:Reach2DEnv", **values).model_dump())


def expert_act(seeds: list[int], chunk: int):
    """Reach2D's scripted expert as a batched policy: one `ExpertPolicy` per episode (found by the episode index
    `run_episodes` passes), reset with its seed as `rollout` resets it."""
    from domains.reach2d import ExpertPolicy

    experts = {}

    def act(observations, tasks, rows, episodes):
        chunks = []
        for task, row, episode in zip(tasks, rows, episodes, strict=True):
            if episode not in experts:
                experts[episode] = ExpertPolicy(seed=3, chunk=chunk)
                experts[episode].reset(seeds[min(episode, len(seeds) - 1)])  # spare copies replay the last
            chunks.append(experts[episode](observations["image"][row], observations["state"][row], task))
        return np.stack(chunks)

    return act


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_episodes_are_the_domains_own(vectorization):
    """Side by side in a vector env (worker processes when async), each episode is the one Reach2D's own
    closed-loop `rollout` runs for the same policy and start: its success and its number of steps."""
    from domains.reach2d import ExpertPolicy, Reach2DEnv, rollout

    from cosmos_train.algorithms.policy_rl.environments import run_episodes, vector_env

    seeds, execute = [5, 11, 12, 40, 77], 3
    section = env_section(vectorization=vectorization, kwargs={"max_steps": 12})
    envs = vector_env(section, None, count=3, execute=execute)
    try:
        # 5 seeds on 3 copies: two waves, the second with a spare copy.
        episodes = run_episodes(envs, seeds, expert_act(seeds, chunk=8), section)
    finally:
        envs.close()
    for episode, seed in zip(episodes, seeds, strict=True):
        want = rollout(Reach2DEnv(max_steps=12), ExpertPolicy(seed=3, chunk=8), seed, execute)
        assert (episode.seed, episode.success, episode.steps) == (seed, want["success"], want["steps"]), seed
        assert episode.env_return == float(want["success"])
    assert any(e.success for e in episodes) and not all(e.success for e in episodes)


def test_the_shipped_base_is_the_one_the_figures_were_measured_on(tmp_path):
    """The benchmark refuses a base whose weights are not the ones its record's SHA-256 sums name."""
    benchmark = load_benchmark("cosmos3_policy_rl")
    record, flaw = benchmark.check_base(BASE), benchmark.FLAWS[benchmark.SHIPPED_FLAW]
    assert (record["flaw"], record["train_episodes"]) == (benchmark.SHIPPED_FLAW, flaw["demonstrations"])
    assert record["distracted"] == flaw["data"]["distracted"] == 0.4
    copy = with_a_flipped_byte(BASE, "transformer/diffusion_pytorch_model.safetensors", tmp_path / "base")
    with pytest.raises(SystemExit, match=r"diffusion_pytorch_model\.safetensors is not the base"):
        benchmark.check_base(copy)


def test_a_bad_environment_is_named_in_one_line(tmp_path):
    from cosmos_train.algorithms.policy_rl.environments import make_env
    from cosmos_train.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[env\] factory 'domains.reach2d.env:NoSuchEnv'"):
        make_env("domains.reach2d.env:NoSuchEnv", {}, None, 4)
    with pytest.raises(ConfigError, match=r"not a gymnasium\.Env"):
        make_env("numpy:zeros", {"shape": 2}, None, 4)


def write_job(
    folder: Path, algorithm: str = "nft", rollout=None, section=None, train=None, eval_seeds=None, reward=None
) -> Path:
    rollout = {"seeds": "10000000:10000064", "samples_per_start": 2, "sampling_steps": 3, "train_samples": 4,
               "train_batch_size": 2} | (rollout or {})  # fmt: skip
    train = {"output_dir": str(folder / "run"), "max_steps": 2, "per_device_train_batch_size": 2,
             "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 1, "report_to": "none", "seed": 0,
             "resume_from_checkpoint": True} | (train or {})  # fmt: skip
    key = algorithm.replace("-", "_")
    section = {"kl_beta": 0.01, "timestep_fraction": 0.5} | (section or {})
    reward = {"progress_weight": 0.5} | (reward or {})

    def table(values):
        return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())

    text = (
        f'kind = "policy-rl"\n[model]\nname_or_path = "{BASE}"\n'
        '[env]\nfactory = "domains.reach2d.env:Reach2DEnv"\nkwargs = { size = 128, colors = ["red", "green"], goal = "red", max_steps = 8 }\n'
        'execute = 4\nprogress_key = "distance"\nvectorization = "sync"\n'
        f'[rollout]\n{table(rollout)}[reward]\n{table(reward)}[rl]\nalgorithm = "{algorithm}"\n'
        f"[{key}]\n{table(section)}"
        + (f"[eval]\nseeds = {json.dumps(eval_seeds)}\nevery = 1\n" if eval_seeds else "")
        + f"[train]\n{table(train)}"
    )
    path = folder / "job.toml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def trainer_for(job: Path):
    """The job's trainer, built as `run_policy_rl` builds it (its envs in this process)."""
    from cosmos_train.algorithms.action_sft.trainer import train_action_heads
    from cosmos_train.algorithms.diffusion.trainer import load_for_training
    from cosmos_train.algorithms.policy_rl import trainer as policy_rl
    from cosmos_train.jobs import read_job

    read = read_job(job)
    adapter, lora = load_for_training(read)
    train_action_heads(adapter.transformer, fresh=False)
    policy = policy_rl.policy_for(adapter, policy_rl.CosmosPolicy.settings_record(BASE))
    demonstrations = None
    if read.config.data is not None:
        demonstrations = policy_rl.Demonstrations(read.config.data, policy)
    envs = policy_rl.vector_env(read.config.env, None, 4, 4)
    trainer = policy_rl.PolicyRLTrainer(
        adapter, read.config, policy, envs, read.args, lora=lora, demonstrations=demonstrations
    )
    return trainer, envs


def fast_job(folder: Path, window: int = 2, sampling_steps: int = 6) -> Path:
    """A FlowGRPO-Fast job: the SDE on `window` steps of `sampling_steps` (instead of write_job's trained share)."""
    job = write_job(folder, "flow-grpo", rollout={"sampling_steps": sampling_steps},
                    section={"sde_window": window, "drop_zero_advantage": False})  # fmt: skip
    job.write_text(job.read_text().replace("timestep_fraction = 0.5\n", ""))
    return job


@pytest.mark.parametrize("fast", [False, True], ids=["all-steps", "sde-window"])
def test_flow_grpo_recomputes_its_rollout_log_probs(tmp_path, fast):
    """Every trained SDE step's log-prob, recomputed under the weights that sampled it, is the stored one: the
    ratio is 1 before any update (a wrong level, timestep, state or noise scale would move it)."""
    job = (
        fast_job(tmp_path)
        if fast
        else write_job(tmp_path, "flow-grpo", section={"drop_zero_advantage": False})
    )
    trainer, envs = trainer_for(job)
    try:
        calls, episodes = trainer.rollout([10000003, 10000003, 10000004, 10000004])
        batches = trainer.micro_batches(calls, trainer.advantages(episodes))
        assert len(batches) == trainer.micro_batches_per_rollout
        with torch.no_grad():
            for batch in batches:
                trainer.flow_grpo_loss(trainer.model, batch)
    finally:
        envs.close()
    assert trainer._metrics["ratio_min"] and min(trainer._metrics["ratio_min"]) > 1 - 1e-6
    assert max(trainer._metrics["ratio_max"]) < 1 + 1e-6


def test_sde_window_samples_its_window_with_the_sde_and_the_rest_on_the_ode(tmp_path):
    """FlowGRPO-Fast in closed loop: a rollout draws one window of 2 consecutive steps in the first half of the 6;
    every policy call of it takes those steps with the SDE (their log-probs kept, the only ones trained) and the
    others as Euler steps of the flow ODE under the sampling weights."""
    trainer, envs = trainer_for(fast_job(tmp_path))
    try:
        windows = set()
        for _ in range(6):
            calls, episodes = trainer.rollout([10000003, 10000003, 10000004, 10000004])
            window = sorted(calls[0]["log_probs"])
            assert all(sorted(call["log_probs"]) == window for call in calls)
            windows.add(tuple(window))
        batches = trainer.micro_batches(calls, trainer.advantages(episodes))
    finally:
        envs.close()
    assert windows <= {(0, 1), (1, 2)} and len(windows) == 2, windows  # starts in [0, 6 // 2 - 2]
    assert len(batches) == trainer.micro_batches_per_rollout
    assert {batch["step"] for batch in batches} == set(window)
    sigmas = trainer.sigmas
    for call in calls[:3]:
        for step in range(6):
            (latents, actions), after = call["states"][step], call["states"][step + 1][1]
            with torch.no_grad():
                v = trainer.policy.velocities(trainer.model, [call["input"]], latents[None], actions[None],
                                              torch.tensor([sigmas[step]]))[1][0]  # fmt: skip
            euler = actions + (sigmas[step + 1] - sigmas[step]) * v
            if step in window:
                assert (after - euler).abs().max() > 1e-3, step  # the SDE's noise
            else:
                torch.testing.assert_close(after, euler, rtol=1e-4, atol=1e-5)


def test_the_caption_goes_through_the_frozen_reasoner_once(tmp_path):
    """The caption is most of a policy call's sequence: after a rollout, sampling replays its reasoner keys and
    values from the cache (the generator and action heads train, the reasoner is frozen), and the chunks are the
    ones the full sequence gives."""
    trainer, envs = trainer_for(write_job(tmp_path, "nft"))
    try:
        calls, _ = trainer.rollout([10000003, 10000003, 10000004, 10000004])
    finally:
        envs.close()
    policy, inputs = trainer.policy, [call["input"] for call in calls[:4]]
    assert len(policy.reasoner_cache) == 1  # one caption: the cache was filled by the rollout
    cached = policy.sample(trainer.model, inputs, trainer.sigmas, generator=torch.Generator().manual_seed(0))
    policy.reasoner_cache = None
    full = policy.sample(trainer.model, inputs, trainer.sigmas, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(cached["actions"], full["actions"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cached["latents"], full["latents"], rtol=1e-4, atol=1e-5)


def test_ema_warmup_reaches_the_policys_ema(tmp_path):
    """`[nft] ema_warmup = false`: the EMA that evaluation and exports use averages at its decay from the first step."""
    trainer, envs = trainer_for(write_job(tmp_path, "nft", section={"ema_warmup": False}))
    envs.close()
    assert trainer.ema.warmup is False and trainer.ema.get_decay() == 0.9


@pytest.mark.parametrize("same_latent", [True, False])
def test_same_latent_shares_a_starts_initial_noise(tmp_path, same_latent):
    """FlowGRPO's `same_latent`: the K episodes of one start begin each policy call from the same initial noise
    (their SDE noise differs), the episodes of another start from their own; without it every episode has its own."""
    trainer, envs = trainer_for(write_job(tmp_path, "flow-grpo", section={"same_latent": same_latent}))
    try:
        calls, _ = trainer.rollout([10000003, 10000003, 10000004, 10000004])
    finally:
        envs.close()
    first = {call["row"]: call for call in reversed(calls)}  # each episode's first call
    noise = [torch.cat([part.flatten() for part in first[row]["states"][0]]) for row in range(4)]
    assert torch.equal(noise[0], noise[1]) is same_latent and torch.equal(noise[2], noise[3]) is same_latent
    assert not torch.equal(noise[0], noise[2])
    assert not torch.equal(first[0]["actions"], first[1]["actions"])  # the SDE's noise is each episode's own


def test_a_rollout_logs_how_much_a_starts_episodes_differ(tmp_path):
    """`mixed_starts` is the share of starts whose K episodes disagree in success, `start_score_std` the mean over
    starts of their scores' std: what the advantages can tell apart."""
    from cosmos_train.algorithms.policy_rl.environments import Episode

    trainer, envs = trainer_for(write_job(tmp_path))  # K = 2, [reward] success 1 + progress 0.5
    envs.close()
    episodes = [Episode(1, True, 5, 1.0, 1.0), Episode(1, False, 8, 0.0, 0.6),  # differ: 1.5 against 0.3
                Episode(2, True, 5, 1.0, 1.0), Episode(2, True, 6, 1.0, 1.0)]  # fmt: skip
    trainer.advantages(episodes)
    assert trainer._metrics["mixed_starts"] == [0.5]
    assert trainer._metrics["start_score_std"] == [pytest.approx((0.6 + 0.0) / 2)]


def test_length_weight_ranks_a_starts_successes_by_how_soon(tmp_path):
    """Successes of one start end on the target, so their progress barely differs; `length_weight` scores the sooner
    one higher (and every failure, which runs to the limit, alike)."""
    from cosmos_train.algorithms.policy_rl.environments import Episode

    trainer, envs = trainer_for(write_job(tmp_path, reward={"length_weight": 0.02}))
    envs.close()
    episodes = [Episode(1, True, 5, 1.0, 0.95), Episode(1, True, 10, 1.0, 0.95),
                Episode(2, False, 8, 0.0, 0.5), Episode(2, False, 8, 0.0, 0.5)]  # fmt: skip
    scores = trainer.score(episodes)
    assert scores.tolist() == pytest.approx([1.375, 1.275, 0.09, 0.09])
    advantages = trainer.advantages(episodes)
    assert advantages[0] > 0 > advantages[1] and advantages[2] == advantages[3] == 0


def test_success_completes_progress_leaves_a_starts_successes_unranked(tmp_path):
    """With `success_completes_progress`, a success's progress is 1 whatever residual distance it stopped at, so K
    successes of one start score alike (advantage 0) instead of their stopping points' noise being scaled by the
    start's tiny std to full-size advantages; failures still rank by how close they came."""
    from cosmos_train.algorithms.policy_rl.environments import Episode

    episodes = [Episode(1, True, 9, 1.0, 0.97), Episode(1, True, 9, 1.0, 0.92),
                Episode(2, False, 23, 0.0, 0.6), Episode(2, False, 23, 0.0, 0.4)]  # fmt: skip
    per_start = {"global_std": False}  # each start's own std, as the benchmark normalises
    trainer, envs = trainer_for(
        write_job(tmp_path, section=per_start, reward={"success_completes_progress": True})
    )
    envs.close()
    assert trainer.score(episodes).tolist() == pytest.approx([1.5, 1.5, 0.3, 0.2])
    advantages = trainer.advantages(episodes)
    assert advantages[0] == advantages[1] == 0 and advantages[2] > 0 > advantages[3]
    measured, envs = trainer_for(write_job(tmp_path / "measured", section=per_start))
    envs.close()
    assert abs(measured.advantages(episodes)[0]) > 0.9  # by default the residual distance ranks them


@pytest.mark.parametrize("algorithm", ["nft", "flow-grpo"])
def test_executed_actions_only_trains_the_actions_the_environment_ran(tmp_path, algorithm):
    """`[rl] executed_actions_only`: the loss's gradient reaches the chunk's first `[env] execute` actions (4 of 8),
    not the ones sampled and never run; without it, every action of the chunk."""
    trainer, envs = trainer_for(write_job(tmp_path, algorithm))
    try:
        calls, episodes = trainer.rollout([10000003, 10000003, 10000004, 10000004])
        batch = trainer.micro_batches(calls, trainer.advantages(episodes))[0]
    finally:
        envs.close()
    trained, velocities = [], trainer.policy.velocities

    def recording(*args, **kwargs):
        v, a = velocities(*args, **kwargs)
        if a.requires_grad:  # the trained forward's action velocities
            a.retain_grad()
            trained.append(a)
        return v, a

    trainer.policy.velocities = recording
    first, raw = trainer.policy.first_action_row, trainer.policy.settings.raw_action_dim
    reached = {}
    for only in (True, False):
        rl = trainer.config.rl.model_copy(update={"executed_actions_only": only})
        trainer.config = trainer.config.model_copy(update={"rl": rl})
        trainer.compute_loss(trainer.model, batch).backward()
        reached[only] = trained.pop().grad[:, first:, :raw].abs().sum(dim=(0, 2)) > 0
    assert len(reached[True]) == 8 and trainer.execute == 4
    assert reached[True][:4].all() and not reached[True][4:].any()
    assert reached[False].all()


def test_held_out_episodes_do_not_depend_on_the_copies_beside_them(tmp_path):
    """`[eval]` draws each episode's noise from its own generator: 5 held-out starts on 4 copies of the environment
    (two waves) and on 2 (three) are the same episodes."""
    from cosmos_train.algorithms.policy_rl.trainer import PolicyEvaluation, vector_env

    seeds = [20000000, 20000001, 20000002, 20000003, 20000004]
    trainer, envs = trainer_for(write_job(tmp_path, eval_seeds=seeds))
    two = vector_env(trainer.config.env, None, 2, 4)
    try:
        evaluation = PolicyEvaluation(trainer, trainer.config.eval)
        on_four, on_two = evaluation.episodes(envs), evaluation.episodes(two)
    finally:
        envs.close(), two.close()
    assert [(e.seed, e.success, e.steps) for e in on_four] == [(e.seed, e.success, e.steps) for e in on_two]
    assert [e.progress for e in on_four] == pytest.approx([e.progress for e in on_two], abs=1e-4)
    assert len({round(e.progress, 4) for e in on_four}) == len(seeds)  # five episodes, not one replayed


def test_a_run_exports_a_policy_and_resumes_bit_equal(tmp_path):
    """Two steps in one go, and the same job stopped after step 1 and resumed: the same final weights, old policy,
    EMA and export. The export loads as a `Cosmos3ActionPolicy`, and `cosmos-train export` writes the same."""
    from diffusers_cosmos3.actions import Cosmos3ActionPolicy

    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks")}  # the jobs' environment: domains.reach2d
    whole = write_job(tmp_path / "whole", eval_seeds=[20000000, 20000001])
    done = cli("policy-rl", "-c", whole, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    stopped = write_job(tmp_path / "stopped", eval_seeds=[20000000, 20000001], train={"max_steps": 1})
    assert cli("policy-rl", "-c", stopped, env=env).returncode == 0
    resumed = cli("policy-rl", "-c", stopped, "--set", "train.max_steps=2", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    runs = [tmp_path / name / "run" for name in ("whole", "stopped")]
    for name in ("model.safetensors", "old_policy.safetensors", "ema.safetensors"):
        final, expected = (load_file(run / name) for run in runs)
        assert all(torch.equal(final[k], expected[k]) for k in expected), name
    clock = ("seconds", "train_seconds")  # wall-clock: the rest of each point is the same
    curves = [[{k: v for k, v in p.items() if k not in clock} for p in json.loads((run / "eval.json").read_text())]
              for run in runs]  # fmt: skip
    assert [p["step"] for p in curves[1]] == [0, 1, 2] and curves[0] == curves[1]
    assert (runs[0] / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # train and held-out success
    export = runs[0] / "safetensors" / "step_2"
    policy = Cosmos3ActionPolicy.from_pretrained(export, num_inference_steps=2, enable_safety_checker=False)
    chunk = policy(np.zeros((128, 128, 3), np.uint8), "reach the red target", state=np.array([0.5, 0.5]))
    assert chunk.shape == (policy.settings.chunk_size, 2)
    result = cli_in_process("export", runs[0] / "checkpoint-2", tmp_path / "exported")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "exported" / "action_settings.json").read_text() == (
        export / "action_settings.json"
    ).read_text()


@pytest.fixture(scope="module")
def demonstrations(tmp_path_factory) -> Path:
    """Two episodes of the distracted expert, as a LeRobot dataset (Reach2D's writer)."""
    from domains.reach2d import write_dataset

    root = tmp_path_factory.mktemp("demonstrations") / "reach2d"
    return write_dataset(root, seed=0, train_count=2, held_out_count=0, size=128, colors=["red", "green"],
                         goal="red", distracted=0.4)  # fmt: skip


def ddrl_job(folder: Path, dataset: Path, **section) -> Path:
    section = {
        "data_beta": 0.5,
        "data_batch_size": 2,
        "drop_zero_advantage": False,
        "timestep_fraction": 0.7,
    } | section
    job = write_job(folder, "ddrl", section=section)  # two of the three SDE steps trained
    data = (f'[data]\npath = "{dataset}"\ncameras = ["observation.images.top"]\naction_columns = ["action"]\n'
            'state_columns = ["observation.state"]\n')  # fmt: skip
    job.write_text(job.read_text().replace("[train]\n", data + "[train]\n"))
    return job


@pytest.fixture(scope="module")
def ddrl_rollout(tmp_path_factory, demonstrations):
    """A DDRL job's trainer and the micro-batches of one rollout (two starts, K 2)."""
    trainer, envs = trainer_for(ddrl_job(tmp_path_factory.mktemp("ddrl"), demonstrations))
    try:
        calls, episodes = trainer.rollout([10000003, 10000003, 10000004, 10000004])
        return trainer, trainer.micro_batches(calls, trainer.advantages(episodes))
    finally:
        envs.close()


def test_a_demonstration_window_is_the_datasets_actions_and_state(ddrl_rollout, demonstrations):
    """DDRL's data in closed loop: a window's action rows are the dataset's actions (read here with pyarrow), after
    its state row, the channels past the raw width zero; its latents are the policy's own encoding (frame 0 as a
    policy call encodes the window's first frame)."""
    import pyarrow.parquet as pq

    trainer, _ = ddrl_rollout
    table = pq.read_table(next((demonstrations / "data").rglob("*.parquet"))).to_pandas()
    rows = table[table["episode_index"] == 1].sort_values("frame_index")
    call, x0, a0 = trainer.demonstrations.sample((1, 3))
    chunk = trainer.policy.settings.chunk_size
    expected = np.stack(rows["action"].to_numpy()[3 : 3 + chunk])
    assert a0.shape == (chunk + 1, trainer.policy.action_dim)
    assert np.allclose(a0[1:, :2].numpy(), expected) and not a0[:, 2:].any()
    assert np.allclose(a0[0, :2].numpy(), rows["observation.state"].to_numpy()[3])
    assert torch.allclose(x0[:, :1], call.latents[:, :1], atol=1e-5) and x0[:, 1:].abs().sum() > 0
    assert call.rows[0].equal(a0[0]) and not call.rows[1:].any()  # the call knows the state, not the actions


def test_ddrl_adds_the_data_term_to_flow_grpos(ddrl_rollout):
    """Each micro-batch carries `data_batch_size` demonstration windows; its loss is FlowGRPO's clipped term plus
    data_beta times the EDM-weighted data term at the trained step's level, whose gradient reaches the generator
    (the future frames) and the action heads."""
    trainer, batches = ddrl_rollout
    assert len(batches) == trainer.micro_batches_per_rollout
    model = trainer.model
    for batch in batches:
        data_calls, x0, a0 = batch["data"]
        assert len(data_calls) == x0.shape[0] == a0.shape[0] == 2
        torch.manual_seed(7)
        total = trainer.compute_loss(model, batch)
        clipped = trainer.flow_grpo_loss(model, batch)
        torch.manual_seed(7)
        data = trainer.data_loss(model, batch["data"], trainer.sigmas[batch["step"]])
        assert data > 0 and torch.allclose(total, clipped + 0.5 * data, rtol=1e-5)
    model.zero_grad()
    trainer.data_loss(model, batches[0]["data"], trainer.sigmas[batches[0]["step"]]).backward()
    grads = {name: p.grad is not None and p.grad.abs().sum() > 0 for name, p in model.named_parameters()
             if p.requires_grad}  # fmt: skip
    assert any(v for k, v in grads.items() if "action_proj_out" in k)
    assert any(v for k, v in grads.items() if "proj_out" in k and "action" not in k)


def test_each_process_draws_its_own_demonstrations(ddrl_rollout, monkeypatch):
    """Under DDP every process holds the same global RNG: its DDRL windows must still differ from the others' (else
    more processes would not mean more data), and repeat for the same RNG state (a resumed run)."""
    trainer, _ = ddrl_rollout

    monkeypatch.setattr(type(trainer.accelerator), "num_processes", property(lambda self: 2))

    def windows(rank: int) -> list:
        monkeypatch.setattr(type(trainer.accelerator), "process_index", property(lambda self: rank))
        torch.manual_seed(3)
        return [x0 for x0 in trainer.data_batch()["data"][1]]

    first, again, other = windows(0), windows(0), windows(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_bad_jobs_are_refused_in_one_line(tmp_path):
    job = write_job(tmp_path)
    for overrides, message in (
        (["rollout.seeds=9:3"], "[rollout] seeds"),
        (["rollout.train_samples=5"], "train_samples = 5 must be a multiple"),
        (["env.factory=domains.reach2d.env:NoSuchEnv"], "[env] factory domains.reach2d.env:NoSuchEnv: "),
        (["rl.algorithm=flow-grpo", "flow_grpo.kl_beta=0.0", "nft.kl_beta=0.0", "rl.video_loss_weight=1.0"],
         "[rl] video_loss_weight"),
    ):  # fmt: skip
        sets = [arg for override in overrides for arg in ("--set", override)]
        result = cli_in_process("validate-config", job, *sets)
        assert result.returncode == 2, (overrides, result.stdout)
        assert message in result.stdout + result.stderr, (overrides, result.stdout + result.stderr)
    ddrl = ddrl_job(tmp_path / "ddrl", tmp_path / "absent")
    for overrides, message in (
        (["rl.algorithm=nft"], "[data]: only [rl] algorithm = 'ddrl' reads demonstrations"),
        ([], "[data] "),  # the dataset is not there
    ):
        sets = [arg for override in overrides for arg in ("--set", override)]
        result = cli_in_process("validate-config", ddrl, *sets)
        assert result.returncode == 2 and message in result.stdout + result.stderr, (
            result.stdout + result.stderr
        )
    ddrl.write_text(ddrl.read_text().split("[data]")[0] + "[train]" + ddrl.read_text().split("[train]")[1])
    result = cli_in_process("validate-config", ddrl)
    assert result.returncode == 2 and "DDRL's data term needs demonstrations" in result.stdout + result.stderr
    job.write_text(job.read_text().replace('progress_key = "distance"\n', ""))
    result = cli_in_process("validate-config", job)
    assert (
        result.returncode == 2
        and "[reward] progress_weight needs [env] progress_key" in result.stdout + result.stderr
    )
