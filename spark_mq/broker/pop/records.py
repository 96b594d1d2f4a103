"""What pop writes to the revive topic ``rmq_sys_REVIVE_LOG_<cluster>``: checkpoints and acks, as messages in
the commitlog, so that they survive a restart and replicate to slaves like every other message.

A checkpoint (tag ``ck``) is written when a pop hands messages of one queue out; its JSON body has
RocketMQ's ``PopCheckPoint`` field names::

    {"so": 120, "pt": 1700000000000, "it": 60000, "n": 3, "d": [0, 1, 4], "q": 2, "t": "orders",
     "c": "readers", "bm": 0, "ro": 17, "bn": "broker-a"}

``so`` is the queue offset the pop started at, ``d`` each message's offset minus ``so`` (a filtered pop
skips offsets), ``t`` the topic read (the pop retry topic for a redelivery), ``pt``/``it`` pop time and
invisible time in ms, ``ro`` the checkpoint's own offset in the revive queue, ``bm`` the acked bits (0:
ours never changes once written; acks are separate records).

An ack (tag ``ack``) marks one message of a checkpoint as done, RocketMQ's ``AckMsg``::

    {"ao": 121, "so": 120, "pt": 1700000000000, "q": 2, "t": "orders", "c": "readers", "bn": "broker-a"}

``ao`` is the message's queue offset; (``c``, ``t``, ``q``, ``so``, ``pt``) name the checkpoint. A batch
ack (tag ``bAck``) carries the offsets as ``"aol": [121, 124]`` instead of ``ao``. The revive service
writes the same acks for the messages it redelivered, so a replay of the log after a restart reopens
exactly the checkpoints that still have unacknowledged messages.
"""

from __future__ import annotations

import json

from spark_mq.common.errors import BodyError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP: its offset is where a replay starts
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"

CheckpointKey = tuple[str, str, int, int, int]
"""(group, topic read, queue id, start offset, pop time): one checkpoint."""


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


@lazy_dataclass(frozen=True)
class Checkpoint(LazyDataclass):
    """One pop of one queue: the messages it handed out and until when they are invisible."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_ms: int
    diffs: tuple[int, ...]
    broker_name: str
    revive_offset: int = -1  # its offset in the revive queue, once written

    @property
    def key(self) -> CheckpointKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.diffs]

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_ms

    def to_json(self) -> bytes:
        return json.dumps({"so": self.start_offset, "pt": self.pop_time, "it": self.invisible_ms,
                           "n": len(self.diffs), "d": list(self.diffs), "q": self.queue_id, "t": self.topic,
                           "c": self.group, "bm": 0, "ro": self.revive_offset, "bn": self.broker_name},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Checkpoint:
        try:
            o = json.loads(raw)
            n = int(o["n"])
            diffs = tuple(int(d) for d in o.get("d") or range(n))  # RocketMQ's old checkpoints have no "d"
            return cls(str(o["c"]), str(o["t"]), int(o["q"]), int(o["so"]), int(o["pt"]), int(o["it"]), diffs,
                       str(o.get("bn", "")), int(o.get("ro", -1)))
        except (ValueError, KeyError, TypeError) as e:
            raise BodyError(f"malformed pop checkpoint {raw[:200]!r}: {e!r}") from e


@lazy_dataclass(frozen=True)
class Ack(LazyDataclass):
    """Messages of one checkpoint done (acknowledged, moved by a change of invisible time, or redelivered)."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    offsets: tuple[int, ...]
    broker_name: str

    @property
    def key(self) -> CheckpointKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def tag(self) -> str:
        return ACK_TAG if len(self.offsets) == 1 else BATCH_ACK_TAG

    def to_json(self) -> bytes:
        o: dict[str, object] = {"so": self.start_offset, "pt": self.pop_time, "q": self.queue_id, "t": self.topic,
                                "c": self.group, "bn": self.broker_name}
        if len(self.offsets) == 1:
            o["ao"] = self.offsets[0]
        else:
            o["aol"] = list(self.offsets)
        return json.dumps(o, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Ack:
        try:
            o = json.loads(raw)
            offsets = tuple(int(x) for x in o["aol"]) if "aol" in o else (int(o["ao"]),)
            return cls(str(o["c"]), str(o["t"]), int(o["q"]), int(o["so"]), int(o["pt"]), offsets,
                       str(o.get("bn", "")))
        except (ValueError, KeyError, TypeError) as e:
            raise BodyError(f"malformed pop ack {raw[:200]!r}: {e!r}") from e
