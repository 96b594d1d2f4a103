"""The NameServer's JSON bodies, as RocketMQ's fastjson writes and reads them.

Kept here (not in ``remoting/bodies.py``) until the shared body codecs land; only what the
NameServer sends and receives. Bodies written: TopicRouteData, ClusterInfo, TopicList, KVTable,
DataVersion. Bodies read: RegisterBrokerBody (plain JSON, or RocketMQ 4.x's compressed form)
and DataVersion.

``brokerAddrs`` is a map keyed by broker id (a Java Long). fastjson writes such keys unquoted
(``{0:"127.0.0.1:10911"}``); RocketMQ 4.9.4+ writes standard JSON (``{"0":...}``) to clients of
version >= V4_9_4 and to anyone asking with ``acceptStandardJsonOnly``. We always write
standard JSON: fastjson, Go's encoding/json and the C++ client (jsoncpp with
``allowNumericKeys``, keys parsed back with ``atoi``) all accept it — checked against the real
C++ client in tests/peers. ``decode_json`` also accepts the unquoted form, for bodies from Java.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_mq.common.errors import RemotingCommandError

MAX_INFLATED = 64 * 1024 * 1024  # a compressed RegisterBrokerBody never legitimately inflates past this
_INT = struct.Struct(">i")
# an unquoted integer object key, as fastjson writes Long-keyed maps: {0:"a"} or ,1:"b"
_UNQUOTED_INT_KEY = re.compile(rb'([{,])\s*(-?\d+)\s*:')


def dumps(doc: object) -> bytes:
    """Compact UTF-8 JSON as fastjson writes it (no spaces, non-ASCII kept)."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def decode_json(raw: bytes, what: str) -> object:
    """Parse a JSON body; tolerates fastjson's unquoted integer keys."""
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        pass
    try:
        return json.loads(_quote_int_keys(raw).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise RemotingCommandError(f"{what} body is not valid JSON: {e}") from None


def _quote_int_keys(raw: bytes) -> bytes:
    """Quote bare integer keys outside strings (strings are copied untouched)."""
    out, pos = [], 0
    for m in re.finditer(rb'"(?:[^"\\]|\\.)*"', raw):
        out.append(_UNQUOTED_INT_KEY.sub(rb'\1"\2":', raw[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_UNQUOTED_INT_KEY.sub(rb'\1"\2":', raw[pos:]))
    return b"".join(out)


@dataclass(frozen=True)
class DataVersion:
    """A broker's topic-config version: changes when its topics change."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, doc: object) -> DataVersion:
        if not isinstance(doc, dict):
            return cls()
        return cls(timestamp=int(doc.get("timestamp") or 0), counter=int(doc.get("counter") or 0))


@dataclass(frozen=True)
class TopicConfig:
    """The part of a broker's TopicConfig the NameServer keeps."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6  # PermName.PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


@dataclass(frozen=True)
class RegisterBrokerBody:
    data_version: DataVersion
    topic_configs: dict[str, TopicConfig]
    filter_servers: list[str]


def _topic_config(name: str, doc: Mapping[str, object]) -> TopicConfig:
    def num(key: str, default: int) -> int:
        v = doc.get(key)
        return default if v is None else int(v)  # type: ignore[call-overload]

    return TopicConfig(topic_name=str(doc.get("topicName") or name), read_queue_nums=num("readQueueNums", 16),
                       write_queue_nums=num("writeQueueNums", 16), perm=num("perm", 6),
                       topic_sys_flag=num("topicSysFlag", num("topicSynFlag", 0)))


def decode_register_broker_body(raw: bytes, compressed: bool) -> RegisterBrokerBody:
    """RegisterBrokerBody: JSON, or (``compressed``) RocketMQ 4.x's deflated binary layout.

    Compressed layout, inside one zlib stream::

        int32 len | DataVersion JSON | int32 topicCount
        | (int32 len | "name read write perm filterType")*  | int32 len | filterServerList JSON
    """
    try:
        if compressed:
            return _decode_compressed(raw)
        doc = decode_json(raw, "RegisterBrokerBody")
        if not isinstance(doc, dict):
            raise RemotingCommandError("RegisterBrokerBody is not a JSON object")
        # RegisterBrokerBody (brokers since V3_0_11) or a bare TopicConfigSerializeWrapper (older)
        wrapper = doc.get("topicConfigSerializeWrapper") or (doc if "topicConfigTable" in doc else {})
        table = wrapper.get("topicConfigTable") or {}
        configs = {name: _topic_config(name, tc) for name, tc in table.items() if isinstance(tc, dict)}
        return RegisterBrokerBody(DataVersion.from_json(wrapper.get("dataVersion")), configs,
                                  list(doc.get("filterServerList") or []))
    except (ValueError, TypeError, AttributeError, zlib.error, struct.error) as e:
        raise RemotingCommandError(f"Failed to decode RegisterBrokerBody: {e}") from None


def _decode_compressed(raw: bytes) -> RegisterBrokerBody:
    inflater = zlib.decompressobj()
    data = inflater.decompress(raw, MAX_INFLATED)
    if inflater.unconsumed_tail:
        raise ValueError(f"inflates past {MAX_INFLATED} bytes")
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (n,) = _INT.unpack_from(data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise ValueError(f"length {n} at {pos} runs past the inflated body")
        pos += 4 + n
        return data[pos - n : pos]

    version = DataVersion.from_json(decode_json(chunk(), "DataVersion"))
    (count,) = _INT.unpack_from(data, pos)
    pos += 4
    configs: dict[str, TopicConfig] = {}
    for _ in range(count):
        parts = chunk().decode().split(" ")
        if len(parts) != 5:
            raise ValueError(f"topic config {' '.join(parts)!r} has {len(parts)} fields, expected 5")
        name, read, write, perm, _filter_type = parts
        configs[name] = TopicConfig(name, int(read), int(write), int(perm))
    filters = decode_json(chunk(), "filterServerList") if pos < len(data) else []
    return RegisterBrokerBody(version, configs, list(filters or []))  # type: ignore[arg-type]


def encode_register_broker_body(body: RegisterBrokerBody) -> bytes:
    """Plain-JSON RegisterBrokerBody (for tests and for our own broker until bodies.py lands)."""
    table = {name: {"order": False, "perm": tc.perm, "readQueueNums": tc.read_queue_nums,
                    "topicFilterType": "SINGLE_TAG", "topicName": name, "topicSysFlag": tc.topic_sys_flag,
                    "writeQueueNums": tc.write_queue_nums}
             for name, tc in body.topic_configs.items()}
    return dumps({"filterServerList": body.filter_servers,
                  "topicConfigSerializeWrapper": {"dataVersion": body.data_version.to_json(),
                                                  "topicConfigTable": table}})


def queue_data_json(broker_name: str, read: int, write: int, perm: int, sys_flag: int) -> dict[str, object]:
    """QueueData; the flag under both names (``topicSynFlag`` before RocketMQ 4.9, then ``topicSysFlag``)."""
    return {"brokerName": broker_name, "perm": perm, "readQueueNums": read, "topicSynFlag": sys_flag,
            "topicSysFlag": sys_flag, "writeQueueNums": write}


def broker_data_json(cluster: str, broker_name: str, addrs: Mapping[int, str]) -> dict[str, object]:
    return {"brokerAddrs": {str(i): a for i, a in sorted(addrs.items())}, "brokerName": broker_name,
            "cluster": cluster}


def topic_list_json(topics: Iterable[str]) -> bytes:
    return dumps({"topicList": sorted(topics)})
