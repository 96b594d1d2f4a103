"""Read-only one-element arrays of recurring values, made once and shared.

Why: a one-message send (the latency row's every message) carries numpy columns of one element: flags,
sys flags and reconsume times that are nearly always 0, a properties length and a unit size that repeat
from one message to the next of a producer. A fresh ``np.array([v])`` costs ~0.4 µs in a hot loop and
several times that in a broker that sleeps between messages (cold caches): a cached array is a dict
lookup. Read-only, so no holder can change what another one reads (a write raises).

Thread-safety: ``functools.lru_cache`` is; the arrays never change.
"""

from __future__ import annotations

import functools

from spark_mq.common.lazy_numpy import np

KEPT = 4096  # distinct (value, dtype) pairs kept: a unit size per body size a producer sends, the rest few


@functools.lru_cache(maxsize=KEPT)
def one_row(value: int, dtype: type[np.integer]) -> np.ndarray:
    """``np.array([value], dtype=dtype)``, shared and read-only (see the module's docstring)."""
    row = np.array([value], dtype=dtype)
    row.flags.writeable = False
    return row
