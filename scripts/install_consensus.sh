#!/usr/bin/env bash
# Installs the consensus store the controller keeps its state in, only what is missing
# (idempotent): Debian's `zookeeper` (its jars under /usr/share/java; Java 17 is already there for
# Spark, _setup.sh installs it if not). Its Python client, kazoo, is in the `dev` extra that
# _setup.sh installs. The package's own service is never started: the tests run each ZooKeeper
# server as their own child process in a temp dir (tests/consensus.py). On a machine
# without it: apt-get update and ~45 packages, mostly small Java libraries; a moment when it is
# there. scripts/test.sh runs it; the tests that need ZooKeeper skip, naming this script, when it
# failed.
#   scripts/install_consensus.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"   # .venv with spark-mq[dev] (kazoo), Java; cd to the repo root

ZOOKEEPER_JAR=/usr/share/java/zookeeper.jar   # what tests/consensus.py puts on the classpath

if [ -f "$ZOOKEEPER_JAR" ]; then
    echo "[consensus] zookeeper already installed" >&2
    exit 0
fi

echo "[consensus] installing zookeeper" >&2
status=0
_spark_mq_apt_install_no_services zookeeper || status=$?
if [ "$status" -ne 0 ]; then
    echo "[consensus] apt-get failed ($status) installing zookeeper" >&2
    exit "$status"
fi
