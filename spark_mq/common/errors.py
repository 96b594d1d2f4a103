"""One exception hierarchy for the whole project.

Expected outcomes (no message yet, offset too small) are status values on results, not
exceptions; these classes are for broken inputs and broken invariants, and every message
says what to do about it.
"""

from __future__ import annotations


class SparkMQError(Exception):
    """Base of every error raised by spark_mq."""


class ConfigError(SparkMQError):
    """A configuration file or option is invalid (unknown key, bad value)."""


class MessageValidationError(SparkMQError):
    """A message was rejected before anything was written (bad topic, oversized body...)."""


class StoreError(SparkMQError):
    """The message store cannot do what was asked."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's lock file."""


class StoreNotWritableError(StoreError):
    """Writes are refused (disk over its warning ratio, store shutting down)."""


class CorruptFileError(StoreError):
    """A store file breaks its format; names the file and the offset."""

    def __init__(self, path: str, offset: int, why: str) -> None:
        super().__init__(f"{path}: corrupt at offset {offset}: {why}")
        self.path = path
        self.offset = offset
