"""LocalFileOffsetStore (broadcasting) against a dict model, reopened from its file; the memory
rules every store shares; the tag and consume-from helpers of the consumers."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import LOCAL_OFFSET_DIR, LocalFileOffsetStore, RemoteBrokerOffsetStore
from spark_mq.client.subscription import (
    consume_from_where,
    filter_by_tags,
    parse_consume_from,
    parse_tags,
    subscription_data,
)
from spark_mq.common.errors import ClientError, ConfigError
from spark_mq.common.java_hash import java_hash
from spark_mq.remoting.bodies import MessageQueue

CONFIG = ClientConfig("127.0.0.1:9876", instance_name="offset-test")


def mq(i: int, topic: str = "t") -> MessageQueue:
    return MessageQueue(topic, "broker-a", i)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_local_store_round_trips_through_its_file(tmp_path):
    async def main():
        instance = ClientInstance(CONFIG)
        path = tmp_path / "offsets.json"
        store = LocalFileOffsetStore(instance, "g", path)
        await store.load()
        assert await store.read(mq(0), from_store=True) == -1
        store.update(mq(0), 10)
        store.update(mq(1), 5)
        store.update(mq(1), 3, increase_only=True)  # never back
        assert store.offsets() == {mq(0): 10, mq(1): 5}
        await store.persist_all({mq(0), mq(1), mq(7)})
        data = json.loads(path.read_text())
        assert {(e["queueId"], e["offset"]) for e in data["offsetTable"]} == {(0, 10), (1, 5)}

        again = LocalFileOffsetStore(instance, "g", path)
        assert await again.read(mq(0), from_store=False) == -1  # nothing in memory before load
        await again.load()
        assert again.offsets() == {mq(0): 10, mq(1): 5}
        again.update(mq(1), 2)  # a seek backwards is allowed
        await again.persist(mq(1))
        assert await LocalFileOffsetStore(instance, "g", path).read(mq(1), from_store=True) == 2

        # persist_all writes only the given queues and forgets the rest
        await again.persist_all({mq(1)})
        assert again.offsets() == {mq(1): 2}
        reloaded = LocalFileOffsetStore(instance, "g", path)
        await reloaded.load()
        assert reloaded.offsets() == {mq(1): 2}
        await instance.api.close()

    run(main())


def test_local_store_default_path_is_per_client_and_group():
    instance = ClientInstance(CONFIG)
    store = LocalFileOffsetStore(instance, "my_group")
    assert store.path == LOCAL_OFFSET_DIR / instance.client_id / "my_group" / "offsets.json"


def test_local_store_names_a_malformed_file(tmp_path):
    path = tmp_path / "offsets.json"
    path.write_text('{"offsetTable": [{"topic": "t"}]}')
    store = LocalFileOffsetStore(ClientInstance(CONFIG), "g", path)
    with pytest.raises(ClientError, match=str(path)):
        run(store.load())


ops = st.lists(st.tuples(st.sampled_from(["update", "update_inc", "remove", "persist_all"]), st.integers(0, 4),
                         st.integers(-1, 100)), max_size=30)


@settings(max_examples=40)
@given(ops=ops)
def test_local_store_against_a_dict_model(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("model") / "offsets.json"

    async def main():
        store = LocalFileOffsetStore(ClientInstance(CONFIG), "g", path)
        memory: dict[MessageQueue, int] = {}
        on_disk: dict[MessageQueue, int] = {}
        for op, i, offset in ops:
            q = mq(i)
            if op == "update":
                store.update(q, offset)
                memory[q] = offset
            elif op == "update_inc":
                store.update(q, offset, increase_only=True)
                memory[q] = max(memory[q], offset) if q in memory else offset
            elif op == "remove":
                store.remove(q)
                memory.pop(q, None)
            else:
                keep = {mq(j) for j in range(i + 1)}
                await store.persist_all(keep)
                memory = {k: v for k, v in memory.items() if k in keep}
                on_disk = {k: v for k, v in memory.items() if v >= 0}
            assert store.offsets() == memory
        reopened = LocalFileOffsetStore(ClientInstance(CONFIG), "g", path)
        await reopened.load()
        assert reopened.offsets() == on_disk

    run(main())


def test_remote_store_memory_rules_without_a_broker():
    async def main():
        store = RemoteBrokerOffsetStore(ClientInstance(CONFIG), "g")
        await store.load()
        assert await store.read(mq(0), from_store=False) == -1
        store.update(mq(0), 4)
        store.update(mq(0), 2, increase_only=True)
        assert await store.read(mq(0), from_store=False) == 4
        await store.persist_all(set())  # drops what is not owned, sends nothing
        assert store.offsets() == {}

    run(main())


def test_tag_expressions_and_filter():
    assert parse_tags("*") is None and parse_tags("") is None and parse_tags(None) is None
    assert parse_tags(" a || b ||") == {"a", "b"}
    sub = subscription_data("t", "b || a")
    assert (sub.sub_string, sub.tags_set, sub.code_set) == ("a || b", ["a", "b"], [java_hash("a"), java_hash("b")])
    assert subscription_data("t").sub_string == "*"

    class M:
        def __init__(self, tags):
            self.tags = tags

    msgs = [M("a"), M("b"), M(None), M("c")]
    assert [m.tags for m in filter_by_tags(msgs, parse_tags("a || c"))] == ["a", "c"]
    assert filter_by_tags(msgs, None) == msgs


def test_consume_from_values():
    assert parse_consume_from("last") == "last" and parse_consume_from("first") == "first"
    assert parse_consume_from(1_700_000_000_000) == 1_700_000_000_000
    assert parse_consume_from("1700000000000") == 1_700_000_000_000
    for bad in ("latest", -1, True, 1.5):
        with pytest.raises(ConfigError, match="consume_from"):
            parse_consume_from(bad)
    assert consume_from_where("last") == "CONSUME_FROM_LAST_OFFSET"
    assert consume_from_where("first") == "CONSUME_FROM_FIRST_OFFSET"
    assert consume_from_where(5) == "CONSUME_FROM_TIMESTAMP"
