"""RocketMQ's message property string: ``name\\x01value\\x02`` pairs.

Scalar encode/decode for the API edge, and a vectorised scanner that finds one named
property (TAGS, KEYS, UNIQ_KEY) in every message of a batch at once, for dispatch, recovery
and the Arrow decoder; :class:`PackedProperties`, which finds a few named properties in many
messages by searching their property bytes only (the SQL92 filter's hot path); and
:class:`JoinedProperties`, a send's property strings read once for every feature that looks at them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from itertools import chain

from spark_mq.common.buffers import at_every_byte
from spark_mq.common.byte_ranges import gather_ranges, positions_in_ranges
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_NV = ord(NAME_VALUE_SEPARATOR)
_PS = ord(PROPERTY_SEPARATOR)
_PS_BYTES = PROPERTY_SEPARATOR.encode()

# MessageConst names we act on
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
TRANSACTION_PREPARED = "TRAN_MSG"  # "true" on a transactional half message
REAL_TOPIC = "REAL_TOPIC"  # a half (or delayed) message's real topic
REAL_QUEUE_ID = "REAL_QID"
PRODUCER_GROUP = "PGROUP"  # the producer group of a transactional message
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"  # check-backs of a half message so far
CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"  # a half message's own transactionTimeOut
TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"  # set on a committed message
# RocketMQ's PROPERTY_TRANSACTION_ID: half messages with the same one are one transaction (a batch's)
TRANSACTION_ID = "__transactionId__"
DELAY = "DELAY"  # PROPERTY_DELAY_TIME_LEVEL
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # a timer message's due time, epoch ms
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"  # ... or its delay from the send, in s
TIMER_DELAY_MS = "TIMER_DELAY_MS"  # ... or in ms
TIMER_OUT_MS = "TIMER_OUT_MS"  # the due time the broker computed, set on the parked message
RETRY_TOPIC = "RETRY_TOPIC"  # PROPERTY_RETRY_TOPIC: the topic a retried message was first sent to
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # PROPERTY_ORIGIN_MESSAGE_ID: the UNIQ_KEY of the message copied
WAIT_STORE_MSG_OK = "WAIT"
KEY_SEPARATOR = " "

MAX_PROPERTIES_LENGTH = 32767  # stored behind an int16 length


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Encode as RocketMQ 4.x writes it: every pair followed by the property separator. A separator inside
    a name or value shows as one separator too many in the whole string (two counts, not a check per pair
    and character: a message's send encodes its properties on the way to the socket); the pairs are checked
    one by one only then, for the error naming the first bad one."""
    text = "".join([f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()])
    n = len(props)
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n or not all(props):
        _check_pairs(props)
    return text.encode()


def _check_pairs(props: Mapping[str, str]) -> None:
    """Raise ValueError for the first pair whose name is empty or holds a separator, or whose value does."""
    for name, value in props.items():
        if not name or NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise ValueError(f"illegal property name {name!r}: must be non-empty, without \\x01 or \\x02")
        if NAME_VALUE_SEPARATOR in str(value) or PROPERTY_SEPARATOR in str(value):
            raise ValueError(f"illegal value for property {name!r}: contains \\x01 or \\x02")


def encode_properties_checked(props: Mapping[str, str]) -> bytes:
    """``encode_properties`` for a message about to be sent: a bad name or value, or a string
    over the stored int16 length, raises MessageValidationError before anything is sent."""
    try:
        encoded = encode_properties(props)
    except ValueError as e:
        raise MessageValidationError(str(e)) from None
    if len(encoded) > MAX_PROPERTIES_LENGTH:
        raise MessageValidationError(f"message properties are {len(encoded)} bytes encoded, over the "
                                     f"{MAX_PROPERTIES_LENGTH} limit: use fewer or shorter keys and properties")
    return encoded


