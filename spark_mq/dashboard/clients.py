"""The console's connections to the cluster: one :class:`Admin` and one producer per account, opened on
first use and kept, so pages reuse connections instead of dialling the brokers per request.

Thread-safety: coroutines of the server's one event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses

from spark_mq.client.admin import Admin
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.common.errors import MQClientError
from spark_mq.dashboard.auth import Account
from spark_mq.remoting.codes import ResponseCode

PRODUCER_GROUP = "spark_mq_console"  # test messages and resends are sent as this producer group


def refused(error: Exception) -> bool:
    """Whether ``error`` is a server's ACL refusal (NO_PERMISSION)."""
    return isinstance(error, MQClientError) and error.code == ResponseCode.NO_PERMISSION


class ClusterClients:
    """Clients of the cluster ``base`` names (NameServers, TLS), signed with each account in turn."""

    def __init__(self, base: ClientConfig) -> None:
        self.base = base
        self._admins: dict[tuple[str, str], Admin] = {}
        self._producers: dict[tuple[str, str], Producer] = {}
        self._closing: set[asyncio.Task] = set()  # closes of released accounts' clients, still running

    def _config(self, account: Account) -> ClientConfig:
        if not account.signed:
            return self.base
        return dataclasses.replace(self.base, access_key=account.access_key, secret_key=account.secret_key)

    def admin(self, account: Account) -> Admin:
        key = (account.access_key, account.secret_key)
        if key not in self._admins:
            self._admins[key] = Admin(self._config(account))
        return self._admins[key]

    async def producer(self, account: Account) -> Producer:
        key = (account.access_key, account.secret_key)
        if key not in self._producers:
            self._producers[key] = await Producer(PRODUCER_GROUP, self._config(account)).start()
        return self._producers[key]

    async def is_admin(self, account: Account) -> bool:
        """Whether the brokers take ``account``'s admin requests: asked with a harmless admin read
        (GET_ALL_SUBSCRIPTIONGROUP_CONFIG of a master). Raises the refusal when the account is not one
        of the servers' at all (a wrong key or secret)."""
        admin = self.admin(account)
        masters = sorted((await admin.master_addrs()).values())  # any account may: a wrong one is refused here
        if not masters:
            return False
        try:
            await admin.api.get_all_subscription_groups(masters[0])
        except MQClientError as e:
            if refused(e):
                return False
            raise
        return True

    def release(self, account: Account) -> None:
        """Close ``account``'s clients in the background (its last session ended): the next use opens new ones."""
        key = (account.access_key, account.secret_key)
        admin, producer = self._admins.pop(key, None), self._producers.pop(key, None)
        if admin is not None or producer is not None:
            task = asyncio.get_running_loop().create_task(self._close(admin, producer))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close(admin: Admin | None, producer: Producer | None) -> None:
        if producer is not None:
            await producer.shutdown()
        if admin is not None:
            await admin.close()

    def open_accounts(self) -> int:
        """How many accounts have clients open."""
        return len(self._admins.keys() | self._producers.keys())

    async def close(self) -> None:
        await asyncio.gather(*self._closing)
        for producer in self._producers.values():
            await producer.shutdown()
        for admin in self._admins.values():
            await admin.close()
        self._producers.clear()
        self._admins.clear()
