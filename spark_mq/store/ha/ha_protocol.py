"""The bytes of RocketMQ's HA protocol (``HAConnection`` / ``DefaultHAClient``), both directions.

Slave -> master, a report (after appending what a read brought, and at least every haSendHeartbeatInterval)::

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

Peer authentication (spark_mq's, version 1; ``ha_auth.py``): a slave with the cluster's account
(accessKey/secretKey) opens every connection with an auth hello, before any of the above; a master
that requires it (aclEnable, or its own accessKey set) takes nothing else first::

    slave -> master  hello      +-------------------------+-----------------+
                                | HA_AUTH_MAGIC (int64)   | version (int32) |   the magic is negative and far
                                +-------------------------+-----------------+   below any -brokerId
    master -> slave  challenge  +-----------------+------------------+---------------------+
                                | version (int32) | required (int8)  | nonce (32 bytes)    |
                                +-----------------+------------------+---------------------+
    slave -> master  proof      +-----------------+-------------------+------------+----------------+
    (when required)             | version (int32) | key length (int16)| access key | mac (32 bytes) |
                                +-----------------+-------------------+------------+----------------+
    master -> slave  verdict    +----------------+
    (when required)             | status (int32) |   0: accepted; else refused, and the master closes
                                +----------------+

``mac`` = HMAC-SHA256(secretKey, ``AUTH_CONTEXT`` | version | nonce | access key), the nonce fresh
random bytes per connection (a recorded proof is worth nothing on the next one). A master that does not
require it answers ``required`` = 0 and the slave goes on with its reports at once.

Big-endian, as every RocketMQ layout.
"""

from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")

HA_AUTH_MAGIC = -0x53504B4D51484131  # -"SPKMQHA1": an auth hello, never an offset or a broker id
HA_AUTH_VERSION = 1
AUTH_HELLO = struct.Struct(">qi")
AUTH_NONCE_SIZE = 32
AUTH_CHALLENGE = struct.Struct(f">ib{AUTH_NONCE_SIZE}s")
AUTH_PROOF_HEADER = struct.Struct(">iH")  # then the access key (UTF-8), then the mac
AUTH_MAC_SIZE = 32  # HMAC-SHA256
AUTH_VERDICT = struct.Struct(">i")
AUTH_ACCEPTED = 0
AUTH_REFUSED = 1
AUTH_CONTEXT = b"spark-mq HA slave auth"  # what the mac is for: never a valid request signature elsewhere
MAX_ACCESS_KEY_BYTES = 256
