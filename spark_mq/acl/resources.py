"""What each request code needs of the account that sends it (RocketMQ's ``PlainAccessResource.parse`` and
``Permission.ADMIN_CODE``, extended to every code spark_mq knows): one table, :data:`RULES`, read by the
check (``validator.py``), by docs/security.md's permission table and by the permission matrix test.

A code needs one of:

* ``ADMIN``: an account with ``admin: true`` (topic and group create/delete, offset resets, config,
  broker registration, everything brokers, controllers and slaves say to each other, whole-table reads);
* ``RESOURCES``: permissions on the topics and groups the request names, in its extFields or (HEART_BEAT,
  LOCK/UNLOCK_BATCH_MQ) in its body;
* ``ANY_ACCOUNT``: any account whose signature checks (routes, cluster lists, runtime figures, and the codes
  a server sends to clients, which no server serves).

A code not in the table needs ADMIN: a new code is closed until someone decides. A topic named
``%RETRY%<group>`` or ``%DLQ%<group>`` is its group's: the need becomes SUB (or ANY) on that group, as
RocketMQ turns a retry topic into its group.

Stricter than RocketMQ 4.x (whose table has five admin codes and checks nothing for the rest): the
replication, controller and NameServer-registration codes are admin, and so is VIEW_MESSAGE_BY_ID, which
names no topic (a commitlog offset reads any message). Looser in one place: CONSUMER_SEND_MSG_BACK needs
SUB on its ``originTopic``, not RocketMQ 4.9's PUB (a subscriber-only consumer must be able to retry).

Thread-safety: immutable tables and pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from spark_mq.acl.plain_acl import Perm
from spark_mq.common.errors import BodyError
from spark_mq.common.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from spark_mq.remoting.bodies import BatchAckMessageRequestBody, HeartbeatData, LockBatchRequestBody
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand

TOPIC, GROUP = "topic", "group"
GROUP_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)


class Access(Enum):
    ADMIN = "admin"
    RESOURCES = "resources"
    ANY_ACCOUNT = "any account"


class Need(NamedTuple):
    """A permission the request needs on one topic or group (a tuple: made for every checked request)."""

    kind: str  # TOPIC or GROUP
    name: str
    perm: Perm


class MalformedRequest(ValueError):
    """The request does not say what it would touch (a field missing, a body that does not parse)."""


@dataclass(frozen=True)
class FieldNeed:
    """``perm`` on the topic or group an extFields field names."""

    kind: str
    field: str
    perm: Perm
    optional: bool = False  # absent or empty: nothing needed

    def describe(self) -> str:
        return f"{self.perm.label} on {self.kind} `{self.field}`" + (" (if given)" if self.optional else "")


@dataclass(frozen=True)
class BodyNeed:
    """Needs read from the request's body."""

    name: str  # "heartbeat" or "lock": which body, for the docs and the tests
    text: str
    parse: Callable[[bytes], list[Need]]

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class Rule:
    access: Access
    needs: tuple[FieldNeed | BodyNeed, ...] = ()
    routine: bool = False  # ADMIN only: peer housekeeping (heartbeats, syncs, reads), audited at DEBUG

    def describe(self) -> str:
        """The rule as docs/security.md's table writes it."""
        if self.access is not Access.RESOURCES:
            return self.access.value + (" (routine)" if self.routine else "")
        return ", ".join(n.describe() for n in self.needs)


def topic_need(topic: str, perm: Perm) -> Need:
    """``perm`` on ``topic``; a retry or DLQ topic is its group's: SUB (or ANY) on the group."""
    for prefix in GROUP_TOPIC_PREFIXES:
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return Need(GROUP, topic[len(prefix):], Perm.ANY if perm & Perm.ANY else Perm.SUB)
    return Need(TOPIC, topic, perm)


def needs_of(rule: Rule, cmd: RemotingCommand) -> list[Need]:
    """What ``cmd`` needs under ``rule`` (a RESOURCES rule), each need once; ``MalformedRequest`` if it cannot tell."""
    out: list[Need] = []
    for spec in rule.needs:
        if isinstance(spec, BodyNeed):
            try:
                out.extend(spec.parse(cmd.body))
            except BodyError as e:
                raise MalformedRequest(str(e)) from None
            continue
        value = cmd.ext_fields.get(spec.field)
        if not value:
            if spec.optional:
                continue
            raise MalformedRequest(f"no {spec.kind} in `{spec.field}`")
        out.append(topic_need(value, spec.perm) if spec.kind == TOPIC else Need(GROUP, value, spec.perm))
    return list(dict.fromkeys(out))


