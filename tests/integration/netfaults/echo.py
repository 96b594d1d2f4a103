"""What the fault injector's tests run on the hosts: an echo server (TCP and UDP on one port; each UDP
datagram it receives is also printed, so a test sees what arrived even when the answer is dropped) and a TCP
client that keeps one connection and relays the lines of its stdin through it, printing each echo.

    python echo.py serve PORT          # on the server's host
    python echo.py through HOST:PORT   # on another host: stdin line -> the connection -> stdout
"""

from __future__ import annotations

import socket
import sys
import threading

READY = "echo ready"


def _tcp_echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def serve(port: int) -> None:
    tcp = socket.create_server(("0.0.0.0", port))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", port))

    def accept() -> None:
        while True:
            conn, _ = tcp.accept()
            threading.Thread(target=_tcp_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print(READY, flush=True)
    while True:
        data, peer = udp.recvfrom(65536)
        print(data.decode(errors="replace"), flush=True)
        udp.sendto(data, peer)


def through(address: str) -> None:
    host, _, port = address.rpartition(":")
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.settimeout(None)  # a partition stalls it: the test decides how long to wait
    reader = conn.makefile("r")
    print(READY, flush=True)
    for line in sys.stdin:
        conn.sendall(line.encode())
        print(reader.readline().rstrip("\n"), flush=True)


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    serve(int(arg)) if mode == "serve" else through(arg)
