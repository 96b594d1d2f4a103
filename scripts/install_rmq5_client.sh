#!/usr/bin/env bash
# The official RocketMQ 5.x Python client (PyPI rocketmq-python-client) in its own venv, .venv-rmq5/: its module
# `rocketmq` collides with the C++ 4.x binding's (rocketmq==0.4.4) in .venv. tests/peers/test_rmq5_client.py runs
# small client programs with .venv-rmq5/bin/python against a broker with enableGrpcEndpoint=true.
# Idempotent: installs again only when the pinned version changes (~20 s; a second when it is there).
#   scripts/install_rmq5_client.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-rmq5"
PACKAGE="rocketmq-python-client==5.1.2"
STAMP="$VENV/.installed"

if [ "$(cat "$STAMP" 2>/dev/null || true)" = "$PACKAGE" ]; then
    echo "[rmq5] $PACKAGE already in $VENV" >&2
    exit 0
fi
echo "[rmq5] installing $PACKAGE into $VENV" >&2
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "$PACKAGE" 2> >(grep -v "^WARNING: Location" >&2)
echo "$PACKAGE" >"$STAMP"
