"""The receipt handle of a popped message: RocketMQ's ``extraInfo`` (``ExtraInfoUtil``), byte for byte,
so that the receipt a RocketMQ client builds from a pop response (its ``POP_CK`` property) is one we
accept back in an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME, and ours are theirs.

Fields, separated by one space: ``ckQueueOffset popTime invisibleTime reviveQid topicMark brokerName
queueId [queueOffset]``. ``ckQueueOffset`` is the queue offset the pop that handed the message out
started at (it names the checkpoint, with ``popTime``); ``topicMark`` is ``1`` when the message was read
from the pop retry topic ``%RETRY%<group>_<topic>``, else ``0``; ``reviveQid`` 999 marks an orderly pop.

The pop response header describes every popped queue in three strings (``startOffsetInfo``,
``msgOffsetInfo``, ``orderCountInfo``), entries separated by ``;``: ``<topicMark> <queueId> <value>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.names import RETRY_GROUP_TOPIC_PREFIX
from spark_mq.common.properties import KEY_SEPARATOR

NORMAL_MARK = "0"
RETRY_MARK = "1"
ORDER_REVIVE_QID = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: an orderly pop writes no checkpoint
INFO_SEPARATOR = ";"


class ReceiptError(ValueError):
    """A receipt handle (or a pop queue-info string) that is not RocketMQ's format."""


def pop_retry_topic(group: str, topic: str) -> str:
    """RocketMQ 5's pop retry topic of a group's subscription to ``topic`` (KeyBuilder.buildPopRetryTopic)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def topic_read(group: str, topic: str, retry: bool) -> str:
    """The topic a message was read from (ExtraInfoUtil.getRealTopic): the pop retry topic when ``retry``. A
    request may name the retry topic itself (RocketMQ's Java client acks with it): kept as it is."""
    if not retry or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic
    return pop_retry_topic(group, topic)


def topic_mark(topic: str) -> str:
    return RETRY_MARK if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else NORMAL_MARK


@lazy_dataclass(frozen=True)
class Receipt(LazyDataclass):
    """One popped message's receipt handle, parsed."""

    ck_offset: int  # where its pop started in its queue: names the checkpoint with pop_time
    pop_time: int  # epoch ms
    invisible_ms: int
    revive_qid: int
    retry: bool  # read from the pop retry topic
    broker_name: str
    queue_id: int
    queue_offset: int | None  # absent in RocketMQ's 7-field form: the request's ``offset`` says it

    @property
    def order(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    @property
    def visible_at(self) -> int:
        return self.pop_time + self.invisible_ms

    def real_topic(self, group: str, topic: str) -> str:
        """The topic the message was read from (``topic_read``)."""
        return topic_read(group, topic, self.retry)

    def encode(self) -> str:
        fields = [self.ck_offset, self.pop_time, self.invisible_ms, self.revive_qid,
                  RETRY_MARK if self.retry else NORMAL_MARK, self.broker_name, self.queue_id]
        if self.queue_offset is not None:
            fields.append(self.queue_offset)
        return KEY_SEPARATOR.join(map(str, fields))

    @property
    def prefix(self) -> str:
        """What the receipts of the messages one pop handed out of one queue share, separator included: a
        message's receipt is this and its queue offset (encoded once per pop, not per message)."""
        return replace(self, queue_offset=None).encode() + KEY_SEPARATOR

    @classmethod
    def parse(cls, extra_info: str) -> Receipt:
        """Raises ReceiptError, saying what is wrong, for anything but RocketMQ's 7 or 8 fields."""
        parts = extra_info.split(KEY_SEPARATOR) if extra_info else []
        if len(parts) not in (7, 8):
            raise ReceiptError(f"receipt handle (extraInfo) {extra_info[:200]!r} has {len(parts)} fields, not "
                              "RocketMQ's 7 or 8: pass back the receipt handle the pop returned, unchanged")
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4] == RETRY_MARK, parts[5],
                       int(parts[6]), int(parts[7]) if len(parts) == 8 else None)
        except ValueError as e:
            raise ReceiptError(f"receipt handle (extraInfo) {extra_info[:200]!r} is malformed ({e}): pass back "
                              "the receipt handle the pop returned, unchanged") from e


def pop_of(extra_info: str) -> str:
    """What names the pop of one queue a receipt handle comes from (its fields but the message's offset):
    equal for the messages one pop handed out of one queue."""
    if extra_info.count(KEY_SEPARATOR) == 7:
        return extra_info.rpartition(KEY_SEPARATOR)[0]
    return extra_info


def queue_info(entries: Iterable[tuple[str, int, str]]) -> str:
    """``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` from (topic, queue id, value) entries."""
    return INFO_SEPARATOR.join(KEY_SEPARATOR.join((topic_mark(t), str(q), v)) for t, q, v in entries)


def parse_queue_info(info: str | None) -> dict[tuple[bool, int], str]:
    """The entries of one of those strings by (retry, queue id); raises ReceiptError when malformed."""
    out: dict[tuple[bool, int], str] = {}
    for entry in (info or "").split(INFO_SEPARATOR):
        if not entry:
            continue
        parts = entry.split(KEY_SEPARATOR)
        if len(parts) != 3 or not parts[1].lstrip("-").isdigit():
            raise ReceiptError(f"malformed pop queue info entry {entry[:200]!r}")
        out[(parts[0] == RETRY_MARK, int(parts[1]))] = parts[2]
    return out
