"""SQL92 subscriptions on the broker (RocketMQ's ``enablePropertyFilter``, ConsumerFilterManager and
ExpressionMessageFilter): compile a subscription's expression once, judge each pull's candidate
units with it in one vectorised pass, and answer CHECK_CLIENT_CONFIG.

A bad expression is answered SUBSCRIPTION_PARSE_FAILED with the parse error and its position (line
and column), at CHECK_CLIENT_CONFIG (a consumer's subscribe), at a heartbeat and at a pull; it is
logged once per expression as one WARNING line, never a traceback. With ``enablePropertyFilter`` off
every SQL92 subscription is refused as before (UnservedFeatures), and the engine (pyarrow) is never loaded; with
it on, the engine is loaded while the broker starts.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from spark_mq.broker.processors.unserved_features import UnservedFeatures
from spark_mq.remoting.bodies import EXPRESSION_SQL92, CheckClientRequestBody, is_tag_type
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection

if TYPE_CHECKING:
    from spark_mq.filter.evaluate import Sql92Filter
    from spark_mq.filter.sql92 import FilterParseError

log = logging.getLogger(__name__)

MAX_COMPILED = 1024  # distinct expressions kept compiled (RocketMQ's parse cache keeps 100)
WARM_UP_EXPRESSION = "a > 1"  # evaluated once at start (``_load_engine``)


class Sql92Filters:
    """Compiled SQL92 subscriptions (and parse failures), least recently used dropped first.

    Runs on the broker's event loop.
    """

    def __init__(self, enabled: bool, unserved: UnservedFeatures) -> None:
        self.enabled = enabled
        self.unserved = unserved
        self._compiled: OrderedDict[str, Sql92Filter | FilterParseError] = OrderedDict()
        if enabled:
            self._load_engine()

    @staticmethod
    def _load_engine() -> None:
        """Load the filter engine while the broker starts, not at the first SQL92 subscription: that imports
        pyarrow, and pyarrow's first array imports pandas (together 1-3 s on a loaded machine), all on the event
        loop, where every connection's requests waited behind them (a pull once went unanswered for 5 s)."""
        # lazy import: only a broker with the filter on loads the engine
        import pyarrow as pa

        from spark_mq.filter.evaluate import Sql92Filter

        Sql92Filter.compile(WARM_UP_EXPRESSION).matches({"a": pa.array(["2"])}, 1)

    def register_on(self, server) -> None:
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

    def compile(self, expression: str) -> Sql92Filter | FilterParseError:
        """The filter of ``expression``, or why it does not parse (cached either way)."""
        # lazy import: pyarrow and the SQL92 grammar stay out of the start of a broker with the filter off
        from spark_mq.filter.evaluate import Sql92Filter
        from spark_mq.filter.sql92 import FilterParseError

        found = self._compiled.get(expression)
        if found is None:
            try:
                found = Sql92Filter.compile(expression)
            except FilterParseError as e:
                log.warning("refused SQL92 expression %r: %s", expression[:200], e)
                found = e
            self._compiled[expression] = found
            if len(self._compiled) > MAX_COMPILED:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(expression)
        return found

    def resolve(self, cmd: RemotingCommand, group: str, topic: str, expression_type: str | None,
                expression: str | None, peer: str) -> Sql92Filter | RemotingCommand | None:
        """What a subscription asks of the broker: None for a tag subscription, the filter of a SQL92
        one, or the response that refuses it (filtering off, another type, or a bad expression)."""
        if is_tag_type(expression_type):
            return None
        if not self.enabled or expression_type != EXPRESSION_SQL92:
            return self.unserved.refuse_subscription(cmd, group, topic, expression_type or "", peer)
        found = self.compile(expression or "")
        from spark_mq.filter.sql92 import FilterParseError  # lazy import: loaded by compile() above

        if isinstance(found, FilterParseError):
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                     f"parse the consumer's subscription [{expression}] failed: {found}")
        return found

    async def check_client_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: a consumer with a non-tag subscription asks before it starts."""
        req = CheckClientRequestBody.from_json(cmd.body)
        sub = req.subscription_data
        if sub is not None:
            found = self.resolve(cmd, req.group, sub.topic, sub.expression_type, sub.sub_string, conn.peer)
            if isinstance(found, RemotingCommand):
                return found
        return cmd.make_response(ResponseCode.SUCCESS)
