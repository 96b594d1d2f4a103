"""What the broker does not serve yet, refused loudly instead of mis-served.

SQL92 subscriptions are served only with ``enablePropertyFilter=true`` (``sql92_filters``), as in
RocketMQ. With it off, served as if it were a tag expression, a SQL92 expression matches nothing,
so its consumer waits forever. So it is refused the way RocketMQ refuses it when the feature is
switched off: a response code its clients surface, a remark that says what is missing, a metric,
and one log line per group (not one per request: a client retries).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.remoting.bodies import EXPRESSION_TAG
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

SQL92 = "sql92"  # the metric label of a refused SQL92 subscription

MAX_LOGGED_GROUPS = 1024  # groups remembered as logged: a client inventing group names costs bounded memory

Count = Callable[[str], None]
"""``count(feature)``: one refusal of ``feature`` (a metric)."""


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

