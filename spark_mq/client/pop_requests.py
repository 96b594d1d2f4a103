"""``PopRequests``: the pop requests :class:`~spark_mq.client.api.MQClientAPI` sends to a broker (RocketMQ 5):
POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME. A pop that found nothing
(PULL_NOT_FOUND, or POLLING_TIMEOUT after a long poll) is an empty result, not an error.

Thread-safety: coroutines of one event loop, as the API's.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.client.requester import Requester
from spark_mq.client.results import decode_units_list
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import BatchAckMessageRequestBody
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)

_EMPTY = (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT)


@dataclass(frozen=True)
class PopResponse:
    """A POP_MESSAGE answer: the messages (empty when none came) and the response header."""

    messages: list[StoredMessage]
    header: PopMessageResponseHeader | None  # None when nothing came


class PopRequests(Requester):
    """Typed pop requests to brokers (``addr`` is a broker's ``host:port``)."""

    async def pop_message(self, addr: str, header: PopMessageRequestHeader,
                          timeout: float | None = None) -> PopResponse:
        """POP_MESSAGE. The default timeout outlasts the broker's long poll."""
        if timeout is None:
            timeout = self.timeout + header.poll_time / 1000
        response = await self._invoke(addr, RequestCode.POP_MESSAGE, header, timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, *_EMPTY))
        if response.code in _EMPTY:
            return PopResponse([], None)
        header_out = PopMessageResponseHeader.from_ext_fields(response.ext_fields)
        return PopResponse(decode_units_list(response.body), header_out)

    async def ack_message(self, addr: str, header: AckMessageRequestHeader, timeout: float | None = None) -> None:
        """ACK_MESSAGE; MQClientError NO_MESSAGE when the message is no longer in flight."""
        await self._invoke(addr, RequestCode.ACK_MESSAGE, header, timeout=timeout)

    async def batch_ack_message(self, addr: str, body: BatchAckMessageRequestBody,
                                timeout: float | None = None) -> None:
        """BATCH_ACK_MESSAGE; MQClientError NO_MESSAGE when the messages of one of its pops were all no longer
        in flight (the broker acknowledges the others all the same)."""
        await self._invoke(addr, RequestCode.BATCH_ACK_MESSAGE, body=body.to_json(), timeout=timeout)

    async def change_invisible_time(self, addr: str, header: ChangeInvisibleTimeRequestHeader,
                                    timeout: float | None = None) -> ChangeInvisibleTimeResponseHeader:
        """CHANGE_MESSAGE_INVISIBLETIME: the message's new pop time and invisible time."""
        response = await self._invoke(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header, timeout=timeout)
        return ChangeInvisibleTimeResponseHeader.from_ext_fields(response.ext_fields)
