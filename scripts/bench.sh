#!/usr/bin/env bash
# spark_mq against Redis Streams, NATS JetStream and RabbitMQ Streams (benchmarks/peers.py), single
# servers, three-replica sets and with ACL on.
# Installs what is missing first (scripts/install_peers.sh: Debian packages, Python clients),
# then runs the benchmark with the arguments given:
#   scripts/bench.sh                                   # full size: 1M messages, 1 GiB restart backlog, median of 3
#   scripts/bench.sh --quick                           # smoke sizes, a minute
#   scripts/bench.sh --systems spark_mq,redis --messages 200000 --reps 1 --restart-bytes 256MiB
#   scripts/bench.sh --workloads replicated,acl         # only the 3-replica and ACL produce rows
#   scripts/bench.sh --markdown /tmp/peers.md --json /tmp/peers.json
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
bash "$here/install_peers.sh"
source "$here/_setup.sh"
exec "$VENV/bin/python" benchmarks/peers.py "$@"
