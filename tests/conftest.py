"""Puts ``tests/`` on ``sys.path``: the shared process helpers are ``import servers`` from any test.

Hypothesis runs under one profile: no per-example deadline (a wall-clock limit that a loaded
machine breaks, not the code) and a failure prints its ``@reproduce_failure`` blob, so the
random example that failed can be replayed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile("spark_mq", deadline=None, print_blob=True)
settings.load_profile("spark_mq")
