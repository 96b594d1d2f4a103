"""Topic and broker permission bits (RocketMQ's ``PermName``), as every layer reads them: topic
configs on the broker, routes at the NameServer, queue choice in the clients and the Spark sink."""

from __future__ import annotations

PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1  # TBW102's: topics auto-created through it inherit its settings
PERM_READ_WRITE = PERM_READ | PERM_WRITE
