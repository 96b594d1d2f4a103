"""The one naming rule for every name a client sends that becomes a topic, a store path or a key:
topics, producer and consumer groups (and the retry and DLQ topics derived from a group), broker
and cluster names, and the NameServer's KV namespaces and keys.

A name matches RocketMQ's ``TopicValidator`` pattern ``^[%|a-zA-Z0-9_-]+$`` as a whole (no
newline slips past a ``$``), so it holds no ``/``, ``\\``, ``.``, NUL or space and can never be
``.``, ``..`` or an absolute path: a topic is a directory name under ``consumequeue/``. Lengths:

- a topic at most 127 bytes (stored behind an int8 length), a broker or cluster name too (the broker
  adds a topic of each name, as RocketMQ does);
- a group at most 120 (RocketMQ allows 255, but ``%RETRY%<group>`` must itself be a topic);
- a KV namespace or key at most 255.

A client id (``clientID``: RocketMQ's ``ip@instanceName``, often with ``#pid#nanotime``) has a rule
of its own, since ``@``, ``.``, ``#`` and ``:`` are ordinary in it: it keys the client registry and
queue locks, so it is not empty, at most 255 characters, with no path separator and no control
character.

Every check raises ``InvalidNameError`` naming the rule that was broken.
"""

from __future__ import annotations

import re

from spark_mq.common.errors import InvalidNameError

NAME_RULE = "^[%|a-zA-Z0-9_-]+$"
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
TOPIC_MAX_LENGTH = 127  # stored behind an int8 length
AUTO_CREATE_TOPIC = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC: unknown topics route through it
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: delayed messages wait in it
TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC: prepared messages
TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC: timer messages wait in its queue 0
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)
# RocketMQ's TopicValidator.SYSTEM_TOPIC_SET and SYSTEM_TOPIC_PREFIX: topics no user subscribes to
SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC, SCHEDULE_TOPIC, "BenchmarkTest", TRANSACTION_HALF_TOPIC,
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
SYSTEM_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "rmq_sys_")
KV_NAME_MAX_LENGTH = 255
CLIENT_ID_MAX_LENGTH = 255
_CLIENT_ID_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")  # path separators and control characters


def check_name(name: str, what: str, max_length: int) -> None:
    """``name`` as a ``what`` (``"topic"``, ``"group"``...) of at most ``max_length`` bytes."""
    if not name:
        raise InvalidNameError(f"{what} is empty: a {what} matches {NAME_RULE}")
    if not _NAME.fullmatch(name):
        raise InvalidNameError(
            f"{what} {name[:160]!r} has illegal characters: a {what} matches {NAME_RULE} "
            "(letters, digits, '%', '|', '_' and '-')")
    if len(name) > max_length:
        raise InvalidNameError(f"{what} is {len(name)} bytes, over the {max_length} limit")  # ASCII by now


def validate_topic(topic: str) -> None:
    check_name(topic, "topic", TOPIC_MAX_LENGTH)


def is_system_topic(topic: str) -> bool:
    """A broker's own topic (auto-create, schedule, transactions) or a group's retry/DLQ topic."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)


def validate_group(group: str) -> None:
    """A producer or consumer group; its retry and DLQ topics are then valid topics too."""
    check_name(group, "group", GROUP_MAX_LENGTH)


def validate_broker_name(name: str) -> None:
    """A broker or cluster name (each becomes a topic on its broker)."""
    check_name(name, "broker or cluster name", TOPIC_MAX_LENGTH)


def validate_kv_name(name: str) -> None:
    """A NameServer KV namespace or key."""
    check_name(name, "KV namespace or key", KV_NAME_MAX_LENGTH)


def validate_client_id(client_id: str) -> None:
    """A client's id (see the module docstring for why its rule is not the name rule)."""
    if not client_id:
        raise InvalidNameError("client id is empty")
    if _CLIENT_ID_FORBIDDEN.search(client_id):
        raise InvalidNameError(f"client id {client_id[:160]!r} holds a path separator or a control character")
    if len(client_id) > CLIENT_ID_MAX_LENGTH:
        raise InvalidNameError(f"client id is {len(client_id)} characters, over the {CLIENT_ID_MAX_LENGTH} limit")


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; InvalidNameError unless the group and the whole topic follow the rule."""
    return _group_topic(RETRY_GROUP_TOPIC_PREFIX, group)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; InvalidNameError unless the group and the whole topic follow the rule."""
    return _group_topic(DLQ_GROUP_TOPIC_PREFIX, group)


def _group_topic(prefix: str, group: str) -> str:
    validate_group(group)
    topic = prefix + group
    validate_topic(topic)
    return topic
