"""Both ends of a remoting connection have Nagle's algorithm off (TCP_NODELAY): a small
response must never wait for the acknowledgement of the previous write."""

from __future__ import annotations

import asyncio
import socket

from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.server import RemotingServer


def test_server_and_client_sockets_have_tcp_nodelay():
    async def main():
        server = RemotingServer("127.0.0.1", 0, name="test")
        port = await server.start()
        client = RemotingClient()
        try:
            conn = await client.connection(f"127.0.0.1:{port}")
            for _ in range(100):
                if server.connections:
                    break
                await asyncio.sleep(0.01)
            (accepted,) = server.connections
            for c in (conn, accepted):
                sock = c._writer.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())
