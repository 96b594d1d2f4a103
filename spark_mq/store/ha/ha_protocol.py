"""The bytes of RocketMQ's HA protocol (``HAConnection`` / ``DefaultHAClient``), both directions.

Slave -> master, a report (after every append, and at least every haSendHeartbeatInterval)::

    +---------------------+
    | max offset (int64)  |   the end of the slave's commitlog: what it has, and where to go on
    +---------------------+

Master -> slave, a transfer: a header, then ``body size`` commitlog bytes from ``physical offset``
(a heartbeat is a header with size 0 at the next offset to send)::

    +-------------------------+------------------+-------------------+
    | physical offset (int64) | body size (int32)| body (size bytes) |
    +-------------------------+------------------+-------------------+

Controller mode only (spark_mq's, for the master's SyncStateSet): before its first report a slave
sends its broker id negated as one int64 word, the hello (an offset is never negative; a RocketMQ
4.x slave never sends one, and a master not in controller mode is never sent one).

Big-endian, as every RocketMQ layout.
"""

from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")
