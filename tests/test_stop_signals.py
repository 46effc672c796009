"""What a second stop signal does (fast; the handler called directly): the same signal again interrupts an env
call at once, a relayed other signal does not (DPPO's supervisor relays a terminal's Ctrl-C as SIGTERM, and the
workers got the Ctrl-C too), a second Ctrl-C stops at once."""

from __future__ import annotations

import signal

import pytest

import zoo.pipelines.signals as signals
from zoo.envs.calls import EnvCallInterrupted


@pytest.fixture
def in_call(monkeypatch):
    monkeypatch.setattr(signals, "request_stop", lambda: None)
    state = {"call": ("CartPole-v1", "step")}
    monkeypatch.setattr(signals, "in_env_call", lambda: state["call"])
    return state


def test_the_first_signal_only_asks_for_a_stop(in_call, capsys):
    stop = signals.StopSignals()
    stop._handle(signal.SIGTERM, None)
    assert stop.received == signal.SIGTERM and stop.exit_code == 143
    assert "SIGTERM received" in capsys.readouterr().err


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGHUP])
def test_the_same_signal_again_interrupts_the_env_call_at_once(in_call, first):
    stop = signals.StopSignals()
    stop._handle(first, None)
    with pytest.raises(EnvCallInterrupted, match="interrupted step\\(\\) of env 'CartPole-v1'"):
        stop._handle(first, None)
    in_call["call"] = None
    stop._handle(first, None)  # outside an env call: the iteration ends by itself


def test_a_relayed_sigterm_after_a_ctrl_c_leaves_the_call_to_its_grace(in_call):
    stop = signals.StopSignals()
    stop._handle(signal.SIGINT, None)
    stop._handle(signal.SIGTERM, None)  # no EnvCallInterrupted: the worker's iteration may still end exactly
    assert stop.received == signal.SIGINT and stop.exit_code == 130


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_a_second_ctrl_c_stops_at_once_whatever_came_between(in_call, first):
    stop = signals.StopSignals()
    stop._handle(first, None)
    # A DPPO worker gets a terminal's Ctrl-C and its supervisor's SIGTERM relay of it, in either order under load:
    # the relay first, then the Ctrl-C itself, is still one Ctrl-C (it once stopped one worker at once mid-collective).
    stop._handle(signal.SIGTERM if first == signal.SIGINT else signal.SIGINT, None)
    assert stop.interrupts == 1
    with pytest.raises(KeyboardInterrupt):
        stop._handle(signal.SIGINT, None)
