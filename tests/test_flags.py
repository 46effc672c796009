"""zoo's environment flags are switches (zoo.config.flags): the usual spellings of on and off, anything else one line
and exit 2 -- never a silent guess (``ZOO_DEBUG=false`` once turned tracebacks on)."""

from __future__ import annotations

import pytest

from zoo.cli import main
from zoo.config.flags import debug, env_flag
from zoo.errors import ConfigError


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "On", " on "])
def test_the_spellings_of_on(value):
    assert env_flag("ZOO_X", {"ZOO_X": value}) is True


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "OFF", " off "])
def test_the_spellings_of_off_and_unset(value):
    assert env_flag("ZOO_X", {"ZOO_X": value}) is False
    assert env_flag("ZOO_X", {}) is False


@pytest.mark.parametrize("value", ["2", "maybe", "enabled", "-1", "o n"])
def test_anything_else_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match=rf"^ZOO_X='{value}' is not a switch: set ZOO_X to 1 \(or true, yes, on\)"):
        env_flag("ZOO_X", {"ZOO_X": value})


def test_zoo_debug_false_is_off_and_a_misspelt_zoo_debug_stops_zoo_at_once(monkeypatch, capsys, tmp_path):
    missing = str(tmp_path / "missing.py")
    monkeypatch.setenv("ZOO_DEBUG", "false")
    assert not debug()
    assert main(["run", "--config", missing]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("zoo: error:") and err.count("\n") == 1
    monkeypatch.setenv("ZOO_DEBUG", "1")
    assert main(["run", "--config", missing]) == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("ZOO_DEBUG", "verbose")
    assert not debug()  # where zoo cannot say so, off
    assert main(["run", "--config", missing]) == 2
    assert capsys.readouterr().err == ("zoo: error: ZOO_DEBUG='verbose' is not a switch: set ZOO_DEBUG to 1 (or true, "
                                       "yes, on), to 0 (or false, no, off), or unset it\n")
