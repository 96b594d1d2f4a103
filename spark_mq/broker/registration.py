"""A broker's registration with every NameServer (RocketMQ's ``BrokerController.registerBrokerAll``):
REGISTER_BROKER every ``REGISTER_INTERVAL_S`` and soon after a topic is created or changed
(``request``), UNREGISTER_BROKER at a clean stop.

Clients find the broker through the routes the NameServers build from these registrations, so a
failing NameServer is logged and retried, never fatal. A slave learns its master from the answers
(``masterAddr``, ``haServerAddr``) and asks again every ``MASTER_LOOKUP_INTERVAL_S`` until it has
them; in controller mode it follows only the master the controller names (``follow``): the
NameServers may still list a dead one.

A controller-mode master that is not acknowledging writes (its master lease ran out:
``replication/master_lease.py``) registers under its replica id instead of 0, at once (``request``): the
routes then list no master for its set until it acknowledges again (and registers as 0), so clients stop
sending to it. Not as 0 with its topics' PERM_WRITE removed (RocketMQ's way of closing a broker for
writes): a master deposed while it was frozen or cut off would then take id 0 back from the master
elected meanwhile, whose route would be gone until its next registration, 30 s later.

Runs on the broker's event loop; ``run`` until cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.config import BrokerConfig, split_addresses
from spark_mq.common.errors import RemotingError
from spark_mq.remoting.bodies import RegisterBrokerBody, body_crc32
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.loop import wait_event
from spark_mq.remoting.peer_client import PEER_ACCOUNT_HINT, peer_client

log = logging.getLogger(__name__)

REGISTER_INTERVAL_S = 30.0
NAMESRV_TIMEOUT_S = 6.0
MASTER_LOOKUP_INTERVAL_S = 2.0  # a slave that does not know its master yet registers again this often
NOT_KNOWN_YET = "not known yet (its NameServer has no master registered)"


class NameServerRegistration:
    """Registers ``address`` (the broker's, with its HA port) and the topics of ``topics``."""

    def __init__(self, config: BrokerConfig, address: str, ha_port: int, topics: TopicConfigManager,
                 on_master_learned: Callable[[], None], controller_mode: bool,
                 acknowledging: Callable[[], bool] = lambda: True) -> None:
        """``on_master_learned``: a slave's master is new (its metadata is copied at once);
        ``controller_mode``: a slave takes its master from the controller (``follow``), not the NameServers;
        ``acknowledging()``: whether a master takes writes now (its lease holds): else it registers under its
        replica id, not as the set's master (id 0)."""
        self.config = config
        self.address = address
        self.ha_address = f"{config.broker_ip1}:{ha_port}"
        self.topics = topics
        self.on_master_learned = on_master_learned
        self.acknowledging = acknowledging
        self.registered_id = config.registered_id  # the id of its last registration
        self.client = peer_client(config)  # REGISTER_BROKER is an admin operation: signed by the broker's account
        self.master_addr = ""  # a slave's master (remoting) and its HA address, from the NameServers
        self.master_ha_addr = ""
        self.controller_master: str | None = "" if controller_mode else None  # the master the controller names
        self._now = asyncio.Event()
        self._stopping = False

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.config.namesrv_addr)

    @property
    def master(self) -> str:
        """A slave's master as an error message names it."""
        return self.master_addr or NOT_KNOWN_YET

    def request(self) -> None:
        """Re-register soon (a topic was created or changed)."""
        self._now.set()

    def follow(self, master_address: str) -> None:
        """Controller mode, a slave: replicate from ``master_address`` once the NameServers give its HA
        address (it registers there); the master known so far is dropped."""
        if master_address != self.controller_master:
            self.controller_master = master_address
            self.master_addr = self.master_ha_addr = ""
            self.request()

    async def run(self) -> None:
        # a registration answered just as it is cancelled swallows the cancellation (wait_for before
        # Python 3.12): the loop then ends at the flag ``stop`` sets
        while not self._stopping:
            lookup = self.config.is_slave and not self.master_ha_addr
            await wait_event(self._now, MASTER_LOOKUP_INTERVAL_S if lookup else REGISTER_INTERVAL_S)
            self._now.clear()
            await self.register_all()

    def stop(self) -> None:
        """End ``run`` at its next turn (before its task is cancelled)."""
        self._stopping = True

    async def register_all(self) -> None:
        """REGISTER_BROKER with every NameServer; a failing one is logged and retried later."""
        self.registered_id = self.config.registered_id if self.acknowledging() else self.config.broker_id
        body = RegisterBrokerBody(self.topics.wrapper()).to_json()
        fields = {
            "brokerName": self.config.broker_name, "brokerAddr": self.address,
            "clusterName": self.config.broker_cluster_name, "haServerAddr": self.ha_address,
            "brokerId": self.registered_id, "compressed": "false", "bodyCrc32": body_crc32(body),
        }
        for addr in self.namesrv_addrs:
            try:
                resp = await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body), NAMESRV_TIMEOUT_S)
                if resp.code == ResponseCode.NO_PERMISSION:
                    log.warning("namesrv %s refused registration: %s (%s)", addr, resp.remark, PEER_ACCOUNT_HINT)
                elif resp.code != ResponseCode.SUCCESS:
                    log.warning("namesrv %s refused registration: %s %s", addr, resp.code, resp.remark)
                elif self.config.is_slave:
                    self._learn_master(resp.ext_fields.get("masterAddr", ""), resp.ext_fields.get("haServerAddr", ""))
            except RemotingError as e:
                log.warning("cannot register with namesrv %s (retrying in %.0f s): %s", addr, REGISTER_INTERVAL_S, e)

    def _learn_master(self, master_addr: str, master_ha_addr: str) -> None:
        """A slave's master, as a registration answer names it (kept while an answer names none; in controller
        mode, only the master the controller names)."""
        if self.controller_master is not None and master_addr != self.controller_master:
            return
        if master_addr and (master_addr, master_ha_addr) != (self.master_addr, self.master_ha_addr):
            log.info("HA: master of %s is %s (HA address %s)", self.config.broker_name, master_addr, master_ha_addr)
            self.master_addr, self.master_ha_addr = master_addr, master_ha_addr
            self.on_master_learned()

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER with every NameServer (a clean stop), then close the connections."""
        fields = {"brokerName": self.config.broker_name, "brokerAddr": self.address,
                  "clusterName": self.config.broker_cluster_name, "brokerId": self.registered_id}
        for addr in self.namesrv_addrs:
            with contextlib.suppress(RemotingError):
                await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), NAMESRV_TIMEOUT_S)
        await self.client.close()
