"""One exception hierarchy for the whole project.

Expected outcomes (no message yet, offset too small) are status values on results, not
exceptions; these classes are for broken inputs and broken invariants, and every message
says what to do about it.
"""

from __future__ import annotations


class SparkMQError(Exception):
    """Base of every error raised by spark_mq."""


class ConfigError(SparkMQError):
    """A configuration file or option is invalid (unknown key, bad value)."""


class MessageValidationError(SparkMQError):
    """A message was rejected before anything was written (bad topic, oversized body...)."""


class InvalidNameError(MessageValidationError):
    """A topic, group, broker name or KV key breaks the naming rule (``common/names.py``). A
    MessageValidationError too: a message to such a topic is rejected before anything is written."""


class StoreError(SparkMQError):
    """The message store cannot do what was asked."""


class StorePathError(StoreError):
    """A path built from names would not lie inside the store root; nothing was touched."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's lock file."""


class StoreNotWritableError(StoreError):
    """Writes are refused (disk over its warning ratio, store shutting down)."""


class DiskFullError(StoreNotWritableError):
    """A store file could not get its disk blocks (ENOSPC): the store refuses writes until
    space is freed; nothing already stored is lost."""


class ReplicationError(StoreError):
    """Replicated commitlog bytes do not continue this store's commitlog (they start at another
    offset than its end): nothing is written, the replica's files stay as they were."""


class DivergedLogError(ReplicationError):
    """A replica's log cannot be brought in line with its master's automatically (its history is
    unknown to the master, or it holds data past the master's end that no truncation may drop):
    nothing was changed; the message says what a person must decide."""


class EpochFileError(StoreError):
    """The epoch file cannot be read (corrupt, or not one we wrote): nothing was changed; the
    message names the file and what to do."""


class CorruptFileError(StoreError):
    """A store file breaks its format; names the file and the offset."""

    def __init__(self, path: str, offset: int, why: str) -> None:
        super().__init__(f"{path}: corrupt at offset {offset}: {why}")
        self.path = path
        self.offset = offset


class PortInUseError(SparkMQError):
    """A port a process must listen on is taken; names the address and the config key that set it
    (see ``common/port_in_use.py``)."""


class RemotingError(SparkMQError):
    """The remoting layer (frames, connections, request/response) failed."""


class FrameError(RemotingError):
    """Bytes on a connection are not a valid RocketMQ remoting frame; the connection must close."""


class RemotingConnectError(RemotingError):
    """A connection could not be opened, or was lost while requests were pending."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class RemotingCommandError(RemotingError):
    """A request lacks a header field its code requires, or carries one that does not parse."""


class HeaderError(RemotingCommandError):
    """A remoting command's extFields miss a required field or hold a value of the wrong type.

    ``header`` names the header class and the request it belongs to, ``field`` the wire name.
    """

    def __init__(self, header: str, field: str, why: str) -> None:
        super().__init__(f"{header}: field {field!r} {why}")
        self.header = header
        self.field = field


class BodyError(RemotingCommandError):
    """A remoting command's body (JSON or binary) cannot be decoded; says where and why."""


class BatchBodyError(BodyError):
    """A message-batch or pull-response body breaks its binary layout; names the byte offset."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(f"message body corrupt at byte {offset}: {why}")
        self.offset = offset


class ClientError(SparkMQError):
    """A producer, consumer or admin used wrongly (not started, closed, a duplicate group)."""


class SendFailedError(SparkMQError):
    """A producer gave up on a send: every attempt failed (``__cause__`` is the last failure), the
    send timeout ran out, or the topic has no route. ``results`` holds what was stored before the
    failure (the sub-batches of a split batch sent already)."""

    def __init__(self, text: str, results: list | None = None) -> None:
        super().__init__(text)
        self.results = results or []


class MQClientError(SparkMQError):
    """A broker or NameServer answered a request with a non-success response code.

    ``code`` is the response code (a ``ResponseCode`` member when the code is known, else the
    int), ``remark`` the server's text, ``addr`` the server's ``host:port`` and ``request`` the
    name of the request (``"PULL_MESSAGE"``). ``hint`` says what to do about it, where that is
    obvious from the code.
    """

    def __init__(self, code: int, remark: str | None, addr: str, request: str, hint: str | None = None) -> None:
        name = getattr(code, "name", None) or f"code {int(code)}"
        text = f"{request} to {addr} failed: {name} ({int(code)})"
        if remark:
            text += f": {remark.strip()}"
        if hint:
            text += f" -- {hint}"
        super().__init__(text)
        self.code = int(code)
        self.remark = remark
        self.addr = addr
        self.request = request
        self.hint = hint
