"""Puts ``tests/`` on ``sys.path``: the shared process helpers are ``import servers`` from any test;
``api`` is the one fixture every kind of test shares: a blocking client of the remoting requests.

Hypothesis runs under one profile: no per-example deadline (a wall-clock limit that a loaded
machine breaks, not the code) and a failure prints its ``@reproduce_failure`` blob, so the
random example that failed can be replayed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings

from spark_mq.client.sync_api import SyncMQClientAPI

sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile("spark_mq", deadline=None, print_blob=True)
settings.load_profile("spark_mq")


@pytest.fixture
def api():
    with SyncMQClientAPI(timeout=10.0) as client:
        yield client
