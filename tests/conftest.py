"""Puts ``tests/`` on ``sys.path``: the shared process helpers are ``import servers`` from any test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
