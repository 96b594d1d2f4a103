"""``Requester``: how every request of :class:`~spark_mq.client.api.MQClientAPI` is sent and its
answer checked, shared by the request groups the API is made of (NameServer, offsets, admin).

``_invoke`` sends a request and returns the response when its code is one the caller expects,
else raises :class:`~spark_mq.common.errors.MQClientError` naming the request, the server, the
code, its remark and, where it is obvious, what to do about it (``_HINTS``).

Thread-safety: coroutines of one event loop, as the API's.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_mq.common.errors import MQClientError
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import Header

# what to do about a response code, where that is obvious
_HINTS: dict[int, str] = {
    ResponseCode.TOPIC_NOT_EXIST: "create the topic first (create_topic / `spark-mq admin`), "
    "or enable autoCreateTopicEnable on the broker",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "create the consumer group, or enable autoCreateSubscriptionGroup",
    ResponseCode.SUBSCRIPTION_NOT_EXIST: "send a HEART_BEAT carrying the subscription before pulling",
    ResponseCode.SUBSCRIPTION_NOT_LATEST: "send a HEART_BEAT with the current subscription before pulling",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "check the subscription expression (e.g. 'tagA || tagB')",
    ResponseCode.NO_PERMISSION: "the topic's or the broker's perm forbids this (check them with get_route_info), "
                                "or the broker does not serve what was asked (the remark says)",
    ResponseCode.SYSTEM_BUSY: "the broker is overloaded; retry after a short back-off",
    ResponseCode.SERVICE_NOT_AVAILABLE: "the broker cannot serve this now (stopping, slave, or disk full); "
    "try another broker",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "the server does not serve this request: check that the address is "
    "a broker and not a NameServer (or the reverse)",
    ResponseCode.MESSAGE_ILLEGAL: "check the topic name, the body size against maxMessageSize and the properties",
    ResponseCode.VERSION_NOT_SUPPORTED: "the server is too old or too new for this request",
    ResponseCode.CONSUMER_NOT_ONLINE: "no consumer of this group is connected to this broker",
    ResponseCode.INVALID_PARAMETER: "an argument is out of range for the broker's current state (the remark says "
    "which)",
}


# NO_PERMISSION from a server with aclEnable, by whether this client signs (the remark names the account and
# what it lacks); where the account is set: ClientConfig, the CLI, Spark's options
_SET_ACCOUNT = ("access_key/secret_key in ClientConfig, --access-key/--secret-key or SPARK_MQ_ACCESS_KEY/"
                "SPARK_MQ_SECRET_KEY for spark-mq, options accessKey/secretKey in Spark")
_ACL_HINTS = {
    False: "if the server checks ACL: this client sends no account; give one of the servers' plain_acl.yml "
           f"({_SET_ACCOUNT}); else " + _HINTS[ResponseCode.NO_PERMISSION],
    True: "if the server checks ACL: use an account whose plain_acl.yml entry grants this (admin: true for admin "
          f"operations, topicPerms/groupPerms for sends and pulls) and check its secret ({_SET_ACCOUNT}); else "
          + _HINTS[ResponseCode.NO_PERMISSION],
}


def _code(code: int) -> int:
    """The ResponseCode member for ``code`` when known (its name goes in error messages)."""
    try:
        return ResponseCode(code)
    except ValueError:
        return code


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


class Requester:
    """Sends requests over ``remoting`` with a default ``timeout`` (s); the request groups build on it."""

    remoting: RemotingClient
    timeout: float

    async def _invoke(self, addr: str, code: int, header: Header | dict[str, object] | None = None,
                      body: bytes = b"", timeout: float | None = None,
                      ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Send a request; return its response if its code is in ``ok``, else raise MQClientError."""
        if isinstance(header, Header):  # its fields are wire strings already
            cmd = RemotingCommand(code=int(code), ext_fields=header.to_ext_fields(), body=body)
        else:
            cmd = RemotingCommand.request(code, header, body)
        return await self._invoke_command(addr, cmd, timeout, ok)

    async def _invoke_command(self, addr: str, cmd: RemotingCommand, timeout: float | None = None,
                              ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """``_invoke`` of a request already made (its header fields wire strings)."""
        response = await self.remoting.invoke(addr, cmd, self.timeout if timeout is None else timeout)
        if response.code not in ok:
            raise self.error(response, addr, cmd.code, signed=self.remoting.credentials is not None)
        return response

    async def _oneway(self, addr: str, code: int, header: Header, body: bytes = b"",
                      timeout: float | None = None) -> None:
        cmd = RemotingCommand.request(code, header.to_ext_fields(), body, oneway=True)
        await self.remoting.invoke_oneway(addr, cmd, self.timeout if timeout is None else timeout)

    @staticmethod
    def error(response: RemotingCommand, addr: str, request_code: int, signed: bool = True) -> MQClientError:
        code = _code(response.code)
        hint = _ACL_HINTS[signed] if code == ResponseCode.NO_PERMISSION else _HINTS.get(response.code)
        return MQClientError(code, response.remark, addr, _request_name(request_code), hint)
