"""What a Field declaration turns into (fast): every attribute derived from ``fields``, frozen keys with choices
or ranges included."""

from __future__ import annotations

from zoo.config.schema import Field, derived
from zoo.policies.ppo import PPOPolicy
from zoo.policies.sac import SACPolicy


def test_every_attribute_is_derived_from_the_fields():
    fields = {
        "activation": Field("tanh", "the activation", choices=("tanh", "relu"), frozen=True),
        "hidden_sizes": Field([64, 64], "layer widths", range=(1, None), frozen=True),
        "gamma": Field(0.99, "discount", range=(0.0, 1.0)),
        "clip": Field(None, "optional clip", type=float),
        "net.width": Field(8, "nested", frozen=True),
    }
    got = derived(fields)
    assert got["frozen_keys"] == ("activation", "hidden_sizes", "net.width")
    assert got["config_choices"] == {"activation": ("tanh", "relu")}
    assert got["config_ranges"] == {"hidden_sizes": (1, None), "gamma": (0.0, 1.0)}
    assert got["config_types"] == {"clip": float}
    assert got["default_config"] == {"activation": "tanh", "hidden_sizes": [64, 64], "gamma": 0.99, "clip": None,
                                     "net": {"width": 8}}
    assert got["config_docs"]["net.width"] == "nested"


def test_built_in_keys_that_shape_the_saved_state_are_frozen_whatever_else_they_declare():
    for cls in (PPOPolicy, SACPolicy):
        assert "activation" in cls.config_choices and "activation" in cls.frozen_keys, cls
        assert "hidden_sizes" in cls.frozen_keys, cls
        assert "learning_rate" not in cls.frozen_keys, cls
