"""A broker with aclEnable=true under a seeded storm of mixed requests: signed by each account, unsigned, signed
with a wrong secret, with garbage or huge AccessKey and Signature fields, random codes, fields and bodies, and
connections sending garbage frames. Nothing crashes: every request is answered, the ACL check never fails
internally, and the broker still serves a signed send afterwards."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

from broker._support import closed_by_peer, host_port, send_header

from spark_mq.remoting.bodies import ConsumerData, HeartbeatData, SubscriptionData
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import ACCESS_KEY, SIGNATURE, Credentials

from ._support import ACCOUNTS, GROUP, PUBLISHER, TOPIC, request

SEED = 25_0001
REQUESTS = 400
CODES = [int(c) for c in RequestCode] + [0, 9999, 123456, -5]
KEYS = ["topic", "b", "consumerGroup", "group", "a", "originTopic", "queueId", "brokerName", "x"]
WORDS = [TOPIC, GROUP, f"%RETRY%{GROUP}", "%DLQ%x", "", "0", "-1", "9" * 30, "ü€", "a\nb", "T" * 300]
GARBAGE_FRAMES = [struct.pack(">i", 20 << 20), b"\x00\x00\x00\x08\x00\x00\x00\x04{}{}", b"GET / HTTP/1.1\r\n\r\n"]


def random_request(rng: random.Random) -> RemotingCommand:
    fields = {rng.choice(KEYS): rng.choice(WORDS) for _ in range(rng.randrange(5))}
    body = rng.choice([b"", rng.randbytes(rng.randrange(200)), b"{not json", HeartbeatData(
        "fuzz", consumer_data_set=[ConsumerData(GROUP, subscription_data_set=[SubscriptionData(TOPIC)])]).to_json()])
    how = rng.choice(["account", "account", "unsigned", "wrong secret", "garbage key", "huge", "garbage signature"])
    cmd = RemotingCommand.request(rng.choice(CODES), fields, body)
    if how == "account":
        credentials = rng.choice([c for c in ACCOUNTS.values() if c is not None])
        credentials.sign(cmd.ext_fields, cmd.body)
    elif how == "wrong secret":
        Credentials(PUBLISHER.access_key, "not-the-secret").sign(cmd.ext_fields, cmd.body)
    elif how == "garbage key":
        cmd.ext_fields[ACCESS_KEY] = rng.choice(WORDS) or "x"
        cmd.ext_fields[SIGNATURE] = rng.choice(WORDS)
    elif how == "huge":
        cmd.ext_fields[rng.choice([ACCESS_KEY, SIGNATURE])] = "Z" * rng.choice([1 << 10, 1 << 20])
    elif how == "garbage signature":
        PUBLISHER.sign(cmd.ext_fields, cmd.body)
        cmd.ext_fields[SIGNATURE] = rng.randbytes(20).hex()
    return cmd


async def storm(addr: str, rng: random.Random) -> list[str]:
    """Send the requests, 20 at a time; what went wrong (a request not answered)."""
    client = RemotingClient()
    problems: list[str] = []
    try:
        async def one(cmd: RemotingCommand) -> None:
            try:
                await client.invoke(addr, cmd, timeout=15)
            except Exception as e:
                problems.append(f"{cmd.describe()} fields={sorted(cmd.ext_fields)}: {type(e).__name__}: {e}")

        requests = [random_request(rng) for _ in range(REQUESTS)]
        for i in range(0, len(requests), 20):
            await asyncio.gather(*(one(cmd) for cmd in requests[i:i + 20]))
    finally:
        await client.close()
    return problems


def test_mixed_signed_unsigned_and_garbage_requests_crash_nothing(acl_broker):
    rng = random.Random(SEED)
    for frame in GARBAGE_FRAMES:
        with socket.create_connection(host_port(acl_broker.addr), timeout=3) as bad:
            bad.sendall(frame)
            assert closed_by_peer(bad)
    problems = asyncio.run(storm(acl_broker.addr, rng))
    assert problems == [], f"seed {SEED}:\n" + "\n".join(problems[:20])
    assert acl_broker.server.alive()
    signed = request(RequestCode.SEND_MESSAGE, send_header(TOPIC, 0).to_ext_fields(), b"still serving", PUBLISHER)

    async def send() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(acl_broker.addr, signed)
        finally:
            await client.close()

    assert asyncio.run(send()).code == ResponseCode.SUCCESS
    log = acl_broker.log()
    assert "ACL check of" not in log and "Task exception was never retrieved" not in log, log[-4000:]
