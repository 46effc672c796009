"""DPPO and the ``parallel_sync`` pipeline: the data-parallel maths, exactly, then the processes around it.

- Equivalence (float64): with fixed data, 2 workers x batch B make the same parameter updates as 1 worker x 2B,
  for PPO (several epochs, advantages normalised over both workers) and A2C, and every worker holds the same
  parameters after every optimiser step.
- Merged running statistics: two workers' RunningMeanStd merged equal one that saw all the data.
- One worker on ``parallel_sync`` is exactly the serial pipeline (the same metrics rows).
- End to end through ``zoo run`` (spawned workers): only rank 0 writes; the checkpoint holds every worker's env
  snapshot and RNG streams; a signal stops every process after a consistent save and resume is exact; a killed
  or failing worker stops the run within 30 s in one line naming it, with the checkpoint intact and no process
  left; a custom env from ``import_names`` works in every worker; two torchrun "nodes" on 127.0.0.1 train; a
  killed torchrun agent stops its ranks within seconds, rank 0 saving and unlocking; a world size this machine
  cannot hold is refused in one line before any worker starts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import TIMINGS, end_spawned_worker, free_port, metrics_rows, new_policy

from zoo.data import Rollout
from zoo.errors import ConfigError
from zoo.pipelines.parallel_sync import Collectives, DistributedContext, ParallelSyncPipeline
from zoo.policies import A2CPolicy, LearnContext, PPOPolicy, normalize_advantage
from zoo.rl_utils import RunningMeanStd, sync_running_mean_std
from zoo.run import train
from zoo.run.run_dir import load_weights_only

DPPO_TIMINGS = (*TIMINGS, "allreduce_ms")  # what differs between two runs of one seed

OBS_DIM, ACT_DIM, N_ACTIONS, T, B = 4, 2, 3, 5, 3


# -- the maths, in-process ----------------------------------------------------------------------------------
class _TwoIdenticalWorkers(LearnContext):
    """A context that pretends a second worker holds exactly this worker's data."""

    def __init__(self) -> None:
        super().__init__(world_size=2)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return 2 * values


def test_advantages_are_normalised_over_every_workers_samples():
    adv = torch.randn(37, dtype=torch.float64) * 3 + 1
    both = torch.cat([adv, adv])
    expected = ((both - both.mean()) / (both.std() + 1e-8))[:37]
    torch.testing.assert_close(normalize_advantage(adv, _TwoIdenticalWorkers()), expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(normalize_advantage(adv), expected)  # the local std differs: the test can fail


def test_running_statistics_since_a_state_invert_merge():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd((3,))
    rms.update(rng.normal(4, 2, (500, 3)))
    earlier = rms.state_dict()
    new = rng.normal(-1, 5, (40, 3))
    rms.update(new)
    part = rms.since(earlier)
    assert part.data_count == 40
    np.testing.assert_allclose(part.mean, new.mean(0), rtol=1e-10)
    np.testing.assert_allclose(part.var, new.var(0), rtol=1e-10)
    with pytest.raises(ValueError, match="more than"):
        RunningMeanStd((3,)).since(earlier)


def test_one_worker_on_parallel_sync_is_the_serial_pipeline(tmp_path):
    base = {"exp_name": "x", "seed": 5, "runs_dir": str(tmp_path), "env": {"id": "CartPole-v1"},
            "policy": {"type": "ppo", "epochs": 2, "minibatch_size": 32},
            "pipeline": {"num_envs": 4, "rollout_steps": 16, "max_env_steps": 1_024, "eval_every": 0,
                         "normalize_obs": True, "normalize_reward": True}}
    serial = train(base, ["exp_name=serial"])
    single = train(base, ["exp_name=single", "pipeline.type=parallel_sync", "pipeline.world_size=1"])

    def rows(summary: dict) -> list[dict]:
        lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k not in ("wall_time", "sps")} for line in lines]

    assert rows(serial) == rows(single)


def test_dppo_is_registered_with_parallel_sync_as_its_default_pipeline():
    from zoo.config.resolve import resolve_config

    cfg = resolve_config({"policy": {"type": "dppo"}})
    assert cfg.pipeline.type == "parallel_sync" and cfg.pipeline.world_size == 2
    assert cfg.pipeline.normalize_reward and cfg.pipeline.normalize_obs  # DPPO's running normalisation
    assert resolve_config({"policy": {"type": "ppo"}, "pipeline": {"type": "parallel_sync"}}).policy.type == "ppo"


