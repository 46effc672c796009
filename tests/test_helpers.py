"""The shared test helpers (tests/helpers.py, issue 28 item 7): defined once, and as strict as the copies they
replaced."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from helpers import TIMINGS, metrics_rows, new_policy, write_config

from zoo.policies import PPOPolicy

TESTS = Path(__file__).resolve().parent
SHARED = {"_free_port", "free_port"}


def test_no_test_module_keeps_its_own_copy_of_a_shared_helper():
    copies = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "helpers.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("test_") or len(node.body) > 3:
                continue  # a test reads the files its own way; a helper is a line or two
            source = ast.unparse(node)
            if node.name in SHARED or ("metrics.jsonl" in source and "json.loads" in source):
                copies.append(f"{path.relative_to(TESTS)}:{node.name}")
    assert copies == []


def test_metrics_rows_reads_every_line_as_written(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1, "wall_time": 0.5, "sps": 9}\n{"iteration": 2}\n')
    assert metrics_rows(tmp_path) == [{"iteration": 1, "wall_time": 0.5, "sps": 9}, {"iteration": 2}]
    assert metrics_rows(tmp_path, TIMINGS) == [{"iteration": 1}, {"iteration": 2}]
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2, "env_st')
    with pytest.raises(json.JSONDecodeError):  # read_rows would forgive the cut line: a test must not
        metrics_rows(tmp_path)


def test_write_config_and_new_policy(tmp_path):
    assert write_config(tmp_path, {"seed": 3}).read_text() == "config = {'seed': 3}\n"
    assert write_config(tmp_path, "config = {}\n", "other.py").read_text() == "config = {}\n"
    space = gym.spaces.Box(-1.0, 1.0, (3,))
    one, two = (new_policy(PPOPolicy, space, gym.spaces.Discrete(2), seed=5, hidden_sizes=[4]) for _ in range(2))
    assert one.cfg.hidden_sizes == [4] and one.cfg.epochs == PPOPolicy.default_config["epochs"]
    assert all(torch.equal(a, b) for a, b in zip(one.model.parameters(), two.model.parameters(), strict=True))
