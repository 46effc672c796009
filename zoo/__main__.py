"""``python -m zoo ...`` works like ``zoo ...`` (torchrun launches zoo this way)."""

from .cli import console_main

console_main()