def test_a_pipeline_of_two_workers_outside_a_process_group_is_a_clear_error(tmp_path):
    from zoo.config.resolve import resolve_config

    cfg = resolve_config({"policy": {"type": "dppo"}, "runs_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="world_size 2 but this process group has 1"):
        ParallelSyncPipeline(cfg)


# -- the maths across two processes -------------------------------------------------------------------------
def _policy(cls, discrete: bool, **overrides):
    action_space = gym.spaces.Discrete(N_ACTIONS) if discrete else gym.spaces.Box(-1, 1, (ACT_DIM,))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,))
    return new_policy(cls, obs_space, action_space, **{"hidden_sizes": [8, 8], "anneal_lr": False, **overrides})


def _rollout(policy, columns: slice) -> Rollout:
    g = torch.Generator().manual_seed(7)
    width = 2 * B
    obs = torch.randn(T, width, OBS_DIM, generator=g)
    if policy.discrete:
        action = torch.randint(0, N_ACTIONS, (T, width), generator=g)
    else:
        action = 0.5 * torch.randn(T, width, ACT_DIM, generator=g)
    rollout = Rollout(
        obs=obs, action=action, reward=torch.randn(T, width, generator=g),
        terminated=torch.rand(T, width, generator=g) < 0.2, truncated=torch.rand(T, width, generator=g) < 0.1,
        valid=torch.ones(T, width, dtype=torch.bool), last_obs=torch.randn(width, OBS_DIM, generator=g),
    )
    with torch.no_grad():  # the behaviour outputs of a slightly different policy, as after a first epoch
        extras = {}
        for t in range(T):
            out = policy.collect(obs[t])
            for key, value in out.extras.items():
                extras.setdefault(key, []).append(value)
        extras = {key: torch.stack(values) for key, values in extras.items()}
    rollout = rollout.with_extras(**extras)
    processed = policy.process_rollout(rollout)
    return Rollout(
        obs=processed.obs[:, columns], action=processed.action[:, columns], reward=processed.reward[:, columns],
        terminated=processed.terminated[:, columns], truncated=processed.truncated[:, columns],
        valid=processed.valid[:, columns], last_obs=processed.last_obs[columns],
        extras={key: value[:, columns] for key, value in processed.extras.items()},
    )


CASES = {
    "ppo_discrete": (PPOPolicy, True, {"epochs": 3, "normalize_advantage": True, "value_clip": True}),
    "ppo_box": (PPOPolicy, False, {"epochs": 2, "normalize_advantage": True}),
    "a2c_discrete": (A2CPolicy, True, {"normalize_advantage": True}),
}


