"""Small JSON state files (topics, offsets, KV config), written atomically.

A write goes to a temporary file, is fsynced, renamed over the old one, and the directory is
fsynced: a crash leaves either the old or the new content, never a torn file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_mq.common.atomic_file import replace_file
from spark_mq.common.errors import CorruptFileError


class JsonConfigFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, default: Any = None) -> Any:
        """The stored value, or ``default`` when the file does not exist yet."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return default
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise CorruptFileError(str(self.path), e.pos, f"invalid JSON ({e.msg}); restore it or delete it") from None

    def persist(self, value: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(self.path, json.dumps(value, indent=2, sort_keys=True).encode())


class JsonSectionsFile(JsonConfigFile):
    """A JSON object file that several owners share, each writing its own top-level keys: ``persist``
    merges the keys given into what the file holds (``delayOffset.json``: the schedule service's
    ``offsetTable`` beside the retry scheduler's ``pendingRetries``)."""

    def persist(self, value: Any) -> None:
        merged = self.load({}) or {}
        merged.update(value)
        super().persist(merged)
