"""``python -m zoo ...`` works like ``zoo ...`` (torchrun launches zoo this way)."""

import sys

from .cli import main

sys.exit(main())
