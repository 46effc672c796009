"""popgym's tasks through zoo (``PopGym-v0``, ``env.kwargs.task``; the memory benchmark's RepeatFirstEasy): the
observations one-hot and stacked as asked, an unknown task and a missing package each one line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from zoo import train
from zoo.errors import ZooError


def _run(tmp_path, **env) -> dict:
    return train({"exp_name": "pg", "runs_dir": str(tmp_path), "env": {"id": "PopGym-v0", **env},
                  "policy": {"type": "ppo", "recurrent": "lstm", "recurrent_size": 8, "sequence_length": 8,
                             "hidden_sizes": [8], "epochs": 1, "minibatch_size": 32},
                  "pipeline": {"num_envs": 2, "rollout_steps": 16, "max_env_steps": 64, "eval_every": 0}})


def test_without_popgym_the_env_says_which_extra_installs_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "popgym", None)  # import popgym raises ModuleNotFoundError
    with pytest.raises(ZooError, match=r"needs the module 'popgym', which is not installed: pip install "
                                       r"'zoo-rl\[popgym\]'"):
        _run(tmp_path)
    with pytest.raises(ZooError, match=r"pip install 'zoo-rl\[popgym\]'"):
        train({"exp_name": "pg", "runs_dir": str(tmp_path), "env": {"id": "popgym:popgym-RepeatFirstEasy-v0"},
               "policy": {"type": "ppo"}})


def test_a_task_one_hot_and_stacked_and_an_unknown_task(tmp_path):
    pytest.importorskip("popgym")
    from zoo.envs.partial import make_popgym

    env = make_popgym("RepeatFirstEasy", frames=3)
    first, _ = env.reset(seed=0)
    assert env.observation_space.shape == (12,) and first.shape == (12,)
    assert np.array_equal(first[:4], first[8:]) and first[:4].sum() == 1  # the first repeated, one-hot
    second = env.step(0)[0]
    assert np.array_equal(second[:8], first[4:])  # oldest first: the window moved by one frame
    assert _run(tmp_path / "a", kwargs={"task": "RepeatPreviousEasy"})["env_steps"] == 64
    with pytest.raises(ZooError, match="popgym has no task 'RepeatFirstEZ'.*RepeatFirstEasy"):
        _run(tmp_path / "b", kwargs={"task": "RepeatFirstEZ"})
