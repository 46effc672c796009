"""The off-policy plugin example (examples/offpolicy_plugin: one module plus a config) trains, resumes exactly and
exports, as docs/plugins.md promises a new off-policy algorithm does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import metrics_rows

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "offpolicy_plugin"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _zoo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_tiny_dqn_learns_resumes_exactly_and_exports(tmp_path):
    config = str(EXAMPLE / "tiny_dqn_cartpole.py")
    common = ["--set", "pipeline.eval_every=0", "--set", "pipeline.checkpoint_every=1", "-q"]
    whole = _zoo("run", "--config", config, "--set", f"runs_dir={tmp_path / 'a'}", "--set",
                 "pipeline.max_env_steps=10000", *common)
    assert whole.returncode == 0, whole.stderr
    rows = metrics_rows(tmp_path / "a" / "tiny_dqn_cartpole")
    # seeds 0-2 here: 60, 74, 70 (random play: about 22)
    assert rows[-1]["env_steps"] == 10_000 and rows[-1]["episode_return_mean"] >= 45.0
    # The same run stopped by SIGTERM after 5 iterations (it saves), then resumed: the rows of the unbroken run.
    run = tmp_path / "b" / "tiny_dqn_cartpole"
    stopped = subprocess.Popen([sys.executable, "-m", "zoo", "run", "--config", config, "--set",
                                f"runs_dir={tmp_path / 'b'}", "--set", "pipeline.max_env_steps=10000", *common],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_lines(run / "metrics.jsonl")) < 5:
        time.sleep(0.05)
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == 143, stopped.stderr.read()
    assert 5 <= len(metrics_rows(run)) < 10
    resumed = _zoo("run", "--resume", str(run), "-q")
    assert resumed.returncode == 0, resumed.stderr
    timing = {"wall_time", "sps"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in metrics_rows(run)] == \
        [{k: v for k, v in r.items() if k not in timing} for r in rows]
    exported = _zoo("export", str(run), "--format", "torchscript", "--check", "64", "--trust-imports")
    assert exported.returncode == 0, exported.stderr
    assert "actions identical" in exported.stdout


def test_a_policy_that_does_not_say_its_pipelines_is_refused_in_one_line(tmp_path, capsys):
    from zoo.cli import main
    from zoo.policies import Policy
    from zoo.registry import POLICY_REGISTRY

    class Forgetful(Policy):  # an off-policy learner that forgot `pipelines`: never handed a Rollout
        pass

    POLICY_REGISTRY.register("test_forgetful", Forgetful, source="tests")
    try:
        code = main(["run", "--config", str(EXAMPLE / "tiny_dqn_cartpole.py"), "--set", "policy={type: test_forgetful}",
                     "--set", f"runs_dir={tmp_path}"])
    finally:
        POLICY_REGISTRY.unregister("test_forgetful")
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "zoo: error: policy 'test_forgetful' declares no pipelines: its class must set `pipelines`, e.g. pipelines = "
        "('serial_onpolicy',) (or ('serial_offpolicy',) for a replay-based policy)")
    assert not list(tmp_path.iterdir())
