"""RocketMQ remoting frames, bytes in and bytes out (no sockets here).

Frame (big-endian)::

    +--------------+------------------------------------+----------+--------+
    | int32 length | int32 (serializeType<<24 | hdrLen) | header   | body   |
    +--------------+------------------------------------+----------+--------+
      length = 4 + hdrLen + len(body)   (the length word does not count itself)

Header, serialize type 0 (JSON) — what RocketMQ's fastjson writes, fields in alphabetical
order, null fields left out, no spaces::

    {"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,
     "serializeTypeCurrentRPC":"JSON","version":407}

Header, serialize type 1 (ROCKETMQ binary, ``RocketMQSerializable``)::

    int16 code | int8 language | int16 version | int32 opaque | int32 flag
    | int32 remarkLen | remark utf-8 | int32 extLen | ext: (int16 keyLen, key, int32 valLen, val)*

We always write JSON unless a command says otherwise (a response copies its request's type,
as RocketMQ does); we read both.

What the real C++ client sends and accepts — read in rocketmq-client-cpp's
``RemotingCommand.cpp`` and captured byte for byte from PyPI ``rocketmq`` 0.4.4, whose bundled
librocketmq is C++ client 1.2.x (tests/peers/test_namesrv_cpp_client.py):

* A request header as it arrives (jsoncpp FastWriter: keys sorted, trailing newline)::

    {"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"sUBv...=",
     "topic":"CppTopic"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n

  ``version`` 63 is MQVersion V3_1_8 (C++ 1.2.0-1.2.4; 1.2.5 and 2.0.x send 333, V4_6_0).
  ``remark`` is ``""``, never absent; there is no ``serializeTypeCurrentRPC``. ``extFields``
  always carries ``AccessKey`` (empty without ACL), ``OnsChannel`` ("ALIYUN") and a
  ``Signature`` (an HMAC computed even with an empty key) beside the header's own fields; all
  values are JSON strings. Opaques start at 0 per process and count up.
* It reads a response's header length as the whole second int32, ignoring the serialize-type
  byte, so responses to it must be JSON (type 0) — which they are, since a response copies its
  request's serialize type.
* It reads ``remark`` only when non-null, and response ``extFields`` values with
  ``asString()``: header values we send must be JSON strings, as Java sends them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from spark_mq.common.errors import FrameError
from spark_mq.remoting.command import LanguageCode, RemotingCommand, SerializeType
from spark_mq.remoting.fastjson import dumps_header, loads_header

DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # RocketMQ's NettyDecoder FRAME_MAX_LENGTH default
# a body at least this long is written on its own, not copied behind its header: below it one
# write (one system call) is cheaper than a second one
SEPARATE_BODY_BYTES = 64 * 1024

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # total length, (serialize type << 24 | header length)
# code int16 | language int8 | version int16 | opaque int32 | flag int32
_BIN_FIXED = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_HEADER_LEN_MASK = 0xFFFFFF
_STR_ONLY = frozenset({str})  # extFields values taken as they are
_SERIALIZE_NAMES = {t: t.name for t in SerializeType}  # what the JSON header's serializeTypeCurrentRPC says


def encode(cmd: RemotingCommand) -> bytes:
    """One complete frame for ``cmd``."""
    return b"".join(frame_pieces(cmd))


def frame_pieces(cmd: RemotingCommand) -> tuple[bytes, ...]:
    """``cmd``'s frame as the pieces to write in order: one piece, or two (the length words and
    header, then the body itself) when the body is at least ``SEPARATE_BODY_BYTES`` long, so a
    batch of megabytes goes to the socket as it is rather than copied behind its header."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        header = _encode_json_header(cmd)
    if len(header) > _HEADER_LEN_MASK:
        raise FrameError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    body = cmd.body or b""
    head = _PREFIX.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header)) + header
    return (head, body) if len(body) >= SEPARATE_BODY_BYTES else (head + body,)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    doc: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        doc["extFields"] = cmd.ext_fields
    doc["flag"] = cmd.flag
    doc["language"] = cmd.language
    doc["opaque"] = cmd.opaque
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    doc["serializeTypeCurrentRPC"] = _SERIALIZE_NAMES[cmd.serialize_type]
    doc["version"] = cmd.version
    return dumps_header(doc)


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        lang = LanguageCode[cmd.language]
    except KeyError:
        lang = LanguageCode.OTHER
    try:
        parts = [_BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)]
    except struct.error as e:
        raise FrameError(f"{cmd.describe()} does not fit the ROCKETMQ binary header: {e}") from None
    remark = cmd.remark.encode() if cmd.remark else b""
    parts += [_INT.pack(len(remark)), remark]
    ext = b"".join(_I16.pack(len(k)) + k + _INT.pack(len(v)) + v
                   for k, v in ((k.encode(), v.encode()) for k, v in cmd.ext_fields.items()))
    parts += [_INT.pack(len(ext)), ext]
    return b"".join(parts)


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame *without* its leading length word (as RocketMQ's ``decode`` takes it)."""
    cmd, body = decode_frame_view(memoryview(frame))
    cmd.body = bytes(body)
    return cmd


def decode_frame_view(frame: memoryview) -> tuple[RemotingCommand, memoryview]:
    """A frame (without its length word) as its command with an empty body, and the body as a view of
    ``frame``: a reader that decodes a large pull body in place skips the body's copy."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header-length word")
    word = _INT.unpack_from(frame)[0] & 0xFFFFFFFF
    _check_header_length(word, len(frame) - 4)
    header_len = word & _HEADER_LEN_MASK
    return _command(word >> 24, frame[4 : 4 + header_len], b""), frame[4 + header_len :]


def _check_header_length(word: int, after_word: int) -> None:
    header_len = word & _HEADER_LEN_MASK
    if header_len > after_word:
        raise FrameError(f"header length {header_len} exceeds the frame ({after_word} bytes after the word)")


def _command(kind: int, header: memoryview, body: bytes) -> RemotingCommand:
    """The command of a frame split into its serialize type, header bytes and body."""
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif kind == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {kind}: expected 0 (JSON) or 1 (ROCKETMQ)")
    cmd.body = body
    return cmd


def _int_field(doc: dict, name: str, default: int | None) -> int:
    value = doc.get(name, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        if value is None and default is None:
            raise FrameError(f"JSON header has no {name!r}")
        raise FrameError(f"JSON header field {name!r} is {value!r}, not an integer")
    return value


def _scalars_as_strings(raw_ext: dict) -> dict[str, str]:
    """JSON extFields as strings: numbers as text (jsoncpp headers may carry them), booleans as
    ``true``/``false``, nulls left out; anything else is a ``FrameError``."""
    ext: dict[str, str] = {}
    for k, v in raw_ext.items():
        if v is None:
            continue
        if isinstance(v, bool):
            ext[k] = "true" if v else "false"
        elif isinstance(v, (str, int, float)):
            ext[k] = v if isinstance(v, str) else str(v)
        else:
            raise FrameError(f"JSON header extFields[{k!r}] is not a scalar")
    return ext


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        doc = loads_header(header)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FrameError(f"header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FrameError(f"JSON header is a {type(doc).__name__}, not an object")
    code = _int_field(doc, "code", None)
    language = doc.get("language") or LanguageCode.JAVA.name
    if not isinstance(language, str):
        language = str(language)
    remark = doc.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise FrameError(f"JSON header remark is {remark!r}, not a string")
    raw_ext = doc.get("extFields") or {}
    if not isinstance(raw_ext, dict):
        raise FrameError("JSON header extFields is not an object")
    # Java's headers carry strings only: taken as they are; others converted
    ext = raw_ext if _STR_ONLY.issuperset(map(type, raw_ext.values())) else _scalars_as_strings(raw_ext)
    kind = doc.get("serializeTypeCurrentRPC")
    # an integer as sent taken as it is: _int_field only for what is not one (it says what is wrong)
    if type(version := doc.get("version", 0)) is not int:
        version = _int_field(doc, "version", 0)
    if type(opaque := doc.get("opaque", 0)) is not int:
        opaque = _int_field(doc, "opaque", 0)
    if type(flag := doc.get("flag", 0)) is not int:
        flag = _int_field(doc, "flag", 0)
    return RemotingCommand(code, language, version, opaque, flag, remark, ext, b"",
                           SerializeType.ROCKETMQ if kind == "ROCKETMQ" else SerializeType.JSON)


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    if len(header) < _BIN_FIXED.size + 8:
        raise FrameError(f"ROCKETMQ header of {len(header)} bytes is shorter than its fixed part")
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header)
    pos = _BIN_FIXED.size
    remark_bytes, pos = _take(header, pos, _INT, "remark")
    ext_bytes, pos = _take(header, pos, _INT, "extFields")
    ext: dict[str, str] = {}
    epos = 0
    while epos < len(ext_bytes):
        key, epos = _take(ext_bytes, epos, _I16, "extFields key")
        val, epos = _take(ext_bytes, epos, _INT, "extFields value")
        ext[_utf8(key, "extFields key")] = _utf8(val, "extFields value")
    try:
        language = LanguageCode(lang).name
    except ValueError:
        language = LanguageCode.OTHER.name
    return RemotingCommand(code=code, language=language, version=version, opaque=opaque, flag=flag,
                           remark=_utf8(remark_bytes, "remark") if len(remark_bytes) else None,
                           ext_fields=ext, serialize_type=SerializeType.ROCKETMQ)


def _take(buf: memoryview, pos: int, length: struct.Struct, what: str) -> tuple[memoryview, int]:
    """A length-prefixed field at ``pos``: (its bytes, position after it)."""
    if pos + length.size > len(buf):
        raise FrameError(f"ROCKETMQ header truncated before the {what} length")
    n = length.unpack_from(buf, pos)[0]
    pos += length.size
    if n < 0 or pos + n > len(buf):
        raise FrameError(f"ROCKETMQ header {what} length {n} runs past the header ({len(buf) - pos} bytes left)")
    return buf[pos : pos + n], pos + n


def _utf8(raw: memoryview, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FrameError(f"{what} is not valid UTF-8: {e}") from None


class FrameDecoder:
    """Turns a byte stream into commands; feed it chunks as they arrive.

    A frame that arrives whole inside one chunk is decoded straight from that chunk. A frame
    split across chunks (every multi-MB pull response) is read in two parts: its head (length
    word, header-length word, header: small) into a bytearray, its body as references to the
    chunks, joined once when the last one arrives. So each body byte is copied exactly once
    whatever the chunking, where appending to and slicing one growing buffer copied it three
    times and re-copied the buffer as it grew.

    After a ``FrameError`` the stream is out of sync and the decoder must be dropped with its
    connection. Not thread-safe: one decoder per connection, fed by its reader task.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._head = bytearray()  # the current frame's bytes before its body
        self._head_size = 4  # how many head bytes we need next: 4 (length), 8 (+ word), 8 + header
        self._length = 0  # the current frame's length word, once read
        self._body_parts: list[bytes | memoryview] = []
        self._body_left = -1  # body bytes still missing; -1 while the head is incomplete
        self._body_have = 0

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[RemotingCommand]:
        """Take ``data``; yield every command now complete."""
        if type(data) is not bytes:
            data = bytes(data)  # the body parts we keep must not change under us
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if not self._head and self._body_left < 0 and end - pos >= 4:  # at a frame boundary
                length = _INT.unpack_from(view, pos)[0]
                if 4 <= length <= self.max_frame and end - pos >= 4 + length:  # whole here: decode in place
                    pos += 4 + length
                    yield decode_frame(view[pos - length : pos])
                    continue
            if self._body_left < 0:
                take = min(self._head_size - len(self._head), end - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < self._head_size or not self._head_done():
                    continue
            take = min(self._body_left, end - pos)
            if take:
                self._body_parts.append(data if take == end else view[pos : pos + take])
                self._body_left -= take
                self._body_have += take
                pos += take
            if not self._body_left:
                yield self._finish()

    def _checked_length(self, length: int) -> int:
        if length < 4:
            raise FrameError(f"frame length {length} is below the 4-byte minimum")
        if length > self.max_frame:
            raise FrameError(f"frame length {length} exceeds the {self.max_frame}-byte limit")
        return length

    def _head_done(self) -> bool:
        """Act on a head just grown to ``_head_size`` bytes: True once the body is next."""
        if self._head_size == 4:
            self._length = self._checked_length(_INT.unpack_from(self._head)[0])
            self._head_size = 8
            return False
        if self._head_size == 8:
            word = _INT.unpack_from(self._head, 4)[0] & 0xFFFFFFFF
            # a header length past the frame is reported once the frame is in, as decode_frame does
            self._head_size = 8 + min(word & _HEADER_LEN_MASK, self._length - 4)
            if self._head_size > 8:
                return False
        self._body_left = self._length + 4 - self._head_size
        return True

    def _finish(self) -> RemotingCommand:
        """The command of the frame just completed; the decoder is then at a frame boundary."""
        head = memoryview(self._head)
        parts = self._body_parts
        body = parts[0] if len(parts) == 1 and type(parts[0]) is bytes else b"".join(parts)
        self._head, self._head_size, self._body_parts, self._body_left, self._body_have = bytearray(), 4, [], -1, 0
        word = _INT.unpack_from(head, 4)[0] & 0xFFFFFFFF
        _check_header_length(word, self._length - 4)
        return _command(word >> 24, head[8:], body)

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._head) + self._body_have