def _learn_steps(name: str, workers: int, rank: int) -> list[torch.Tensor]:
    """The flat parameters after every optimiser step of one learn call on this rank's columns."""
    cls, discrete, overrides = CASES[name]
    count = T * B * (2 // workers)
    extra = {"minibatch_size": count} if cls is PPOPolicy else {}
    policy = _policy(cls, discrete, **overrides, **extra)
    batch = _rollout(policy, slice(rank * B, (rank + 1) * B) if workers == 2 else slice(0, 2 * B))
    after: list[torch.Tensor] = []
    step = policy.optimizer.step

    def recording_step() -> None:
        step()
        after.append(policy.optimizer.flat.detach().clone())

    policy.optimizer.step = recording_step
    ctx = (DistributedContext(Collectives(), world_size=2, rank=rank) if workers == 2 else LearnContext())
    policy.learn(batch, ctx)
    return after


def _equivalence_worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        results = {name: _learn_steps(name, 2, rank) for name in CASES}
        rms = RunningMeanStd((2,))
        common = rms.state_dict()
        data = np.random.default_rng(rank).normal(rank, 1 + rank, (50 + 30 * rank, 2))
        rms.update(data)
        results["rms"] = sync_running_mean_std(rms, common)
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    end_spawned_worker()


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("dppo")
    mp.spawn(_equivalence_worker, args=(free_port(), str(out_dir)), nprocs=2, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("name", list(CASES))
def test_two_workers_with_batch_b_update_like_one_worker_with_batch_2b(two_workers, name):
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        single = _learn_steps(name, 1, 0)
    finally:
        torch.set_default_dtype(default)
    for rank in range(2):
        steps = two_workers[rank][name]
        assert len(steps) == len(single) >= 1
        for got, expected in zip(steps, single):
            assert got.dtype == torch.float64
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for first, second in zip(two_workers[0][name], two_workers[1][name]):
        assert torch.equal(first, second)  # identical on every worker after every step


def test_merged_running_statistics_equal_one_instance_that_saw_all_data(two_workers):
    data = [np.random.default_rng(rank).normal(rank, 1 + rank, (50 + 30 * rank, 2)) for rank in range(2)]
    reference = RunningMeanStd((2,))
    reference.update(np.concatenate(data))
    states = [worker["rms"] for worker in two_workers]
    assert states[0]["data_count"] == states[1]["data_count"] == 130
    np.testing.assert_array_equal(states[0]["data_mean"], states[1]["data_mean"])  # bit-identical on both
    np.testing.assert_allclose(states[0]["data_mean"], reference.state_dict()["data_mean"], rtol=1e-12)
    np.testing.assert_allclose(states[0]["data_var"], reference.state_dict()["data_var"], rtol=1e-12)


# -- end to end: spawned workers, signals, faults, torchrun -------------------------------------------------
DPPO = {
    "exp_name": "d", "seed": 2, "env": {"id": "CartPole-v1"},
    "policy": {"type": "dppo", "epochs": 2, "minibatch_size": 32, "anneal_lr": True},
    "pipeline": {"world_size": 2, "num_envs": 2, "rollout_steps": 16, "max_env_steps": 6_400, "eval_every": 0,
                 "checkpoint_every": 0},
}

RAISING_ENV = '''
import gymnasium
import torch.distributed as dist
from zoo.registry import ENV_REGISTRY


class RaisingCartPole(gymnasium.Wrapper):
    """CartPole whose step raises after `fail_after` steps in the worker of rank 1 (and never elsewhere)."""

    def __init__(self, fail_after=10**9):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.steps, self.fail_after = 0, fail_after

    def step(self, action):
        self.steps += 1
        if self.steps > self.fail_after and dist.is_initialized() and dist.get_rank() == 1:
            raise ValueError("the test env broke on purpose")
        return self.env.step(action)


ENV_REGISTRY.register("raising_cartpole", RaisingCartPole)
'''


def _write_config(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "dppo_cfg.py"
    path.write_text(f"config = {config!r}\n")
    return path


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _workers(pid: int) -> list[int]:
    """The worker processes of a supervisor, in start order."""
    workers = []
    for child in sorted(_children(pid)):
        try:
            if b"worker_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass
    return workers


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zoo", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_rows(process: subprocess.Popen, metrics: Path, rows: int) -> list[int]:
    """Wait until ``metrics`` has ``rows`` lines; return the supervisor's workers."""
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while time.monotonic() < deadline:
        if len(workers) < 2:
            workers = _workers(process.pid)
        if metrics.exists() and metrics.read_text().count("\n") >= rows:
            return workers
        if process.poll() is not None:
            pytest.fail(f"the run ended early: {process.communicate()}")
        time.sleep(0.01)
    process.kill()
    pytest.fail("the run did not reach the expected row")


@pytest.mark.slow  # trains real runs: the quick loop stays under 3 minutes
def test_only_rank_0_writes_and_the_checkpoint_holds_every_workers_state(tmp_path):
    summary = train({**DPPO, "runs_dir": str(tmp_path / "runs")})
    runs = list((tmp_path / "runs").iterdir())
    assert [p.name for p in runs] == ["d"] and summary["run_dir"] == str(runs[0])
    rows = metrics_rows(runs[0], DPPO_TIMINGS)
    steps = [row["env_steps"] for row in rows]
    assert steps == [2 * 2 * 16 * (i + 1) for i in range(len(rows))]  # both workers' steps count
    assert summary["env_steps"] == 6_400
    state = load_weights_only(runs[0] / "checkpoint.pt")
    workers = state["workers"]
    assert len(workers) == 2
    snapshots = [worker["components"]["collector"]["env"] for worker in workers]
    assert all(snapshots) and snapshots[0] != snapshots[1]  # each worker's own episodes
    assert not torch.equal(workers[0]["rng"]["torch"], workers[1]["rng"]["torch"])
    sorted_files = sorted(p.name for p in runs[0].iterdir() if p.name != ".lock")
    assert sorted_files == ["checkpoint.pt", "config.yaml", "environment.json", "metrics.csv", "metrics.jsonl",
                            "model.pt"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm_to_zoo_run", "ctrl_c_to_the_process_group"])
def test_a_stop_signal_saves_once_stops_every_process_and_resume_is_exact(tmp_path, how):
    config = {**DPPO, "runs_dir": str(tmp_path / "runs"),
              "pipeline": {**DPPO["pipeline"], "max_env_steps": 16_000, "checkpoint_every": 1_000}}
    whole = train(config, ["exp_name=whole"])
    broken = tmp_path / "runs" / "broken"
    process = _start(["run", "--config", str(_write_config(tmp_path, config)), "--exp-name", "broken"], tmp_path)
    workers = _wait_rows(process, broken / "metrics.jsonl", 40)
    assert len(workers) == 2
    if how == "sigterm_to_zoo_run":
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, err = process.communicate(timeout=60)
    assert process.returncode == (143 if how == "sigterm_to_zoo_run" else 130), err
    assert "continue with: zoo run --resume" in out
    assert _alive(workers) == []
    stopped_at = len(metrics_rows(broken, DPPO_TIMINGS))
    assert load_weights_only(broken / "checkpoint.pt")["loop"]["iteration"] == stopped_at  # saved at the stop
    summary = train(None, resume=broken)
    assert summary["reason"] == "max_env_steps"
    assert metrics_rows(broken, DPPO_TIMINGS) == metrics_rows(Path(whole["run_dir"]), DPPO_TIMINGS)
    mine = load_weights_only(broken / "checkpoint.pt")["policy"]["model"]
    reference = load_weights_only(Path(whole["run_dir"]) / "checkpoint.pt")["policy"]["model"]
    assert all(torch.equal(mine[key], reference[key]) for key in reference)


def _assert_stopped_in_one_line(process: subprocess.Popen, workers: list[int], started: float, pattern: str):
    out, err = process.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert process.returncode != 0 and elapsed < 30, (elapsed, err)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("steps ")]  # progress
    assert len(lines) == 1 and lines[0].startswith("zoo: error: worker 1 of 2 "), err
    assert pattern in lines[0] and "--resume" in lines[0], lines[0]
    assert _alive(workers) == []


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_within_30s_in_one_line_with_the_checkpoint_intact(tmp_path):
    import zoo

    config = {**DPPO, "runs_dir": str(tmp_path / "runs"),
              "pipeline": {**DPPO["pipeline"], "max_env_steps": 10_000_000, "checkpoint_every": 10}}
    run_dir = tmp_path / "runs" / "d"
    process = _start(["run", "--config", str(_write_config(tmp_path, config))], tmp_path)
    workers = _wait_rows(process, run_dir / "metrics.jsonl", 25)
    os.kill(workers[1], signal.SIGKILL)
    _assert_stopped_in_one_line(process, workers, time.monotonic(), "was killed by SIGKILL")
    assert load_weights_only(run_dir / "checkpoint.pt")["loop"]["iteration"] >= 20
    agent = zoo.load(run_dir)
    assert agent.predict(np.zeros(4, dtype=np.float32)) in (0, 1)


@pytest.mark.slow
def test_a_worker_that_raises_is_named_with_its_error_and_custom_envs_work_in_every_worker(tmp_path):
    (tmp_path / "raising_env.py").write_text(RAISING_ENV)
    config = {**DPPO, "runs_dir": str(tmp_path / "runs"), "import_names": ["raising_env"],
              "env": {"id": "raising_cartpole", "kwargs": {"fail_after": 800}},
              "pipeline": {**DPPO["pipeline"], "checkpoint_every": 5}}
    process = _start(["run", "--config", str(_write_config(tmp_path, config))], tmp_path)
    started = time.monotonic()
    workers = _wait_rows(process, tmp_path / "runs" / "d" / "metrics.jsonl", 1)
    _assert_stopped_in_one_line(process, workers, started,
                                "failed: env 'raising_cartpole' raised in step(): ValueError: the test env broke on "
                                "purpose")
    assert load_weights_only(tmp_path / "runs" / "d" / "checkpoint.pt")["loop"]["iteration"] >= 5


def _torchrun_nodes(path: Path, cwd: Path) -> list[tuple[int, str]]:
    port = free_port()
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
             f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}",
             "-m", "zoo", "run", "--config", str(path)],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        for rank in range(2)
    ]
    results = []
    for node in nodes:
        try:
            _, err = node.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for other in nodes:
                if other.poll() is None:
                    os.killpg(other.pid, signal.SIGKILL)
            _, err = node.communicate()
        results.append((node.returncode, err))
    return results


