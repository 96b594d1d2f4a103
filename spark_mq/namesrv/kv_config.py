"""The NameServer's namespaced key/value store (RocketMQ's KVConfigManager).

RocketMQ persists it to ``kvConfig.json``; ours lives in memory for now, so entries vanish
when the NameServer restarts. Namespace ``ORDER_TOPIC_CONFIG`` maps a topic to its ordered-
queue layout (``brokerName:queueNums;...``), attached to routes when orderMessageEnable is set.
"""

from __future__ import annotations

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """namespace → key → value; not thread-safe (one event loop calls it)."""

    def __init__(self) -> None:
        self._table: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self._table.get(namespace)
        if ns is not None:
            ns.pop(key, None)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace; None if it was never written (RocketMQ answers QUERY_NOT_FOUND)."""
        ns = self._table.get(namespace)
        return dict(ns) if ns is not None else None
