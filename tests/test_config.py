"""Config loading, merging, validation, ranges, --set overrides and atomic YAML dumps."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from easydict import EasyDict

from zoo.config import (
    Range,
    apply_overrides,
    check_ranges,
    deep_merge,
    dump_config,
    load_config_file,
    parse_override,
    to_plain,
    validate_keys_and_types,
)
from zoo.errors import ConfigError

SAMPLE = {
    "exp_name": "ppo_cartpole",
    "seed": 0,
    "env": {"id": "CartPole-v1", "num_envs": 4, "kwargs": {}},
    "policy": {"type": "ppo", "learning_rate": 3e-4, "gamma": 0.99, "hidden_sizes": [64, 64], "clip": None},
    "pipeline": {"max_env_steps": 100000, "normalize": True},
}


def config_error(function, *args) -> str:
    with pytest.raises(ConfigError) as caught:
        function(*args)
    return str(caught.value)


# ---------------------------------------------------------------- loading


def test_python_config_runs_with_file_set_and_returns_nested_easydict(tmp_path):
    path = tmp_path / "ppo.py"
    path.write_text(
        "import os\n"
        "from easydict import EasyDict\n"
        "config = EasyDict(dict(exp_name=os.path.basename(__file__), policy=dict(lr=1e-3, sizes=(64, 64))))\n"
    )
    config = load_config_file(path)
    assert type(config) is EasyDict and type(config.policy) is EasyDict
    assert config.exp_name == "ppo.py"
    assert config.policy.lr == 0.001
    assert config == {"exp_name": "ppo.py", "policy": {"lr": 0.001, "sizes": [64, 64]}}


def test_yaml_and_json_configs_load_with_real_numbers(tmp_path):
    (tmp_path / "c.yaml").write_text("policy:\n  lr: 1e-3\n  steps: 010\n  flag: true\n  mode: on\n  day: 2024-01-01\n")
    assert load_config_file(tmp_path / "c.yaml") == {
        "policy": {"lr": 0.001, "steps": 10, "flag": True, "mode": "on", "day": "2024-01-01"}
    }
    (tmp_path / "c.yml").write_text("a: 1\n")
    assert load_config_file(tmp_path / "c.yml").a == 1
    (tmp_path / "c.json").write_text(json.dumps(SAMPLE))
    assert load_config_file(tmp_path / "c.json") == SAMPLE


def test_load_errors_name_the_problem_and_the_fix(tmp_path):
    missing = tmp_path / "nope.py"
    assert config_error(load_config_file, missing) == f"config file '{missing}' not found: check the path"

    toml = tmp_path / "c.toml"
    toml.write_text("a = 1\n")
    assert config_error(load_config_file, toml) == (
        f"unsupported config file extension '.toml' for '{toml}': use .py, .yaml, .yml or .json"
    )

    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\nconfig = dict(a=\n")
    assert config_error(load_config_file, broken).startswith(f"syntax error in config file '{broken}:2': ")

    raising = tmp_path / "raising.py"
    raising.write_text("a = 1\nconfig = dict(a=1 / 0)\n")
    assert config_error(load_config_file, raising) == (
        f"config file '{raising}:2' raised ZeroDivisionError: division by zero: fix the config file"
    )

    no_config = tmp_path / "no_config.py"
    no_config.write_text("cfg = dict(a=1)\n")
    assert config_error(load_config_file, no_config) == (
        f"config file '{no_config}' does not define a variable named 'config': add `config = dict(...)`"
    )

    a_list = tmp_path / "list.yaml"
    a_list.write_text("- 1\n- 2\n")
    assert config_error(load_config_file, a_list) == (
        f"config in '{a_list}' must be a mapping (dict / EasyDict / YAML mapping), got list: "
        "make the top level a mapping of sections such as env, policy"
    )

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("a: 1\nb: [1, 2\nc: 3\n")
    assert config_error(load_config_file, bad_yaml).startswith(f"syntax error in config file '{bad_yaml}:")
    assert config_error(load_config_file, bad_yaml).endswith(": fix the YAML")

    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"a": 1,\n "b": }\n')
    assert config_error(load_config_file, bad_json) == (
        f"syntax error in config file '{bad_json}:2': Expecting value: fix the JSON"
    )

    int_keys = tmp_path / "keys.yaml"
    int_keys.write_text("env:\n  1: a\n")
    assert (
        config_error(load_config_file, int_keys)
        == f"config key 1 under 'env' in '{int_keys}' must be a string: quote it"
    )


# ---------------------------------------------------------------- merging and validation


def test_deep_merge_merges_sections_replaces_leaves_and_mutates_nothing():
    base = EasyDict({"policy": {"lr": 1e-3, "sizes": [64, 64], "opt": {"eps": 1e-8, "betas": (0.9, 0.99)}}, "seed": 0})
    override = {"policy": {"lr": 3e-4, "opt": {"eps": 1e-5}, "sizes": [32]}, "seed": 7, "extra": {"a": 1}}
    base_before, override_before = to_plain(base), to_plain(override)
    merged = deep_merge(base, override)
    assert merged == {
        "policy": {"lr": 3e-4, "sizes": [32], "opt": {"eps": 1e-5, "betas": (0.9, 0.99)}},
        "seed": 7,
        "extra": {"a": 1},
    }
    assert merged.policy.opt.eps == 1e-5  # attribute access works on merged sections
    merged.policy.sizes.append(16)
    merged.extra.a = 2
    assert to_plain(base) == base_before and to_plain(override) == override_before
    # A mapping replaces a leaf and a leaf replaces a mapping.
    assert deep_merge({"a": 1, "b": {"c": 1}}, {"a": {"x": 1}, "b": 5}) == {"a": {"x": 1}, "b": 5}


def test_valid_config_passes_including_coercions_open_dicts_and_none_defaults():
    user = {
        "policy": {"learning_rate": 1, "hidden_sizes": (32,), "clip": "anything"},
        "env": {"kwargs": {"render_mode": "rgb_array", "nested": {"x": 1}}},
        "pipeline": {"normalize": False},
    }
    validate_keys_and_types(user, SAMPLE)  # raises on failure


def test_unknown_key_suggests_the_nearest_valid_key():
    message = config_error(validate_keys_and_types, {"policy": {"learnig_rate": 1e-3}}, SAMPLE)
    assert message == "unknown config key 'policy.learnig_rate': did you mean 'policy.learning_rate'?"
    assert config_error(validate_keys_and_types, {"polcy": {}}, SAMPLE) == (
        "unknown config key 'polcy': did you mean 'policy'?"
    )
    assert config_error(validate_keys_and_types, {"env": {"zzz": 1}}, SAMPLE) == (
        "unknown config key 'env.zzz': valid keys under 'env': id, num_envs, kwargs"
    )


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"policy": {"gamma": "abc"}}, "config key 'policy.gamma' must be a float, got str 'abc'"),
        ({"policy": {"gamma": True}}, "config key 'policy.gamma' must be a float, got bool True"),
        ({"seed": True}, "config key 'seed' must be an int, got bool True"),
        ({"seed": 1.5}, "config key 'seed' must be an int, got float 1.5"),
        (
            {"pipeline": {"max_env_steps": 1e6}},
            "config key 'pipeline.max_env_steps' must be an int, got float 1000000.0: write 1000000",
        ),
        ({"pipeline": {"normalize": 1}}, "config key 'pipeline.normalize' must be a bool (true/false), got int 1"),
        ({"policy": {"hidden_sizes": 64}}, "config key 'policy.hidden_sizes' must be a list, got int 64"),
        ({"policy": {"type": None}}, "config key 'policy.type' must be a str, got NoneType None"),
        ({"env": 3}, "config key 'env' must be a mapping (section), got int 3"),
        ({"env": {"kwargs": [1]}}, "config key 'env.kwargs' must be a mapping (section), got list [1]"),
    ],
)
def test_type_errors_say_what_was_expected_and_what_was_given(user, message):
    assert config_error(validate_keys_and_types, user, SAMPLE) == message


def test_check_ranges_reports_the_broken_bound_and_skips_missing_keys():
    rules = {
        "policy.gamma": Range(0, 1),
        "policy.learning_rate": Range(0, None, low_inclusive=False),
        "env.num_envs": Range(1, 64, high_inclusive=False),
        "policy.not_there": Range(0, 1),
        "policy.clip": Range(0, 1),  # None means "disabled": skipped
    }
    check_ranges(SAMPLE, rules)
    cases = [
        ({"policy": {"gamma": 1.5}}, "config key 'policy.gamma' = 1.5 is out of range: must be <= 1"),
        ({"policy": {"gamma": -0.1}}, "config key 'policy.gamma' = -0.1 is out of range: must be >= 0"),
        ({"policy": {"learning_rate": 0.0}}, "config key 'policy.learning_rate' = 0.0 is out of range: must be > 0"),
        ({"env": {"num_envs": 64}}, "config key 'env.num_envs' = 64 is out of range: must be < 64"),
        (
            {"policy": {"gamma": float("nan")}},
            "config key 'policy.gamma' = nan is out of range: must be a number, not NaN",
        ),
        ({"policy": {"gamma": "x"}}, "config key 'policy.gamma' must be a number, got str 'x'"),
    ]
    for override, message in cases:
        assert config_error(check_ranges, deep_merge(SAMPLE, override), rules) == message
    check_ranges(deep_merge(SAMPLE, {"policy": {"gamma": 1}, "env": {"num_envs": 1}}), rules)  # bounds inclusive
    with pytest.raises(ValueError, match="greater than high"):
        Range(2, 1)


# ---------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("seed=1", ("seed", 1)),
        ("policy.gamma=-3", ("policy.gamma", -3)),
        ("a.b=-2.5", ("a.b", -2.5)),
        ("policy.learning_rate=1e-3", ("policy.learning_rate", 0.001)),
        ("x=-1E+5", ("x", -100000.0)),
        ("x=.5", ("x", 0.5)),
        ("x=010", ("x", 10)),
        ("flag=true", ("flag", True)),
        ("flag=False", ("flag", False)),
        ("mode=on", ("mode", "on")),
        ("sizes=[1, 2]", ("sizes", [1, 2])),
        ("sizes=[1e-3, -2]", ("sizes", [0.001, -2])),
        ("policy.type=ppo", ("policy.type", "ppo")),
        ("name='1e-3'", ("name", "1e-3")),
        ("clip=null", ("clip", None)),
        ("pipeline.stop_return=None", ("pipeline.stop_return", None)),
        ("name=none", ("name", "none")),
        ("exp_name=", ("exp_name", "")),
        (" env.id = CartPole-v1 ", ("env.id", "CartPole-v1")),
        ("env.id=a=b", ("env.id", "a=b")),
        ("bad=[1, 2", ("bad", "[1, 2")),
    ],
)
def test_parse_override_values(text, expected):
    key, value = parse_override(text)
    assert (key, value) == expected
    assert type(value) is type(expected[1])


@pytest.mark.parametrize("text", ["policy.gamma", "=1", "a..b=1", ".a=1"])
def test_parse_override_bad_syntax(text):
    assert config_error(parse_override, text) == (
        f"bad override '{text}': expected KEY=VALUE, e.g. --set policy.learning_rate=3e-4"
    )


def test_apply_overrides_returns_a_new_config_and_creates_sections():
    config = EasyDict(SAMPLE)
    result = apply_overrides(config, ["policy.gamma=0.9", "new.section.key=1", ("seed", 3)])
    assert result.policy.gamma == 0.9 and result.new.section.key == 1 and result.seed == 3
    assert result.env.kwargs == {} and result.policy.hidden_sizes == [64, 64]
    assert config.policy.gamma == 0.99 and "new" not in config
    result.policy.hidden_sizes.append(1)
    assert config.policy.hidden_sizes == [64, 64]
    assert config_error(apply_overrides, config, ["seed.x=1"]) == (
        "cannot set 'seed.x': 'seed' is int 0, not a section: override 'seed' itself"
    )
    assert config_error(apply_overrides, config, ["seed"]).startswith("bad override 'seed'")


# ---------------------------------------------------------------- dumping


def test_dump_round_trips_through_load(tmp_path):
    config = EasyDict(SAMPLE)
    config.policy.tiny = 1e-8
    config.policy.tag = "1e-3"  # a string that looks like a number must stay a string
    config.policy.word = "on"
    config.policy.big = 10**20
    path = dump_config(config, tmp_path / "run" / "config.yaml")
    assert path == tmp_path / "run" / "config.yaml"
    assert load_config_file(path) == to_plain(config)
    text = path.read_text()
    assert text.startswith("exp_name: ppo_cartpole\nseed: 0\nenv:\n  id: CartPole-v1\n")  # block style, in order
    assert os.listdir(tmp_path / "run") == ["config.yaml"]  # no temporary file left behind


def test_dump_converts_tuples_and_numpy_and_rejects_unwritable_values(tmp_path):
    config = {"a": (1, 2), "b": np.float32(0.5), "c": np.int64(3), "d": np.array([1, 2]), "e": {"f": np.bool_(True)}}
    path = dump_config(config, tmp_path / "c.yaml")
    loaded = load_config_file(path)
    assert loaded == {"a": [1, 2], "b": 0.5, "c": 3, "d": [1, 2], "e": {"f": True}}
    assert type(loaded.c) is int and type(loaded.e.f) is bool
    assert config_error(dump_config, {"policy": {"net": object}}, tmp_path / "x.yaml") == (
        "config key 'policy.net' holds type <class 'object'>, which cannot be written to YAML: "
        "use a plain value (number, string, bool, list, mapping) or a registered name"
    )
    assert not (tmp_path / "x.yaml").exists()
    # Overwriting replaces the whole file.
    dump_config({"z": 1}, path)
    assert load_config_file(path) == {"z": 1}


def test_to_plain_returns_plain_dicts_and_lists():
    plain = to_plain(EasyDict({"a": {"b": ({"c": 1},)}, "d": np.float64(math.pi)}))
    assert plain == {"a": {"b": [{"c": 1}]}, "d": math.pi}
    assert type(plain) is dict and type(plain["a"]) is dict and type(plain["a"]["b"][0]) is dict
    assert type(plain["d"]) is float


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.py")),
                         ids=lambda p: p.name)
def test_every_shipped_config_resolves(path):
    from zoo.config.resolve import resolve_config

    cfg = resolve_config(load_config_file(path), config_dir=path.parent)
    assert cfg.exp_name == path.stem and cfg.policy.type and cfg.pipeline.type
