"""Many units of one buffer as numpy columns: the way to consume messages by the thousand.

:func:`decode_units` gathers every fixed header in one numpy take and locates the variable parts
with :func:`~spark_mq.common.unit.layout.unit_ranges`; :class:`StoredBatch` builds Python values
from those columns on first access, by C-level maps (no Python bytecode per message).

Thread-safety: immutable once built.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property

from spark_mq.common.buffers import gather_records
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.properties import TAGS, decode_properties, keys_of
from spark_mq.common.unit.decode import StoredMessage, decode_messages, decompress_bodies
from spark_mq.common.unit.layout import UnitRanges, header_record, unit_ranges


@lazy_dataclass(frozen=True)
class UnitColumns(LazyDataclass, UnitRanges):
    """Decoded units: where they and their variable parts lie, plus the fixed headers."""

    header: np.ndarray  # header_record() records


def decode_units(buf: np.ndarray, starts: np.ndarray) -> UnitColumns:
    """Decode the units beginning at ``starts`` in ``buf`` (uint8) without a per-unit loop.

    The caller has established that these are whole units (by walking or from the consume
    queue); lengths are taken from the units themselves.
    """
    starts = np.asarray(starts, dtype=np.int64)
    head = gather_records(buf, starts, header_record())
    ranges = unit_ranges(buf, starts, head["body_length"].astype(np.int64))
    return UnitColumns(**vars(ranges), header=head)


@lazy_dataclass(frozen=True, eq=False)
class StoredBatch(LazyDataclass):
    """Many units of one buffer as columns: the way to consume messages by the thousand.

    The fixed header of every unit is one numpy gather (``units.header``, big-endian ``header_record()``
    records; its fields are also native numpy columns); bodies, topics and hosts are lists
    built on first access by C-level maps (no Python bytecode per message); properties are
    decoded only when asked for. Row ``i`` holds the values ``decode_messages`` gives the unit at
    ``starts[i]`` (``batch[i]``, ``batch.messages()`` are those StoredMessages).

    Build one with :meth:`decode` or ``PullResult.batch()``. Immutable once built; columns are
    cached, so treat the returned arrays and lists as read-only.
    """

    buf: bytes
    units: UnitColumns

    @classmethod
    def decode(cls, buf: bytes, starts: np.ndarray | list[int]) -> StoredBatch:
        """The whole, self-consistent units of ``buf`` at ``starts`` (walked or from
        :func:`~spark_mq.common.unit.chain.back_to_back_units`: lengths are read from the units unchecked)."""
        return cls(buf, decode_units(np.frombuffer(buf, dtype=np.uint8), np.asarray(starts, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, i: int) -> StoredMessage:
        return decode_messages(self.buf, [int(self.units.starts[i])])[0]

    def messages(self) -> list[StoredMessage]:
        """Every row as a StoredMessage (the per-message API, at its per-message cost)."""
        return decode_messages(self.buf, self.units.starts.tolist())

    def take(self, rows: np.ndarray | list[int]) -> StoredBatch:
        """The batch of ``rows`` only (e.g. the messages a filter kept), in the order given."""
        return StoredBatch(self.buf, self.units.take(np.asarray(rows, dtype=np.int64)))

    def with_tags(self, tags: Collection[str] | None) -> StoredBatch:
        """The messages whose TAGS property is one of ``tags`` (all of them when None)."""
        if tags is None:
            return self
        return self.take([i for i, tag in enumerate(self.tags) if tag in tags])

    def _slices(self, start: np.ndarray, end: np.ndarray) -> list[bytes]:
        return list(map(self.buf.__getitem__, map(slice, start.tolist(), end.tolist())))

    def _column(self, name: str, dtype: str = "int64") -> np.ndarray:
        return self.units.header[name].astype(dtype)

    @cached_property
    def bodies(self) -> list[bytes]:
        """Every body as the consumer must see it (compressed ones inflated)."""
        return decompress_bodies(self._slices(self.units.body_start, self.units.body_end), self.sys_flags)

    @cached_property
    def topics(self) -> list[str]:
        """Every unit's topic (one decode per distinct topic: a pull holds one)."""
        raw = self._slices(self.units.topic_start, self.units.topic_end)
        names = {t: t.decode() for t in dict.fromkeys(raw)}
        return list(map(names.__getitem__, raw))

    @cached_property
    def properties(self) -> list[dict[str, str]]:
        """Every unit's properties, decoded on first access."""
        return list(map(decode_properties, self._slices(self.units.props_start, self.units.props_end)))

    @cached_property
    def tags(self) -> list[str | None]:
        return [p.get(TAGS) for p in self.properties]

    @property
    def keys(self) -> list[list[str]]:
        return list(map(keys_of, self.properties))

    @cached_property
    def queue_ids(self) -> np.ndarray:
        return self._column("queue_id", np.int32)

    @cached_property
    def queue_offsets(self) -> np.ndarray:
        return self._column("queue_offset")

    @cached_property
    def physical_offsets(self) -> np.ndarray:
        return self._column("physical_offset")

    @cached_property
    def flags(self) -> np.ndarray:
        return self._column("flag", np.int32)

    @cached_property
    def sys_flags(self) -> np.ndarray:
        return self._column("sys_flag", np.int32)

    @cached_property
    def body_crcs(self) -> np.ndarray:
        return self._column("body_crc", np.int32)

    @cached_property
    def born_timestamps(self) -> np.ndarray:
        return self._column("born_timestamp")

    @cached_property
    def store_timestamps(self) -> np.ndarray:
        return self._column("store_timestamp")

    @cached_property
    def reconsume_times(self) -> np.ndarray:
        return self._column("reconsume_times", np.int32)

    @cached_property
    def born_hosts(self) -> list[bytes]:
        """8-byte hosts (IPv4 + big-endian port), as ``StoredMessage.born_host``."""
        return self.units.header["born_host"].tolist()

    @cached_property
    def store_hosts(self) -> list[bytes]:
        return self.units.header["store_host"].tolist()
