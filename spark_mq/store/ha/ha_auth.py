"""Peers proving who they are on haListenPort: a slave proves it holds the cluster's account before
its master sends it one byte of commitlog (RocketMQ leaves the HA port open; we do not).

The cluster's account is the accessKey/secretKey every member of a broker set is configured with (the
account its processes sign their requests to peers with). A master requires the proof when it has
``aclEnable`` or its own accessKey set; it sends a fresh random nonce, the slave answers its access key
and HMAC-SHA256(secretKey, context | version | nonce | access key), and the master compares both with
its own account in constant time (``hmac.compare_digest``). A connection that starts any other way, or
proves another account, is refused: ``PeerRefused``, the caller logs it (rate-limited) and closes, and
nothing of the commitlog was sent. The bytes are drawn in ``ha_protocol``; the secret never crosses the
wire nor appears in a log line or an error.

A master that does not require it still answers a slave's auth hello (``required`` = 0), so slaves
configured with the account work with masters of any configuration; an old slave (RocketMQ 4.x, or
ours without an account) that starts with its report is served as before by such a master.

Thread-safety: none needed; each coroutine works on one connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from dataclasses import field

from spark_mq.common.config import SecurityConfig
from spark_mq.common.errors import ReplicationError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.store.ha.ha_protocol import (
    AUTH_ACCEPTED,
    AUTH_CHALLENGE,
    AUTH_CONTEXT,
    AUTH_HELLO,
    AUTH_MAC_SIZE,
    AUTH_NONCE_SIZE,
    AUTH_PROOF_HEADER,
    AUTH_REFUSED,
    AUTH_VERDICT,
    HA_AUTH_MAGIC,
    HA_AUTH_VERSION,
    MAX_ACCESS_KEY_BYTES,
    REPORT,
)


class PeerRefused(Exception):
    """A connection on the HA port that did not prove the cluster's account (the text says why)."""


@lazy_dataclass(frozen=True)
class ClusterAccount(LazyDataclass):
    """The account the members of a broker set share (accessKey/secretKey)."""

    access_key: str
    secret_key: str = field(repr=False)


def cluster_account(config: SecurityConfig) -> ClusterAccount | None:
    """The account ``config`` names (accessKey/secretKey), None without one."""
    return ClusterAccount(config.access_key, config.secret_key) if config.access_key else None


def proof(secret_key: str, nonce: bytes, access_key: bytes) -> bytes:
    """The mac a slave answers ``nonce`` with (see ``ha_protocol``)."""
    message = AUTH_CONTEXT + HA_AUTH_VERSION.to_bytes(4, "big") + nonce + access_key
    return hmac.new(secret_key.encode(), message, hashlib.sha256).digest()


async def prove(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, account: ClusterAccount) -> None:
    """The slave's side: prove ``account`` to the master; raises ``ReplicationError`` when the master
    refuses it or speaks another version (``IncompleteReadError`` when it closes without a word)."""
    writer.write(AUTH_HELLO.pack(HA_AUTH_MAGIC, HA_AUTH_VERSION))
    await writer.drain()
    version, required, nonce = AUTH_CHALLENGE.unpack(await reader.readexactly(AUTH_CHALLENGE.size))
    if version != HA_AUTH_VERSION:
        raise ReplicationError(f"the master speaks HA auth version {version}, this slave {HA_AUTH_VERSION}: run the "
                               "same spark-mq version on both")
    if not required:
        return
    key = account.access_key.encode()
    writer.write(AUTH_PROOF_HEADER.pack(HA_AUTH_VERSION, len(key)) + key + proof(account.secret_key, nonce, key))
    await writer.drain()
    (status,) = AUTH_VERDICT.unpack(await reader.readexactly(AUTH_VERDICT.size))
    if status != AUTH_ACCEPTED:
        raise ReplicationError(f"the master refused this slave's account (accessKey {account.access_key}): give "
                               "both brokers the same accessKey/secretKey, the cluster's")


async def admit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, account: ClusterAccount | None,
                required: bool) -> int | None:
    """The master's side, from a connection's first word: None once a slave proved ``account`` (or said
    hello to a master that does not require it); the first word itself (the slave's first report or
    controller-mode hello) from an old slave when nothing is required. Raises ``PeerRefused``."""
    (first,) = REPORT.unpack(await reader.readexactly(REPORT.size))
    if first != HA_AUTH_MAGIC:
        if required:
            raise PeerRefused("it sent no credentials (a slave needs the cluster's accessKey/secretKey; RocketMQ "
                              "4.x slaves cannot replicate from a master with aclEnable or an accessKey)")
        return first
    _, version = AUTH_HELLO.unpack(REPORT.pack(first) + await reader.readexactly(AUTH_HELLO.size - REPORT.size))
    if version != HA_AUTH_VERSION:
        raise PeerRefused(f"it speaks HA auth version {version}, this master {HA_AUTH_VERSION}")
    nonce = os.urandom(AUTH_NONCE_SIZE)  # what secrets.token_bytes returns, without importing it
    writer.write(AUTH_CHALLENGE.pack(HA_AUTH_VERSION, int(required), nonce))
    await writer.drain()
    if not required:
        return None
    version, length = AUTH_PROOF_HEADER.unpack(await reader.readexactly(AUTH_PROOF_HEADER.size))
    if version != HA_AUTH_VERSION or length > MAX_ACCESS_KEY_BYTES:
        raise PeerRefused(f"its proof is malformed (version {version}, access key of {length} bytes)")
    key = await reader.readexactly(length)
    mac = await reader.readexactly(AUTH_MAC_SIZE)
    if account is None:
        writer.write(AUTH_VERDICT.pack(AUTH_REFUSED))
        raise PeerRefused("this master has aclEnable but no accessKey/secretKey to check slaves against: set the "
                          "cluster's account on every broker of the set")
    key_ok = hmac.compare_digest(key, account.access_key.encode())
    mac_ok = hmac.compare_digest(mac, proof(account.secret_key, nonce, key))
    if not (key_ok and mac_ok):
        writer.write(AUTH_VERDICT.pack(AUTH_REFUSED))
        why = "a wrong signature (secretKey)" if key_ok else f"another account ({key.decode(errors='replace')!r})"
        raise PeerRefused(f"it proved {why}, not this cluster's")
    writer.write(AUTH_VERDICT.pack(AUTH_ACCEPTED))
    return None
