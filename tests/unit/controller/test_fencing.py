"""A deposed leader cannot overwrite its successor's decisions: every write is a compare-and-set that
the state store refuses to a controller that no longer leads, even before that controller hears it lost.
Two ControllerManagers on real loopback servers share a minimal in-memory ControllerStateStore."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_mq.common.config import ControllerConfig
from spark_mq.controller.manager import ControllerManager
from spark_mq.controller.state_store import NO_RECORD, StaleStateError
from spark_mq.remoting.bodies import SyncStateSet
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.server import RemotingServer


@dataclass
class Consensus:
    """What a consensus store holds: versioned records and who leads."""

    records: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    leader: str | None = None
    electors: dict[str, Callable[[], None]] = field(default_factory=dict)

    def hand_over(self, address: str) -> None:
        """Make ``address`` the leader; the old one is not told (a partition, a paused process)."""
        self.leader = address
        self.electors[address]()


class MemoryStore:
    """One controller's session on :class:`Consensus` (the ControllerStateStore contract)."""

    def __init__(self, consensus: Consensus) -> None:
        self.consensus = consensus
        self.address = ""

    def load_all(self) -> dict[str, tuple[bytes, int]]:
        return dict(self.consensus.records)

    def compare_and_set(self, key: str, value: bytes, expected_version: int) -> int:
        if self.consensus.leader != self.address:
            raise StaleStateError(f"{self.address} does not lead")
        version = self.consensus.records.get(key, (b"", NO_RECORD))[1]
        if version != expected_version:
            raise StaleStateError(f"{key}: version {version}, not {expected_version}")
        self.consensus.records[key] = (value, version + 1)
        return version + 1

    def campaign(self, address: str, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self.address = address
        self.consensus.electors[address] = on_elected
        if self.consensus.leader is None:
            self.consensus.hand_over(address)

    def leader_address(self) -> str | None:
        return self.consensus.leader

    def close(self) -> None:
        pass


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.01)


def test_a_deposed_leaders_late_write_is_refused_and_answered_not_leader():
    async def scenario() -> None:
        consensus = Consensus()
        config = ControllerConfig(listen_port=0)
        nodes = []
        for _ in range(2):
            server = RemotingServer(port=0)
            manager = ControllerManager(config, MemoryStore(consensus))
            manager.register_on(server)
            await server.start()
            await manager.start(f"127.0.0.1:{server.port}")
            nodes.append((server, manager, f"127.0.0.1:{server.port}"))
        (_, old, old_addr), (_, new, new_addr) = nodes
        client = RemotingClient()

        async def call(addr: str, code: int, ext: dict, body: bytes = b"") -> RemotingCommand:
            return await client.invoke(addr, RemotingCommand.request(code, ext, body))

        try:
            await _until(lambda: old.is_leader)
            reg = {"clusterName": "c", "brokerName": "b", "brokerId": "0", "brokerAddress": "h:0"}
            assert (await call(old_addr, RequestCode.CONTROLLER_REGISTER_BROKER, reg)).code == ResponseCode.SUCCESS
            beat = {"clusterName": "c", "brokerName": "b", "brokerAddr": "h:1", "brokerId": "1"}
            await call(old_addr, RequestCode.CONTROLLER_REGISTER_BROKER, {**reg, "brokerId": "1",
                                                                          "brokerAddress": "h:1"})
            for addr in (old_addr, new_addr):
                await call(addr, RequestCode.BROKER_HEARTBEAT, {**beat, "brokerId": "0", "brokerAddr": "h:0"})
                await call(addr, RequestCode.BROKER_HEARTBEAT, beat)
            elect = {"clusterName": "c", "brokerName": "b", "brokerId": "0"}
            assert (await call(old_addr, RequestCode.CONTROLLER_ELECT_MASTER, elect)).code == ResponseCode.SUCCESS
            alter = {"brokerName": "b", "masterBrokerId": "0", "masterEpoch": "1"}
            grown = await call(old_addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter,
                               SyncStateSet(frozenset({0, 1}), 1).to_json())
            assert grown.code == ResponseCode.SUCCESS

            consensus.hand_over(new_addr)  # the old leader still believes it leads
            await _until(lambda: new.is_leader)
            assert old.is_leader
            moved = await call(new_addr, RequestCode.CONTROLLER_ELECT_MASTER, {**elect, "brokerId": "1",
                                                                               "designateElect": "true"})
            assert moved.code == ResponseCode.SUCCESS and moved.ext_fields["masterEpoch"] == "2"

            late = await call(old_addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter,
                              SyncStateSet(frozenset({0}), 2).to_json())  # valid in the old leader's view
            assert late.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert not old.is_leader
            assert late.ext_fields["controllerLeaderAddress"] == new_addr
            info = await call(new_addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
            assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "2")
            assert SyncStateSet.from_json(info.body) == SyncStateSet(frozenset({1}), 3)
        finally:
            await client.close()
            for server, manager, _ in nodes:
                await manager.stop()
                await server.stop()

    asyncio.run(scenario())
