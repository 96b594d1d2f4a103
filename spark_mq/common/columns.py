"""Columns: a frozen dataclass of equal-length numpy arrays, one row per item.

Decoded units and the units a recovery walk found are tables of this shape; their rows are
selected together (a filter's survivors, one queue's units), so ``take`` is written once here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeVar

from spark_mq.common.lazy_numpy import np

C = TypeVar("C", bound="Columns")


@dataclass(frozen=True)
class Columns:
    """Base of dataclasses whose every field is a numpy array of one length: the rows of a table."""

    def take(self: C, rows: np.ndarray) -> C:
        """The rows at ``rows`` (indices or a boolean mask), in that order."""
        return type(self)(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})
