"""One remoting command: a request or a response, as RocketMQ's ``RemotingCommand`` carries it.

Requests and responses share the shape; ``flag`` tells them apart (bit 0 response, bit 1
oneway) and ``opaque`` pairs a response with its request on one connection.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import IntEnum

RESPONSE_FLAG = 1 << 0  # RemotingCommand.RPC_TYPE
ONEWAY_FLAG = 1 << 1  # RemotingCommand.RPC_ONEWAY

# MQVersion.Version.V4_9_7.ordinal(): what a RocketMQ 4.9.7 client or broker puts in ``version``.
# A RocketMQ NameServer serves standard JSON routes to versions >= V4_9_4 (ordinal 401) and
# takes REGISTER_BROKER bodies as RegisterBrokerBody from versions >= V3_0_11.
ROCKETMQ_VERSION = 407
V4_0_0_SNAPSHOT = 212  # its ordinal: from there on every x.y.z has a SNAPSHOT and a release, in order


def version_desc(ordinal: int) -> str:
    """MQVersion's name of a 4.x version ordinal (407 -> ``V4_9_7``); others as the number."""
    index, release = divmod(ordinal - V4_0_0_SNAPSHOT, 2)
    if not 0 <= index < 100:
        return f"version {ordinal}"
    return f"V4_{index // 10}_{index % 10}" + ("" if release else "_SNAPSHOT")


class LanguageCode(IntEnum):
    """RocketMQ's LanguageCode: JSON headers carry the name, ROCKETMQ headers the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11


class SerializeType(IntEnum):
    """The high byte of the frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1


# A process-wide counter, as RocketMQ's static ``requestId``: opaques stay unique across every
# connection of the process, so a late response can never be taken for another request's.
# ``next()`` on itertools.count is atomic under the GIL, so threads may share it.
_opaques = itertools.count(1)


def next_opaque() -> int:
    """A fresh opaque, kept within a positive int32 as Java's client does."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass
class RemotingCommand:
    """A request or response; ``ext_fields`` holds the *RequestHeader fields as strings."""

    code: int
    language: str = LanguageCode.PYTHON.name
    version: int = ROCKETMQ_VERSION
    opaque: int = field(default_factory=next_opaque)
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @classmethod
    def request(cls, code: int, ext_fields: dict[str, object] | None = None, body: bytes = b"",
                oneway: bool = False) -> RemotingCommand:
        """A request with header fields stringified as Java's ``makeCustomHeaderToNet`` does."""
        fields = {k: _to_wire(v) for k, v in (ext_fields or {}).items() if v is not None}
        return cls(code=int(code), ext_fields=fields, body=body, flag=ONEWAY_FLAG if oneway else 0)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def make_response(self, code: int, remark: str | None = None, ext_fields: dict[str, object] | None = None,
                      body: bytes = b"", wire_fields: dict[str, str] | None = None) -> RemotingCommand:
        """The response to this request: same opaque, same serialize type (as RocketMQ answers). ``wire_fields``:
        header fields already as the strings sent, taken as they are (instead of ``ext_fields``: a hot path's)."""
        fields = wire_fields if wire_fields is not None else \
            {k: _to_wire(v) for k, v in (ext_fields or {}).items() if v is not None}
        return RemotingCommand(code=int(code), version=self.version if self.version else ROCKETMQ_VERSION,
                               opaque=self.opaque, flag=RESPONSE_FLAG, remark=remark, ext_fields=fields, body=body,
                               serialize_type=self.serialize_type)

    def describe(self) -> str:
        """A one-line summary for logs (never the body)."""
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return f"{kind} code={self.code} opaque={self.opaque} lang={self.language} v={self.version}"


def _to_wire(value: object) -> str:
    """Java's ``toString`` of a header field: booleans are ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
