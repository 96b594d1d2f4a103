"""A client start freezes the process's start-up objects out of the cyclic GC, once per process."""

from __future__ import annotations

import asyncio
import gc

import pytest

from spark_mq.client import instance as instance_module
from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import ClientInstance


def _start_and_close(freeze: bool) -> None:
    async def main() -> None:
        client = ClientInstance(ClientConfig("127.0.0.1:9", gc_freeze_on_start=freeze))
        await client.start()
        await client.close()

    asyncio.run(main())


def test_the_first_client_start_freezes_what_the_process_holds_and_only_the_first(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(instance_module, "_start_up_frozen", False)
    gc.unfreeze()
    _start_and_close(freeze=False)
    assert gc.get_freeze_count() == 0
    _start_and_close(freeze=True)
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the interpreter's and spark_mq's modules, classes and functions
    more = [[] for _ in range(1000)]
    _start_and_close(freeze=True)
    # a frozen object freed since (its last reference dropped) leaves the count, so it may shrink; a second freeze
    # would add at least the thousand lists made above
    assert gc.get_freeze_count() <= frozen, "a second client start froze again"
    del more