def keys_of(props: Mapping[str, str]) -> list[str]:
    """The message keys in a property dict (KEYS holds them space-separated)."""
    return [k for k in props.get(KEYS, "").split(KEY_SEPARATOR) if k]


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Decode a property string; tolerates a missing final separator (RocketMQ 5 omits it)."""
    out: dict[str, str] = {}
    for item in bytes(raw).decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


@lazy_dataclass(frozen=True)
class PropertyScan(LazyDataclass):
    """Every name/value pair of many property strings living in one byte buffer.

    Arrays are parallel, one entry per pair: ``row`` is the message index; names and values
    are ``[start, end)`` byte ranges in ``buf``.
    """

    buf: np.ndarray
    row: np.ndarray
    name_start: np.ndarray
    name_end: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray
    rows: int

    def find(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Value ranges of property ``name`` per message; ``start == -1`` where absent."""
        key = np.frombuffer(name.encode(), dtype=np.uint8)
        match = (self.name_end - self.name_start) == key.size
        cand = np.flatnonzero(match)
        if cand.size:
            grab = self.buf[self.name_start[cand, None] + np.arange(key.size)]
            cand = cand[(grab == key).all(axis=1)]
        starts = np.full(self.rows, -1, dtype=np.int64)
        ends = np.full(self.rows, -1, dtype=np.int64)
        # a later duplicate wins, as in Java's HashMap
        starts[self.row[cand]] = self.value_start[cand]
        ends[self.row[cand]] = self.value_end[cand]
        return starts, ends


