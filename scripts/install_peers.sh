#!/usr/bin/env bash
# Installs what benchmarks/peers.py compares spark_mq with, only what is missing (idempotent):
#   - Debian's redis-server, nats-server and rabbitmq-server (with Erlang and epmd);
#   - their Python clients, the `bench` extra of pyproject.toml, into .venv.
# The packages' own services are never started: the benchmark runs each server as its own
# child process in a temp dir (the three-node NATS and RabbitMQ clusters of the replicated row
# too: the same packages, nothing more to install). Takes ~15 s on a machine with nothing installed (apt-get
# update + 40 MB of packages + pip), a second when everything is there.
#   scripts/install_peers.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"   # .venv with spark-mq[dev]; cd to the repo root

PEER_PACKAGES=(redis-server nats-server rabbitmq-server)
RABBITMQ_SCRIPT=/usr/lib/rabbitmq/bin/rabbitmq-server   # what benchmarks/peer_systems runs

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
{ [ -x "$RABBITMQ_SCRIPT" ] && command -v epmd >/dev/null 2>&1; } || missing+=(rabbitmq-server)

if [ ${#missing[@]} -gt 0 ]; then
    echo "[peers] installing ${missing[*]}" >&2
    status=0
    _spark_mq_apt_install_no_services "${missing[@]}" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "[peers] apt-get failed ($status) installing ${missing[*]}" >&2
        exit "$status"
    fi
else
    echo "[peers] ${PEER_PACKAGES[*]} already installed" >&2
fi

# the Python clients: the `bench` extra, installed again only when pyproject.toml changes
STAMP="$VENV/.spark_mq_bench.sha256"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$want" != "$(cat "$STAMP" 2>/dev/null || true)" ]; then
    echo "[peers] installing spark-mq[dev,bench] into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet -e '.[dev,bench]' --config-settings editable_mode=compat
    echo "$want" >"$STAMP"
fi

# the official RocketMQ 5.x client (gRPC), in its own venv
"$SPARK_MQ_ROOT/scripts/install_rmq5_client.sh"
