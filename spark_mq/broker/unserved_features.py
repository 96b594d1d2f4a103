"""What the broker does not serve yet, refused loudly instead of mis-served.

SQL92 subscriptions are a RocketMQ feature this broker does not implement yet. Served as if it
were a tag expression, a SQL92 expression matches nothing, so its consumer waits forever. So it
is refused the way RocketMQ refuses it when the feature is switched off
(``enablePropertyFilter=false``): a response code its clients surface, a remark that says what
is missing, a metric, and one log line per group (not one per request: a client retries).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.remoting.bodies import EXPRESSION_TAG, CheckClientRequestBody, is_tag_type
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection

log = logging.getLogger(__name__)

SQL92 = "sql92"  # the metric label of a refused SQL92 subscription

MAX_LOGGED_GROUPS = 1024  # groups remembered as logged: a client inventing group names costs bounded memory

Count = Callable[[str], None]
"""``count(feature)``: one refusal of ``feature`` (a metric)."""


def sql92_missing(expression_type: str) -> str:
    """The remark of a refused subscription: RocketMQ's words, then what to do."""
    return (f"The broker does not support consumer to filter message by {expression_type}: "
            f"{expression_type} filtering is not enabled on this broker (enablePropertyFilter is off, "
            f"not served yet); subscribe with a tag expression ({EXPRESSION_TAG}) and filter the rest "
            f"in the consumer")


class UnservedFeatures:
    """Refuses what is not served: counts every refusal, logs the first one per group.

    All methods run on the broker's event loop.
    """

    def __init__(self, broker_name: str, count: Count) -> None:
        self.broker_name = broker_name
        self._count = count
        self._logged: set[tuple[str, str]] = set()

    def register_on(self, server) -> None:
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

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

    def refuse_subscription(self, cmd: RemotingCommand, group: str, topic: str, expression_type: str, peer: str
                            ) -> RemotingCommand:
        """SYSTEM_ERROR, RocketMQ's answer with ``enablePropertyFilter`` off, for a subscription
        that is not a tag expression (the caller checks ``is_tag_type``)."""
        self._refused(SQL92, group, f"a {expression_type} subscription to topic {topic}", peer)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, sql92_missing(expression_type))

    async def check_client_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: a Java consumer with a non-tag subscription asks before it starts."""
        req = CheckClientRequestBody.from_json(cmd.body)
        sub = req.subscription_data
        if sub is not None and not is_tag_type(sub.expression_type):
            return self.refuse_subscription(cmd, req.group, sub.topic, sub.expression_type, conn.peer)
        return cmd.make_response(ResponseCode.SUCCESS)