@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_train_one_run(tmp_path):
    config = {**DPPO, "runs_dir": str(tmp_path / "runs"), "pipeline": {**DPPO["pipeline"], "max_env_steps": 2_048}}
    path = _write_config(tmp_path, config)
    results = _torchrun_nodes(path, tmp_path)
    if [code for code, _ in results] != [0, 0]:
        # Once more on a new port: the free port can be taken meanwhile, and twice in full-suite runs (never alone,
        # 30+ times) a torchrun worker aborted in C++ ("terminate called without an active exception") after its
        # first iteration. The failure is kept in the message if the second try fails too.
        first = results
        shutil.rmtree(tmp_path / "runs", ignore_errors=True)
        results = _torchrun_nodes(path, tmp_path)
        assert [code for code, _ in results] == [0, 0], (first, results)
    assert [code for code, _ in results] == [0, 0], results
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["d"]  # rank 0 alone made a run directory
    rows = metrics_rows(tmp_path / "runs" / "d", DPPO_TIMINGS)
    assert rows[-1]["env_steps"] == 2_048 and len(rows) == 2_048 // (2 * 2 * 16)
    assert len(load_weights_only(tmp_path / "runs" / "d" / "checkpoint.pt")["workers"]) == 2


@pytest.mark.slow
def test_an_entry_point_plugin_policy_trains_on_two_workers(tmp_path):
    # The example plugin "installed" the way pip does it: the package and a .dist-info with its entry point in a
    # directory on PYTHONPATH, so that the supervisor and every spawned worker discover it by themselves.
    site = tmp_path / "site"
    example = Path(__file__).resolve().parents[1] / "examples" / "zoo_plugin_example"
    shutil.copytree(example / "zoo_plugin_example", site / "zoo_plugin_example")
    info = site / "zoo_plugin_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoo-plugin-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoo]\nexample = zoo_plugin_example.plugin\n")
    config = {**DPPO, "runs_dir": str(tmp_path / "runs"), "policy": {"type": "reinforce_baseline"},
              "pipeline": {**DPPO["pipeline"], "type": "parallel_sync", "max_env_steps": 1_024}}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "zoo", "run", "--config", str(_write_config(tmp_path, config))],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    last = json.loads((tmp_path / "runs" / "d" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["env_steps"] == 1_024 and last["allreduce_ms"] > 0  # the plugin's gradients were averaged


def test_a_world_size_the_machine_cannot_hold_is_refused_in_one_line_before_any_worker_starts(tmp_path):
    config = {**DPPO, "runs_dir": str(tmp_path / "runs")}
    process = _start(["run", "--config", str(_write_config(tmp_path, config)), "--set", "pipeline.world_size=65536"],
                     tmp_path)
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            # Watched while it runs, and the whole group killed at the first worker: without the check, this
            # would start 65536 processes.
            assert _workers(process.pid) == [], "a worker was started"
            time.sleep(0.01)
        _, err = process.communicate(timeout=10)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its workers too, if any started
        except ProcessLookupError:
            pass
        process.wait()
    assert process.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zoo: error: ") and "pipeline.world_size" in lines[0], err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_killing_the_torchrun_agent_stops_every_rank_which_saves_and_frees_the_run_directory(tmp_path):
    import fcntl

    import zoo

    config = {**DPPO, "runs_dir": str(tmp_path / "runs"),
              "pipeline": {**DPPO["pipeline"], "max_env_steps": 10_000_000, "checkpoint_every": 1_000}}
    run_dir = tmp_path / "runs" / "d"
    # Output to files, not pipes: nobody reads them while the ranks run (a full pipe would block them).
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        agent = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
             "--master-addr=127.0.0.1", f"--master-port={free_port()}",
             "-m", "zoo", "run", "--config", str(_write_config(tmp_path, config))],
            cwd=tmp_path, stdout=out, stderr=err, start_new_session=True,
        )
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not ((run_dir / "metrics.jsonl").exists() and metrics_rows(run_dir, DPPO_TIMINGS)):
            assert agent.poll() is None, (tmp_path / "err.txt").read_text()
            assert time.monotonic() < deadline, "no metrics row within 120 s"
            time.sleep(0.05)
        # torchrun starts each rank in a session of its own: found now, as the agent's children.
        ranks = _children(agent.pid)
        assert len(ranks) == 2, ranks
        agent.kill()
        agent.wait()
        killed = time.monotonic()
        deadline = killed + 30
        while _alive(ranks) and time.monotonic() < deadline:
            time.sleep(0.05)
        elapsed = time.monotonic() - killed
        assert _alive(ranks) == [], f"the ranks still run {elapsed:.0f} s after their agent died"
    finally:
        for pid in [agent.pid, *_alive(ranks)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        agent.wait()
    # They stopped on their own (SIGTERM: rank 0 saved after the last row), not at the backstop 30 s later, and
    # neither died mid-save nor aborted at exit (the C++ "terminate called ..." of a group whose store was gone).
    assert elapsed < 10, elapsed
    err = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in err and "terminate called" not in err and "Fatal Python error" not in err, err
    with open(run_dir / ".lock", "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises when a process still holds it
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    assert load_weights_only(run_dir / "checkpoint.pt")["loop"]["iteration"] == len(metrics_rows(run_dir, DPPO_TIMINGS))
    assert zoo.load(run_dir).predict(np.zeros(4, dtype=np.float32)) in (0, 1)