def scan_properties(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> PropertyScan:
    """Locate every pair in ``buf[starts[i]:ends[i]]`` for all messages i, without a Python loop.

    Ranges must be disjoint and in buffer order.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    rows = starts.size
    if rows > 1 and np.any(np.diff(starts) < 0):
        raise ValueError("property ranges must be given in buffer order")
    nv, row = positions_in_ranges(buf, starts, ends, _NV)
    ps, _ = positions_in_ranges(buf, starts, ends, _PS)
    # a name starts after the previous property separator, but never before its message
    prev = np.searchsorted(ps, nv, side="left") - 1
    ps_at = ps if ps.size else np.zeros(1, dtype=np.int64)  # no separator at all: never selected below
    name_start = np.where(prev >= 0, ps_at[np.maximum(prev, 0)] + 1, 0)
    name_start = np.maximum(name_start, starts[row])
    # a value ends at the next property separator, or at its message's end
    nxt = np.searchsorted(ps, nv, side="right")
    value_end = np.where(nxt < ps.size, ps_at[np.minimum(nxt, ps.size - 1)], ends[row])
    value_end = np.minimum(value_end, ends[row])
    return PropertyScan(buf, row, name_start, nv, nv + 1, value_end, rows)


@lazy_dataclass(frozen=True)
class PackedProperties(LazyDataclass):
    """Many messages' property strings copied back to back, each after one PROPERTY_SEPARATOR.

    Why: :func:`scan_properties` locates every separator of the whole region the ranges span
    (message bodies and binary fields included, whose stray separator bytes it then assigns to
    messages by binary search). Copied out, the property bytes are a few dozen per message, and a
    named property is one search for ``\x02name\x01`` among their separators: the leading separator
    makes a message's first pair look like any other, and the next message's marks where a value
    without a final separator (RocketMQ 5 writes none) ends. Values as :meth:`PropertyScan.find`
    gives them.
    """

    data: np.ndarray  # uint8: per message, PROPERTY_SEPARATOR then its property bytes
    separators: np.ndarray  # positions of every PROPERTY_SEPARATOR in ``data``, ascending
    separator_rows: np.ndarray  # the message each of them belongs to
    rows: int
    # where the pair after each separator ends: the next separator, else the data's end
    following: np.ndarray = field(init=False, repr=False, compare=False)
    # the key-wide windows at every separator, per key width: TAGS and KEYS share one gather
    _windows: dict[int, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "following", np.append(self.separators, self.data.size))

    @classmethod
    def pack(cls, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> PackedProperties:
        """The property strings ``buf[starts[i]:ends[i]]`` (disjoint, in buffer order) packed."""
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(ends, dtype=np.int64) - starts
        offsets = np.zeros(lengths.size, dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        part_starts = offsets + np.arange(lengths.size)  # where each message's part of the packed data begins
        if starts.size and starts[0] > 0 and np.all(starts[1:] > starts[:-1] + lengths[:-1]):
            # each string with the byte before it (a stored unit's property length), overwritten below
            data = gather_ranges(buf, starts - 1, lengths + 1)
        else:  # strings back to back with nothing between: the separators inserted (slower)
            data = np.insert(gather_ranges(buf, starts, lengths), offsets, _PS)
        data[part_starts] = _PS
        return cls._of(data, part_starts)

    @classmethod
    def join(cls, strings: Iterable[bytes], lengths: np.ndarray) -> PackedProperties:
        """Property strings held as bytes objects (a put's batches), whose ``lengths`` are known,
        packed with one join: no gather from a buffer of whole units."""
        data = np.frombuffer(_PS_BYTES.join(chain((b"",), strings)), dtype=np.uint8)
        part_starts = np.cumsum(lengths + 1)
        part_starts -= lengths + 1
        return cls._of(data, part_starts)

    @classmethod
    def _of(cls, data: np.ndarray, part_starts: np.ndarray) -> PackedProperties:
        """``data`` packed, each message's part beginning at ``part_starts`` (its leading separator)."""
        first = np.zeros(data.size, dtype=bool)
        first[part_starts] = True
        separators = np.flatnonzero(data == _PS)
        return cls(data, separators, np.cumsum(first[separators]) - 1, int(part_starts.size))

    def find(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Value ranges (in :attr:`data`) of property ``name`` per message; ``start == -1`` where absent, the
        last one where a message names it twice (as Java's HashMap keeps)."""
        key = np.frombuffer(PROPERTY_SEPARATOR.encode() + name.encode() + NAME_VALUE_SEPARATOR.encode(),
                            dtype=np.uint8)
        begins = np.full(self.rows, -1, dtype=np.int64)
        ends = np.full(self.rows, -1, dtype=np.int64)
        # a match starts at a separator: the key's width of bytes at each compared as one opaque item
        windows = self._windows.get(key.size)
        if windows is None:
            room = int(np.searchsorted(self.separators, self.data.size - key.size, side="right"))
            windows = self._windows[key.size] = at_every_byte(self.data, f"V{key.size}")[self.separators[:room]]
        at = np.flatnonzero(windows == np.void(key.tobytes()))
        # the value runs to the next separator (the next pair's, or the next message's), else to the end
        begins[self.separator_rows[at]] = self.separators[at] + key.size  # ascending: a later duplicate wins
        ends[self.separator_rows[at]] = self.following[at + 1]
        return begins, ends


class JoinedProperties:
    """A batch's property strings joined once, for every property the send path looks for.

    Why: transactions, delay levels and timers each ask whether a send carries their messages.
    Joined, "does any message name X" is one C-level substring search, so a batch of plain messages
    (the common case) costs the join and a few searches; the values of X per message come from one
    vectorised scan of every pair (:func:`scan_properties`), made the first time a value is asked
    for and shared by every later question. Not thread-safe (the scan is cached).
    """

    def __init__(self, strings: list[bytes]) -> None:
        self.strings = strings
        self.joined = b"".join(strings)
        self._scan: PropertyScan | None = None

    def __len__(self) -> int:
        return len(self.strings)

    def mentions(self, needle: bytes) -> bool:
        """Whether ``needle`` (e.g. ``b"DELAY\\x01"``) occurs anywhere in the strings."""
        return needle in self.joined

    def scan(self) -> PropertyScan:
        """Every pair of every string, found once."""
        if self._scan is None:
            lengths = np.fromiter(map(len, self.strings), dtype=np.int64, count=len(self.strings))
            ends = np.cumsum(lengths)
            self._scan = scan_properties(np.frombuffer(self.joined, dtype=np.uint8), ends - lengths, ends)
        return self._scan

    def values(self, name: str, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, list[bytes]]:
        """(the messages in ``[start, stop)`` that name ``name``, ascending; their raw values): a later
        duplicate wins, as in Java's HashMap."""
        begins, ends = self.scan().find(name)
        rows = np.flatnonzero(begins[start:stop] >= 0) + start
        raw = self.joined
        return rows, [raw[a:b] for a, b in zip(begins[rows].tolist(), ends[rows].tolist(), strict=True)]
