"""The controller pushes each election to the set's live replicas in RocketMQ's format: a ControllerManager on
a real loopback server and file store, two replicas' listeners recording what reaches them, and each
replica's heartbeats on a connection of its own (closing it is the replica's death)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spark_mq.common.config import ControllerConfig
from spark_mq.controller.file_state_store import FileStateStore
from spark_mq.controller.manager import ControllerManager
from spark_mq.remoting.bodies import SyncStateSet
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.server import RemotingServer


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.01)


def test_an_election_is_pushed_to_the_live_replicas_in_rocketmqs_format(tmp_path):
    async def scenario() -> None:
        server = RemotingServer(port=0)
        manager = ControllerManager(ControllerConfig(listen_port=0), FileStateStore(tmp_path / "state.json"))
        manager.register_on(server)
        await server.start()
        controller = f"127.0.0.1:{server.port}"
        await manager.start(controller)
        received: dict[int, list[RemotingCommand]] = {1: [], 2: []}
        listeners: dict[int, RemotingServer] = {}
        for i in received:
            async def record(cmd: RemotingCommand, conn: Connection, i: int = i) -> None:
                received[i].append(cmd)

            listeners[i] = RemotingServer(port=0)
            listeners[i].register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, record)
            await listeners[i].start()
        addrs = {i: f"127.0.0.1:{s.port}" for i, s in listeners.items()}
        clients = {i: RemotingClient() for i in received}

        async def call(i: int, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
            return await clients[i].invoke(controller, RemotingCommand.request(code, ext, body))

        try:
            await _until(lambda: manager.is_leader)
            for i, addr in addrs.items():
                reg = {"clusterName": "c", "brokerName": "b", "brokerId": str(i), "brokerAddress": addr}
                assert (await call(i, RequestCode.CONTROLLER_REGISTER_BROKER, reg)).code == ResponseCode.SUCCESS
                await call(i, RequestCode.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": "b",
                                                             "brokerAddr": addr, "brokerId": str(i)})
            elect = {"clusterName": "c", "brokerName": "b", "brokerId": "1"}
            assert (await call(1, RequestCode.CONTROLLER_ELECT_MASTER, elect)).code == ResponseCode.SUCCESS
            await _until(lambda: all(received.values()))
            for i in received:
                (cmd,) = received[i]
                assert cmd.is_oneway
                assert cmd.ext_fields == {"masterBrokerId": "1", "masterAddress": addrs[1], "masterEpoch": "1",
                                          "syncStateSetEpoch": "1"}
                assert SyncStateSet.from_json(cmd.body) == SyncStateSet(frozenset({1}), 1)
            alter = {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}
            grown = await call(1, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter,
                               SyncStateSet(frozenset({1, 2}), 1).to_json())
            assert grown.code == ResponseCode.SUCCESS

            await clients[1].close()  # the master's connection closes: the controller elects replica 2
            await _until(lambda: len(received[2]) == 2)
            pushed = received[2][1]
            assert pushed.ext_fields == {"masterBrokerId": "2", "masterAddress": addrs[2], "masterEpoch": "2",
                                         "syncStateSetEpoch": "3"}
            assert SyncStateSet.from_json(pushed.body) == SyncStateSet(frozenset({2}), 3)
        finally:
            for c in clients.values():
                await c.close()
            await manager.stop()
            for s in (server, *listeners.values()):
                await s.stop()

    asyncio.run(scenario())
