"""What the broker does not serve yet, refused loudly instead of mis-served.

Transactional half messages are a RocketMQ feature this broker does not implement yet; SQL92
subscriptions are served only with ``enablePropertyFilter=true`` (``sql92_filters``), as in
RocketMQ. Served as if they were ordinary, both corrupt a user's data without a word: a
prepared message would be delivered at once (and a rollback, sent oneway, could never take it
back), and a SQL92 expression read as a tag expression matches nothing, so its consumer waits
forever. So each is refused the way RocketMQ refuses it when the feature is switched off
(``rejectTransactionMessage``, ``enablePropertyFilter=false``): a response code its clients
surface, a remark that says what is missing, a metric, and one log line per group (not one per
request: a producer retries).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.common.properties import TRANSACTION_PREPARED, decode_properties
from spark_mq.remoting.bodies import EXPRESSION_TAG
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import TRANSACTION_PREPARED_TYPE, SendMessageRequestHeader, transaction_type
from spark_mq.remoting.message_batch_codec import decode_batch_body

log = logging.getLogger(__name__)

TRANSACTIONS = "transaction"  # the metric label of a refused prepared (half) message
SQL92 = "sql92"  # the metric label of a refused SQL92 subscription

_PREPARED_NAME = f"{TRANSACTION_PREPARED}\x01"
_PREPARED_NEEDLE = _PREPARED_NAME.encode()

TRANSACTIONS_MISSING = ("transactional messages are not enabled on this broker: half messages, END_TRANSACTION "
                        "and transaction check-back are not served yet; send the message without TRAN_MSG "
                        "(as an ordinary message) or use a broker that serves transactions")

MAX_LOGGED_GROUPS = 1024  # groups remembered as logged: a client inventing group names costs bounded memory

Count = Callable[[str], None]
"""``count(feature)``: one refusal of ``feature`` (a metric)."""


def _prepared_property(properties: bytes) -> bool:
    """Whether an encoded property string says TRAN_MSG=true (Java's ``Boolean.parseBoolean``)."""
    return (_PREPARED_NEEDLE in properties
            and decode_properties(properties).get(TRANSACTION_PREPARED, "").lower() == "true")


def is_prepared_transaction(h: SendMessageRequestHeader, body: bytes) -> bool:
    """Whether a send request carries a prepared transactional message (in its sysFlag, or as
    TRAN_MSG=true in the properties of the message or of any message of a batch).

    A batch body is searched for the property name as a whole first (one C-level scan), so an
    ordinary batch costs no decoding here.
    """
    if transaction_type(h.sys_flag) == TRANSACTION_PREPARED_TYPE:
        return True
    if not h.batch:  # the header's property string: encoded only when the name occurs in it
        props = h.properties or ""
        return _PREPARED_NAME in props and _prepared_property(props.encode())
    if _PREPARED_NEEDLE not in body:
        return False
    batch = decode_batch_body(body, h.topic, 0, h.born_timestamp)
    return any(_prepared_property(p) for p in batch.properties if _PREPARED_NEEDLE in p)


def sql92_missing(expression_type: str) -> str:
    """The remark of a refused subscription: RocketMQ's words, then what to do."""
    return (f"The broker does not support consumer to filter message by {expression_type}: "
            f"{expression_type} filtering is not enabled on this broker (set enablePropertyFilter=true in "
            f"its broker.conf; only SQL92 exists besides {EXPRESSION_TAG}), or subscribe with a tag "
            f"expression ({EXPRESSION_TAG}) and filter the rest in the consumer")


class UnservedFeatures:
    """Refuses what is not served: counts every refusal, logs the first one per group.

    All methods run on the broker's event loop.
    """

    def __init__(self, broker_name: str, count: Count) -> None:
        self.broker_name = broker_name
        self._count = count
        self._logged: set[tuple[str, str]] = set()

    def register_on(self, server) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)
        server.register(RequestCode.CHECK_TRANSACTION_STATE, self.check_transaction_state)

    def _refused(self, feature: str, group: str, what: str, peer: str) -> None:
        self._count(feature)
        if (feature, group) in self._logged or len(self._logged) > MAX_LOGGED_GROUPS:
            return
        self._logged.add((feature, group))
        if len(self._logged) > MAX_LOGGED_GROUPS:
            log.warning("refused requests from over %d groups: later refusals are only counted (see "
                        "spark_mq_unserved_feature_refusals_total)", MAX_LOGGED_GROUPS)
            return
        log.warning("refused %s from group %s (%s); later refusals for this group are only counted",
                    what, group or "<none>", peer)

    def refuse_transaction(self, cmd: RemotingCommand, h: SendMessageRequestHeader, conn: Connection
                           ) -> RemotingCommand:
        """The answer to a prepared transactional send: NO_PERMISSION, as RocketMQ's broker with
        ``rejectTransactionMessage`` answers (its clients raise it to the caller)."""
        self._refused(TRANSACTIONS, h.producer_group, f"a prepared transactional message to topic {h.topic}",
                      conn.peer)
        return cmd.make_response(ResponseCode.NO_PERMISSION,
                                 f"the broker[{self.broker_name}] sending transaction message is forbidden: "
                                 f"{TRANSACTIONS_MISSING}")

    def refuse_subscription(self, cmd: RemotingCommand, group: str, topic: str, expression_type: str, peer: str
                            ) -> RemotingCommand:
        """SYSTEM_ERROR, RocketMQ's answer with ``enablePropertyFilter`` off, for a subscription
        that is not a tag expression (the caller checks ``is_tag_type``)."""
        self._refused(SQL92, group, f"a {expression_type} subscription to topic {topic}", peer)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, sql92_missing(expression_type))

    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # producers send it oneway, so this answer is mostly for tools; the refusal that matters
        # is the prepared send's
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"END_TRANSACTION: {TRANSACTIONS_MISSING}")

    async def check_transaction_state(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f"CHECK_TRANSACTION_STATE: {TRANSACTIONS_MISSING}")
