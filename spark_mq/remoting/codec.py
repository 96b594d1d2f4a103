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

import json
import struct
from collections.abc import Iterator

from spark_mq.common.errors import FrameError
from spark_mq.remoting.command import LanguageCode, RemotingCommand, SerializeType

DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # RocketMQ's NettyDecoder FRAME_MAX_LENGTH default

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # total length, (serialize type << 24 | header length)
# code int16 | language int8 | version int16 | opaque int32 | flag int32
_BIN_FIXED = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_HEADER_LEN_MASK = 0xFFFFFF


def encode(cmd: RemotingCommand) -> bytes:
    """One complete frame for ``cmd``."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        header = _encode_json_header(cmd)
    if len(header) > _HEADER_LEN_MASK:
        raise FrameError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    body = cmd.body or b""
    return _PREFIX.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header)) + header + body


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    doc: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        doc["extFields"] = cmd.ext_fields
    doc["flag"] = cmd.flag
    doc["language"] = cmd.language
    doc["opaque"] = cmd.opaque
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    doc["serializeTypeCurrentRPC"] = SerializeType(cmd.serialize_type).name
    doc["version"] = cmd.version
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


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
    frame = memoryview(frame)
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header-length word")
    word = _INT.unpack_from(frame)[0] & 0xFFFFFFFF
    kind, header_len = word >> 24, word & _HEADER_LEN_MASK
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} exceeds the frame ({len(frame) - 4} bytes after the word)")
    header = frame[4 : 4 + header_len]
    body = bytes(frame[4 + header_len :])
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


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        doc = json.loads(bytes(header).decode("utf-8"))
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
    ext: dict[str, str] = {}
    for k, v in raw_ext.items():
        if v is None:
            continue
        if isinstance(v, bool):
            ext[k] = "true" if v else "false"
        elif isinstance(v, (str, int, float)):
            ext[k] = v if isinstance(v, str) else str(v)  # jsoncpp headers may carry numbers
        else:
            raise FrameError(f"JSON header extFields[{k!r}] is not a scalar")
    kind = doc.get("serializeTypeCurrentRPC")
    return RemotingCommand(
        code=code,
        language=language,
        version=_int_field(doc, "version", 0),
        opaque=_int_field(doc, "opaque", 0),
        flag=_int_field(doc, "flag", 0),
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ if kind == "ROCKETMQ" else SerializeType.JSON,
    )


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

    After a ``FrameError`` the stream is out of sync and the decoder must be dropped with its
    connection. Not thread-safe: one decoder per connection, fed by its reader task.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[RemotingCommand]:
        """Append ``data``; yield every command now complete."""
        self._buf += data
        while len(self._buf) >= 4:
            length = _INT.unpack_from(self._buf)[0]
            if length < 4:
                raise FrameError(f"frame length {length} is below the 4-byte minimum")
            if length > self.max_frame:
                raise FrameError(f"frame length {length} exceeds the {self.max_frame}-byte limit")
            if len(self._buf) < 4 + length:
                return
            frame = bytes(self._buf[4 : 4 + length])
            del self._buf[: 4 + length]
            yield decode_frame(frame)

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._buf)
