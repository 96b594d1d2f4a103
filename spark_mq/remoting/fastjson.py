"""JSON as RocketMQ's Java side writes it with fastjson, and a reader tolerant of it.

fastjson (``RemotingSerializable.toJson``, default features) writes:

- bean properties sorted by name, ``null`` properties left out, no blanks;
- strings with ``"``, ``\\`` and control characters escaped, other characters raw (UTF-8);
- map keys that are not strings *unquoted*: ``{0:"127.0.0.1:10911"}`` for ``Map<Long,String>``;
- map keys that are objects written *as the object*:
  ``{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5,...}}`` for
  ``Map<MessageQueue,TopicOffset>`` (TopicStatsTable, ConsumeStats).

The last two are not JSON. :func:`dumps` writes them exactly so (``standard=True`` writes
quoted keys instead, as the 4.9.4+ NameServer does for clients that ask for standard JSON:
``"0"``, and an object key as the string of its JSON). :func:`loads` reads both forms:
standard JSON goes through :func:`json.loads` (C speed); anything else falls back to a small
recursive reader that handles objects, arrays and keys itself and leaves every scalar to
``json``'s own scanner. Integer keys come back as ``int``, object keys as :class:`ObjectKey`.

Every frame's header is a small JSON object of string keys: :func:`dumps_header` and
:func:`loads_header` write and read it with ``orjson`` when it is installed (its compact output is
byte for byte what ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` writes, at about a
tenth of the CPU: two headers a request on each side of every hop), with :mod:`json` otherwise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spark_mq.common.errors import BodyError

try:  # optional: a compiled JSON codec for the frame headers; json below does the same, slower
    import orjson
except ImportError:  # pragma: no cover - the set-up installs it
    orjson = None


class Bean(dict):
    """A JSON object written like a Java bean: properties sorted by name, ``None`` left out."""


class ObjectKey(tuple):
    """A map key that was a JSON object (fastjson's ``{{...}:value}``): its sorted items."""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        return cls(sorted(obj.items()))

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


class JsonKey:
    """Something that can be a map key written as an object (MessageQueue): gives its bean."""

    def to_obj(self) -> Bean:  # pragma: no cover - interface
        raise NotImplementedError


_dumps_str = json.JSONEncoder(ensure_ascii=False).encode
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_dumps_header(doc: dict[str, Any]) -> bytes:
    """``doc`` as compact JSON, UTF-8, non-ASCII characters raw (:mod:`json`'s way)."""
    return _compact(doc).encode()


def json_loads_header(data: bytes | memoryview) -> Any:
    """The JSON value of UTF-8 ``data`` (:mod:`json`'s way); ``ValueError`` if it is not one."""
    return json.loads(bytes(data).decode("utf-8"))


if orjson is not None:
    _OR_OPTIONS = orjson.OPT_NON_STR_KEYS  # an int key is written as json writes it, "1"

    def dumps_header(doc: dict[str, Any]) -> bytes:
        """``doc`` as compact JSON: the bytes :func:`json_dumps_header` writes."""
        try:
            return orjson.dumps(doc, option=_OR_OPTIONS)
        except TypeError:  # what orjson refuses (an int past 64 bits), json may still write
            return json_dumps_header(doc)

    def loads_header(data: bytes | memoryview) -> Any:
        """The JSON value of UTF-8 ``data``; ``ValueError`` if it is not one."""
        return orjson.loads(data)  # orjson.JSONDecodeError is a ValueError
else:  # pragma: no cover - the set-up installs orjson
    dumps_header = json_dumps_header
    loads_header = json_loads_header


def dumps(value: Any, standard: bool = False) -> bytes:
    """``value`` as fastjson writes it (``standard=True``: with every map key quoted)."""
    out: list[str] = []
    _write(value, out, standard)
    return "".join(out).encode()


def _write(v: Any, out: list[str], standard: bool) -> None:
    append = out.append
    if isinstance(v, str):
        append(_dumps_str(v))
    elif v is None:
        append("null")
    elif v is True:
        append("true")
    elif v is False:
        append("false")
    elif isinstance(v, int):
        append(str(int(v)))
    elif isinstance(v, float):
        append(repr(v) if math.isfinite(v) else "null")
    elif isinstance(v, JsonKey):
        _write(v.to_obj(), out, standard)
    elif isinstance(v, Mapping):
        items = v.items()
        if isinstance(v, Bean):
            items = sorted((k, x) for k, x in items if x is not None)
        append("{")
        first = True
        for k, x in items:
            if not first:
                append(",")
            first = False
            _write_key(k, out, standard)
            append(":")
            _write(x, out, standard)
        append("}")
    elif isinstance(v, Iterable):
        append("[")
        first = True
        for x in v:
            if not first:
                append(",")
            first = False
            _write(x, out, standard)
        append("]")
    else:
        raise TypeError(f"cannot write {type(v).__name__} as JSON")


def _write_key(k: Any, out: list[str], standard: bool) -> None:
    if isinstance(k, str):
        out.append(_dumps_str(k))
    elif isinstance(k, bool) or not isinstance(k, (int, JsonKey)):
        raise TypeError(f"cannot write {type(k).__name__} as a JSON map key")
    elif standard:
        out.append(_dumps_str(dumps(k).decode()))
    elif isinstance(k, int):
        out.append(str(int(k)))
    else:
        _write(k, out, standard)


# --- reading --------------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_INT_KEY = re.compile(r"-?[0-9]+")
_scan_once = json.JSONDecoder().scan_once
_scanstring = json.decoder.scanstring
_TRAILER = " \t\n\r\x00"  # jsoncpp's FastWriter ends with a newline; C buffers may add a NUL


def loads(data: bytes | str, what: str = "body") -> Any:
    """Parse standard JSON or fastjson's form; raises BodyError naming ``what`` and the position."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode()
    except UnicodeDecodeError as e:
        raise BodyError(f"{what}: not UTF-8 at byte {e.start}") from None
    text = text.rstrip(_TRAILER)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or a number over int's digit limit
        pass
    try:
        value, end = _Reader(text, what).value(0)
    except RecursionError:
        raise BodyError(f"{what}: nested too deeply") from None
    except ValueError as e:  # a number beyond int's digit limit
        raise BodyError(f"{what}: {e}") from None
    end = _WS.match(text, end).end()
    if end != len(text):
        raise BodyError(f"{what}: unexpected data at position {end}")
    return value


class _Reader:
    def __init__(self, text: str, what: str) -> None:
        self.s = text
        self.what = what

    def error(self, i: int, why: str) -> BodyError:
        return BodyError(f"{self.what}: {why} at position {i}")

    def value(self, i: int) -> tuple[Any, int]:
        s = self.s
        i = _WS.match(s, i).end()
        c = s[i : i + 1]
        if c == "{":
            return self.obj(i + 1)
        if c == "[":
            return self.arr(i + 1)
        try:
            return _scan_once(s, i)
        except StopIteration:
            raise self.error(i, "expected a value") from None
        except json.JSONDecodeError as e:
            raise self.error(e.pos, e.msg) from None

    def obj(self, i: int) -> tuple[dict[Any, Any], int]:
        s = self.s
        d: dict[Any, Any] = {}
        i = _WS.match(s, i).end()
        if s[i : i + 1] == "}":
            return d, i + 1
        while True:
            i = _WS.match(s, i).end()
            c = s[i : i + 1]
            key: Any
            if c == '"':
                try:
                    key, i = _scanstring(s, i + 1)
                except json.JSONDecodeError as e:
                    raise self.error(e.pos, e.msg) from None
            elif c == "{":
                sub, i = self.obj(i + 1)
                key = ObjectKey.of(sub)
            else:
                m = _INT_KEY.match(s, i)
                if not m:
                    raise self.error(i, "expected a key")
                key, i = int(m.group()), m.end()
            i = _WS.match(s, i).end()
            if s[i : i + 1] != ":":
                raise self.error(i, "expected ':'")
            at = i
            value, i = self.value(i + 1)
            try:
                d[key] = value
            except TypeError:
                raise self.error(at, "an object key holds nested objects") from None
            i = _WS.match(s, i).end()
            c = s[i : i + 1]
            if c == ",":
                i += 1
            elif c == "}":
                return d, i + 1
            else:
                raise self.error(i, "expected ',' or '}'")

    def arr(self, i: int) -> tuple[list[Any], int]:
        s = self.s
        items: list[Any] = []
        i = _WS.match(s, i).end()
        if s[i : i + 1] == "]":
            return items, i + 1
        while True:
            v, i = self.value(i)
            items.append(v)
            i = _WS.match(s, i).end()
            c = s[i : i + 1]
            if c == ",":
                i += 1
            elif c == "]":
                return items, i + 1
            else:
                raise self.error(i, "expected ',' or ']'")
