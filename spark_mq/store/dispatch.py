"""What dispatch derives from messages: consume queue tag codes and index keys.

Computed for a whole batch at once from the property strings (one buffer, many ranges):
the tag code is ``TAGS.hashCode()`` (0 without tags) and the index keys are ``topic#key``
for every space-separated key in KEYS and for UNIQ_KEY.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_mq.common.java_hash import java_hash, java_hashes
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY, scan_properties
from spark_mq.store.index_file import positive_hashes

_SPACE = ord(KEY_SEPARATOR)


@dataclass(frozen=True)
class DispatchInfo:
    tag_codes: np.ndarray  # int64 per message
    key_rows: np.ndarray  # message index of each index key
    key_hashes: np.ndarray  # positive int32 hash of "topic#key" per index key


def split_ranges(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int) -> tuple[np.ndarray, ...]:
    """Split byte ranges on ``sep``; returns (row, token start, token end) of non-empty tokens.

    Rows with ``start < 0`` are absent and yield nothing.
    """
    present = np.flatnonzero(starts >= 0)
    s, e = starts[present], ends[present]
    lengths = e - s
    total = int(lengths.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    seg = np.zeros(s.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=seg[1:])
    idx = np.repeat(s - seg, lengths) + np.arange(total, dtype=np.int64)
    cuts = idx[buf[idx] == sep]
    tok_start = np.sort(np.concatenate((s, cuts + 1)))
    tok_end = np.sort(np.concatenate((cuts, e)))
    keep = tok_end > tok_start
    tok_start, tok_end = tok_start[keep], tok_end[keep]
    rows = present[np.searchsorted(s, tok_start, side="right") - 1]
    return rows, tok_start, tok_end


def dispatch_info(
    buf: np.ndarray, props_start: np.ndarray, props_end: np.ndarray, topic_prefix_hashes: int | np.ndarray
) -> DispatchInfo:
    """Tag codes and index keys of messages whose property strings are ranges of ``buf``.

    ``topic_prefix_hashes`` is ``hash(topic + "#")``, one for all or one per message.
    """
    scan = scan_properties(buf, props_start, props_end)
    tag_s, tag_e = scan.find(TAGS)
    has_tag = np.flatnonzero(tag_s >= 0)
    tag_codes = np.zeros(props_start.size, dtype=np.int64)
    if has_tag.size:
        tag_codes[has_tag] = java_hashes(buf, tag_s[has_tag], tag_e[has_tag]).astype(np.int64)

    uniq_s, uniq_e = scan.find(UNIQ_KEY)
    keys_s, keys_e = scan.find(KEYS)
    k_rows, k_start, k_end = split_ranges(buf, keys_s, keys_e, _SPACE)
    has_uniq = np.flatnonzero((uniq_s >= 0) & (uniq_e > uniq_s))
    rows = np.concatenate((has_uniq, k_rows))
    starts = np.concatenate((uniq_s[has_uniq], k_start))
    ends = np.concatenate((uniq_e[has_uniq], k_end))
    order = np.argsort(rows, kind="stable")  # index keys in message order
    rows, starts, ends = rows[order], starts[order], ends[order]
    prefix = topic_prefix_hashes if np.isscalar(topic_prefix_hashes) else np.asarray(topic_prefix_hashes)[rows]
    hashes = positive_hashes(java_hashes(buf, starts, ends, prefix)) if rows.size else np.zeros(0, np.int32)
    return DispatchInfo(tag_codes, rows, hashes)


def topic_prefix_hash(topic: str) -> int:
    return java_hash(topic + "#")


def batch_dispatch_info(batch: MessageBatch) -> DispatchInfo:
    """Dispatch info of a batch about to be appended (all one topic)."""
    n = len(batch)
    lengths = np.fromiter(map(len, batch.properties), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(batch.properties), dtype=np.uint8)
    return dispatch_info(buf, ends - lengths, ends, topic_prefix_hash(batch.topic))