def _heartbeat_needs(body: bytes) -> list[Need]:
    needs = []
    for consumer in HeartbeatData.from_json(body).consumer_data_set:
        needs.append(Need(GROUP, consumer.group_name, Perm.SUB))
        needs.extend(topic_need(s.topic, Perm.SUB) for s in consumer.subscription_data_set)
    return needs


def _lock_needs(body: bytes) -> list[Need]:
    request = LockBatchRequestBody.from_json(body)
    return [Need(GROUP, request.consumer_group, Perm.SUB), *(topic_need(mq.topic, Perm.SUB) for mq in request.mq_set)]


def _batch_ack_needs(body: bytes) -> list[Need]:
    needs = []
    for ack in BatchAckMessageRequestBody.from_json(body).acks:
        needs.extend((Need(GROUP, ack.consumer_group, Perm.SUB), topic_need(ack.topic, Perm.SUB)))
    return needs


HEARTBEAT = BodyNeed("heartbeat", "SUB on each consumer group of the body and on each topic it subscribes",
                     _heartbeat_needs)
BATCH_ACK = BodyNeed("batch ack", "SUB on the group (`c`) and the topic (`t`) of each ack of the body",
                     _batch_ack_needs)
LOCK = BodyNeed("lock", "SUB on the body's `consumerGroup` and on the topic of each queue", _lock_needs)

ADMIN = Rule(Access.ADMIN)
ROUTINE_ADMIN = Rule(Access.ADMIN, routine=True)
ANY_ACCOUNT = Rule(Access.ANY_ACCOUNT)


def resources(*needs: FieldNeed | BodyNeed) -> Rule:
    return Rule(Access.RESOURCES, needs)


def topic(field: str, perm: Perm, optional: bool = False) -> FieldNeed:
    return FieldNeed(TOPIC, field, perm, optional)


def group(field: str, perm: Perm, optional: bool = False) -> FieldNeed:
    return FieldNeed(GROUP, field, perm, optional)


