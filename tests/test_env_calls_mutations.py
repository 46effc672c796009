"""The env watchdog (``zoo.envs.calls``), one promise a test, each fast: a long call is interrupted only after a stop,
the timer starts again at every call, zoo's own errors from inside an env call stay zoo's, a SIGALRM that arrives
after its call returned does nothing, and a broken async env is closed by terminating its workers.

Each test fails when the one line that keeps its promise is changed (a mutation audit found none did before).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from zoo.envs import calls
from zoo.envs.calls import EnvCallInterrupted, GuardedCalls, request_stop, watch_calls
from zoo.envs.factory import make_vector_env
from zoo.errors import ConfigError, EnvError, NonFiniteError

ACTION = np.zeros(1, dtype=np.int64)


def _cartpole(step=None, reset=None) -> GuardedCalls:
    """A guarded one-env CartPole whose step or reset is replaced by ``step`` / ``reset``."""
    venv = GuardedCalls(gym.make_vec("CartPole-v1", 1, vectorization_mode="sync"), "CartPole-v1")
    if step is not None:
        venv.env.step = step
    if reset is not None:
        venv.env.reset = reset
    return venv


@pytest.fixture
def short_grace(monkeypatch):
    monkeypatch.setattr(calls, "STOP_GRACE_S", 0.2)


def test_a_long_call_without_a_stop_is_not_interrupted(short_grace):
    # Five times the stop grace and no stop requested, no timeout: the call returns what the env returned.
    venv = _cartpole(step=lambda actions: (time.sleep(1.0), "done")[1])
    with watch_calls(None):
        assert venv.step(ACTION) == "done"
    assert not venv.broken


def test_a_long_call_after_a_stop_is_interrupted(short_grace):
    venv = _cartpole(step=lambda actions: time.sleep(30))
    start = time.monotonic()
    with watch_calls(None), pytest.raises(EnvCallInterrupted):
        request_stop()
        venv.step(ACTION)
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("call", ["step", "reset"])
def test_many_short_calls_longer_than_the_timeout_together_do_not_time_out(call):
    # 0.1 s a call, 10 calls back to back: each a fifth of the 0.5 s limit, together twice it.
    venv = _cartpole(step=lambda actions: time.sleep(0.1), reset=lambda **kwargs: time.sleep(0.1))
    with watch_calls(0.5):
        for _ in range(10):
            venv.step(ACTION) if call == "step" else venv.reset()
    assert not venv.broken


@pytest.mark.parametrize("call", ["step", "reset"])
def test_one_call_past_the_timeout_times_out(call):
    venv = _cartpole(step=lambda actions: time.sleep(30), reset=lambda **kwargs: time.sleep(30))
    start = time.monotonic()
    with watch_calls(0.3), pytest.raises(EnvError, match=rf"did not return from {call}\(\) within 0.3 s"):
        venv.step(ACTION) if call == "step" else venv.reset()
    assert time.monotonic() - start < 3 and venv.broken


def _raise(error: BaseException):
    def call(*args, **kwargs):
        raise error
    return call


@pytest.mark.parametrize("call", ["step", "reset"])
@pytest.mark.parametrize("error", [NonFiniteError("env 'x' returned a non-finite reward"), ConfigError("bad key")])
def test_zoo_s_own_errors_from_inside_an_env_call_stay_zoo_s(call, error):
    # e.g. zoo's finite check in a wrapper of the user's env, or a config error raised by a zoo factory's env
    venv = _cartpole(step=_raise(error), reset=_raise(error))
    with pytest.raises(type(error)) as raised:
        venv.step(ACTION) if call == "step" else venv.reset()
    assert raised.value is error and not isinstance(raised.value, EnvError)


@pytest.mark.parametrize("call", ["step", "reset"])
def test_the_user_s_errors_become_one_env_error_line(call):
    venv = _cartpole(step=_raise(ValueError("boom")), reset=_raise(ValueError("boom")))
    with pytest.raises(EnvError, match=rf"env 'CartPole-v1' raised in {call}\(\): ValueError: boom"):
        venv.step(ACTION) if call == "step" else venv.reset()


@pytest.mark.parametrize("expired", ["timeout", "stop"])
def test_a_sigalrm_after_its_call_returned_does_nothing_and_the_watchdog_still_works(expired):
    # The watchdog decided, then the call returned before the signal arrived: the main thread is in zoo's code.
    venv = _cartpole(step=lambda actions: time.sleep(30))
    with watch_calls(0.3):
        calls._CALLS.expired = expired
        signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
        time.sleep(0.05)  # the handler runs here, outside any env call: nothing may be raised
        assert calls._CALLS.expired is None
        with pytest.raises(EnvError, match="did not return from step"):  # the next hung call still times out
            venv.step(ACTION)


def test_a_broken_async_env_is_closed_by_terminating_its_workers(monkeypatch):
    venv = make_vector_env("CartPole-v1", 1, seed=0, mode="async")
    guarded = venv.env
    assert isinstance(guarded, GuardedCalls)
    asked = []
    real_close = gym.vector.AsyncVectorEnv.close

    def close(self, **kwargs):
        asked.append(kwargs.get("terminate", False))
        return real_close(self, **kwargs)

    monkeypatch.setattr(gym.vector.AsyncVectorEnv, "close", close)
    venv.reset()
    with pytest.raises(EnvError):
        venv.step(np.array([7]))  # not an action of CartPole's: its worker raises
    assert guarded.broken
    venv.close()
    assert asked == [True]
    pids = [process.pid for process in guarded.env.unwrapped.processes]
    assert not any(_alive(pid) for pid in pids)


def test_an_async_env_that_did_not_break_is_closed_gently(monkeypatch):
    venv = make_vector_env("CartPole-v1", 1, seed=0, mode="async")
    asked = []
    real_close = gym.vector.AsyncVectorEnv.close
    monkeypatch.setattr(gym.vector.AsyncVectorEnv, "close",
                        lambda self, **kwargs: (asked.append(kwargs.get("terminate", False)),
                                                real_close(self, **kwargs))[1])
    venv.reset()
    venv.step(np.array([1]))
    venv.close()
    assert asked == [False]


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
