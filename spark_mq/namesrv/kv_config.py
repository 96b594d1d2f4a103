"""The NameServer's namespaced key/value store (RocketMQ's KVConfigManager).

Persisted, as RocketMQ's ``kvConfig.json`` (``{"configTable": {ns: {k: v}}}``), to
``kvConfigPath`` after every change when that is set; in memory only when it is empty.
Namespace ``ORDER_TOPIC_CONFIG`` maps a topic to its ordered-queue layout
(``brokerName:queueNums;...``), attached to routes when orderMessageEnable is set.
"""

from __future__ import annotations

from spark_mq.common.json_file import JsonConfigFile

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """namespace → key → value; not thread-safe (one event loop calls it)."""

    def __init__(self, file: JsonConfigFile | None = None) -> None:
        self._file = file
        self._table: dict[str, dict[str, str]] = {}
        if file is not None:
            raw = file.load({}) or {}
            self._table = {ns: {str(k): str(v) for k, v in kv.items()} for ns, kv in raw.get("configTable", {}).items()}

    def _persist(self) -> None:
        if self._file is not None:
            self._file.persist({"configTable": self._table})

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self._table.get(namespace)
        if ns is not None and ns.pop(key, None) is not None:
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace; None if it was never written (RocketMQ answers QUERY_NOT_FOUND)."""
        ns = self._table.get(namespace)
        return dict(ns) if ns is not None else None