C = RequestCode
PUB, SUB, ANY = Perm.PUB, Perm.SUB, Perm.ANY
RULES: dict[int, Rule] = {
    # the message path
    C.SEND_MESSAGE: resources(topic("topic", PUB)),
    C.SEND_MESSAGE_V2: resources(topic("b", PUB)),
    C.SEND_BATCH_MESSAGE: resources(topic("b", PUB)),
    C.PULL_MESSAGE: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.CONSUMER_SEND_MSG_BACK: resources(group("group", SUB), topic("originTopic", SUB, optional=True)),
    C.END_TRANSACTION: ANY_ACCOUNT,  # names a producer group and a commitlog offset only (RocketMQ checks nothing)
    C.QUERY_MESSAGE: resources(topic("topic", SUB)),
    C.VIEW_MESSAGE_BY_ID: ADMIN,  # a commitlog offset: any topic's message
    C.QUERY_CONSUME_QUEUE: resources(topic("topic", SUB), group("consumerGroup", SUB, optional=True)),
    # pop consumption
    C.POP_MESSAGE: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.PEEK_MESSAGE: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.ACK_MESSAGE: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.BATCH_ACK_MESSAGE: resources(BATCH_ACK),
    C.CHANGE_MESSAGE_INVISIBLETIME: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.NOTIFICATION: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    C.POLLING_INFO: resources(topic("topic", SUB), group("consumerGroup", SUB)),
    # clients and groups
    C.HEART_BEAT: resources(HEARTBEAT),
    C.UNREGISTER_CLIENT: resources(group("consumerGroup", SUB, optional=True)),
    C.GET_CONSUMER_LIST_BY_GROUP: resources(group("consumerGroup", SUB)),
    C.QUERY_CONSUMER_OFFSET: resources(group("consumerGroup", SUB), topic("topic", SUB)),
    C.UPDATE_CONSUMER_OFFSET: resources(group("consumerGroup", SUB), topic("topic", SUB)),
    C.LOCK_BATCH_MQ: resources(LOCK),
    C.UNLOCK_BATCH_MQ: resources(LOCK),
    C.CHECK_CLIENT_CONFIG: ANY_ACCOUNT,  # asks whether an expression type is served: touches nothing
    C.GET_CONSUMER_CONNECTION_LIST: resources(group("consumerGroup", SUB)),
    C.GET_CONSUME_STATS: resources(group("consumerGroup", SUB), topic("topic", SUB, optional=True)),
    C.GET_PRODUCER_CONNECTION_LIST: ANY_ACCOUNT,
    # offsets and figures of a topic
    C.GET_MAX_OFFSET: resources(topic("topic", ANY)),
    C.GET_MIN_OFFSET: resources(topic("topic", ANY)),
    C.GET_EARLIEST_MSG_STORETIME: resources(topic("topic", ANY)),
    C.SEARCH_OFFSET_BY_TIMESTAMP: resources(topic("topic", ANY)),
    C.GET_TOPIC_STATS_INFO: resources(topic("topic", ANY)),
    C.QUERY_TIERED_OFFSET: resources(topic("topic", ANY)),
    C.QUERY_BROKER_OFFSET: ANY_ACCOUNT,
    C.GET_BROKER_RUNTIME_INFO: ANY_ACCOUNT,
    # routes and lists (NameServer)
    C.GET_ROUTEINFO_BY_TOPIC: ANY_ACCOUNT,
    C.GET_BROKER_CLUSTER_INFO: ANY_ACCOUNT,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ANY_ACCOUNT,
    C.GET_TOPICS_BY_CLUSTER: ANY_ACCOUNT,
    C.GET_TOPIC_NAME_LIST: ANY_ACCOUNT,
    C.GET_TOPIC_CONFIG_LIST: ANY_ACCOUNT,
    C.GET_KV_CONFIG: ANY_ACCOUNT,
    C.GET_KVLIST_BY_NAMESPACE: ANY_ACCOUNT,
    # sent by servers to clients: no server serves them
    C.CHECK_TRANSACTION_STATE: ANY_ACCOUNT,
    C.NOTIFY_CONSUMER_IDS_CHANGED: ANY_ACCOUNT,
    C.RESET_CONSUMER_CLIENT_OFFSET: ANY_ACCOUNT,
    C.GET_CONSUMER_RUNNING_INFO: ANY_ACCOUNT,
    # administration
    C.UPDATE_AND_CREATE_TOPIC: ADMIN,
    C.DELETE_TOPIC_IN_BROKER: ADMIN,
    C.DELETE_TOPIC_IN_NAMESRV: ADMIN,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    C.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    C.UPDATE_BROKER_CONFIG: ADMIN,
    C.GET_BROKER_CONFIG: ADMIN,
    C.TRIGGER_DELETE_FILES: ADMIN,
    C.WIPE_WRITE_PERM_OF_BROKER: ADMIN,
    C.PUT_KV_CONFIG: ADMIN,
    C.DELETE_KV_CONFIG: ADMIN,
    C.INVOKE_BROKER_TO_RESET_OFFSET: ADMIN,  # moves a group's offsets, and its online members with them
    C.UPDATE_TIERED_OFFSET: ADMIN,  # moves the archived-up-to watermark retention deletes behind
    # brokers at the NameServer
    C.REGISTER_BROKER: ADMIN,
    C.UNREGISTER_BROKER: ADMIN,
    C.QUERY_DATA_VERSION: ROUTINE_ADMIN,
    # a slave's copy of its master's metadata (whole tables)
    C.GET_ALL_TOPIC_CONFIG: ROUTINE_ADMIN,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: ROUTINE_ADMIN,
    C.GET_ALL_CONSUMER_OFFSET: ROUTINE_ADMIN,
    C.GET_ALL_DELAY_OFFSET: ROUTINE_ADMIN,
    C.GET_TIMER_CHECK_POINT: ROUTINE_ADMIN,
    C.GET_ALL_TIERED_OFFSET: ROUTINE_ADMIN,
    C.OFFER_CONSUMER_OFFSETS: ADMIN,
    C.GET_EPOCH_HISTORY: ROUTINE_ADMIN,
    # the replication controller and its pushes
    C.BROKER_HEARTBEAT: ROUTINE_ADMIN,
    C.CONTROLLER_REGISTER_BROKER: ADMIN,
    C.CONTROLLER_ELECT_MASTER: ADMIN,
    C.CONTROLLER_ALTER_SYNC_STATE_SET: ADMIN,
    C.CONTROLLER_GET_REPLICA_INFO: ROUTINE_ADMIN,
    C.CONTROLLER_GET_METADATA_INFO: ROUTINE_ADMIN,
    C.CONTROLLER_GET_SYNC_STATE_DATA: ROUTINE_ADMIN,
    C.NOTIFY_BROKER_ROLE_CHANGED: ADMIN,
}


def rule_for(code: int) -> Rule:
    """The rule of ``code``; ADMIN for a code the table does not know."""
    return RULES.get(code, ADMIN)


def code_name(code: int) -> str:
    """``PULL_MESSAGE`` for 11; the number for a code spark_mq does not know."""
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
