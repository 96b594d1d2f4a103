"""RocketMQ's request signature as our client sends it: the value AclClientRPCHook would compute (written here
from its definition), stable when a request is signed again (a retry), and added by a client connection to every
request and oneway request it sends."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest

from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.server import RemotingServer
from spark_mq.remoting.signature import ACCESS_KEY, SIGNATURE, UNIQUE_KEY_QUERY, Credentials, signature_matches

ACCOUNT = Credentials("RocketMQ", "12345678")


def reference(secret: str, fields: dict[str, str], body: bytes) -> str:
    """AclUtils.calSignature over AclClientRPCHook's content: values by sorted key (less the two it skips), body."""
    content = "".join(v for k, v in sorted(fields.items()) if k not in (SIGNATURE, UNIQUE_KEY_QUERY)).encode() + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


@pytest.mark.parametrize("body", [b"", b"hello", bytes(range(256)) * 4096])
def test_the_signature_is_rocketmqs_and_signing_again_changes_nothing(body):
    fields = {"topic": "TopicTest", "queueId": "3", "bornTimestamp": "1700000000000", UNIQUE_KEY_QUERY: "false"}
    ACCOUNT.sign(fields, body)
    assert fields[ACCESS_KEY] == "RocketMQ"
    assert fields[SIGNATURE] == reference("12345678", fields, body)
    again = dict(fields)
    ACCOUNT.sign(again, memoryview(body))
    assert again == fields and signature_matches("12345678", fields, body)
    assert not signature_matches("12345679", fields, body)
    assert not signature_matches("12345678", {**fields, "queueId": "4"}, body)


def test_a_client_connection_signs_its_requests_and_oneways():
    async def main() -> None:
        seen: list[RemotingCommand] = []
        got_oneway = asyncio.Event()

        async def handle(cmd: RemotingCommand, conn) -> RemotingCommand | None:
            seen.append(cmd)
            if cmd.is_oneway:
                got_oneway.set()
                return None
            return cmd.make_response(0, "ok", {"answer": "42"})

        server = RemotingServer()
        server.register(900, handle)
        port = await server.start()
        client = RemotingClient(credentials=ACCOUNT)
        try:
            response = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(900, {"k": "v"}, b"body"))
            await client.invoke_oneway(f"127.0.0.1:{port}", RemotingCommand.request(900, {"k": "w"}, oneway=True))
            await asyncio.wait_for(got_oneway.wait(), 5)
        finally:
            await client.close()
            await server.stop()
        assert [signature_matches("12345678", c.ext_fields, c.body) for c in seen] == [True, True]
        assert all(c.ext_fields[ACCESS_KEY] == "RocketMQ" for c in seen)
        assert response.ext_fields["answer"] == "42"

    asyncio.run(main())


def test_the_secret_is_in_no_repr():
    assert "12345678" not in repr(ACCOUNT) and "RocketMQ" in repr(ACCOUNT)
