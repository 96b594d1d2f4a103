"""Deleting a topic: its queues start again from 0, its messages are not served or found by
key, other topics are untouched, and none of it comes back after a crash."""

from __future__ import annotations

from spark_mq.common.message import Message
from spark_mq.common.unit.decode import decode_message


def _put(store, topic: str, n: int, key_prefix: str) -> None:
    for i in range(n):
        store.put_message(Message(topic, f"{topic}-{i}".encode(), keys=[f"{key_prefix}{i}"]), 0)


def test_deleted_topic_starts_empty_and_is_not_found_by_key(make_store, tmp_path):
    root = tmp_path / "store"
    store = make_store(root)
    _put(store, "Gone", 5, "k")
    _put(store, "Kept", 3, "k")
    assert store.delete_topic("Gone") == 1
    assert store.get_max_offset("Gone", 0) == 0
    assert store.query_by_key("Gone", "k1") == []
    assert [decode_message(u).body for u in store.query_by_key("Kept", "k1")] == [b"Kept-1"]

    _put(store, "Gone", 2, "new")  # created again: starts at 0 with only the new messages
    got = store.get_messages("Gone", 0, 0, 10)
    assert [decode_message(got.data[a : a + s]).body for a, s in zip(got.unit_starts(), got.sizes, strict=True)] == [
        b"Gone-0", b"Gone-1"]
    assert store.query_by_key("Gone", "k1") == []
    assert len(store.query_by_key("Gone", "new1")) == 1

    # a crash right after: recovery must not resurrect the deleted messages
    (root / "abort").touch()
    store.shutdown()
    (root / "abort").touch()
    again = make_store(root)
    assert again.recovery.abnormal
    assert again.get_max_offset("Gone", 0) == 2
    assert again.get_max_offset("Kept", 0) == 3
    assert again.query_by_key("Gone", "k1") == []
