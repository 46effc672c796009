"""zoo: a plugin-based reinforcement-learning algorithm zoo (PyTorch + Gymnasium)."""

__version__ = "0.1.0"
