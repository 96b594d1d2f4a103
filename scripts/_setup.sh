#!/usr/bin/env bash
# Shared set-up, sourced by scripts/demo.sh, scripts/test.sh and the benchmark runners.
# Creates .venv, installs the package with its dev extra, makes sure a Java 17 runtime is
# present (Spark needs one) and exports the environment Spark and the tests expect.
set -euo pipefail

SPARK_MQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$SPARK_MQ_ROOT"
export SPARK_MQ_ROOT

_spark_mq_sudo() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# apt-get install of Debian packages whose own services must not start (the project runs those
# servers as child processes): Docker images ship a policy-rc.d that says so; elsewhere it is added
# for the install and removed after. Returns apt-get's status.
_spark_mq_apt_install_no_services() {
    local policy=/usr/sbin/policy-rc.d added_policy=0 status=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | _spark_mq_sudo tee "$policy" >/dev/null
        _spark_mq_sudo chmod +x "$policy"
        added_policy=1
    fi
    { _spark_mq_sudo apt-get update -qq &&
      _spark_mq_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } ||
        status=$?
    if [ "$added_policy" -eq 1 ]; then
        _spark_mq_sudo rm -f "$policy"
    fi
    return "$status"
}

# --- Java (Spark's JVM) ------------------------------------------------------------------
if ! command -v java >/dev/null 2>&1; then
    echo "[setup] java not found: installing openjdk-17-jre-headless" >&2
    _spark_mq_sudo apt-get update
    _spark_mq_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless
fi
if [ -z "${JAVA_HOME:-}" ]; then
    JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
    export JAVA_HOME
fi

# --- Python virtualenv ------------------------------------------------------------------
VENV="$SPARK_MQ_ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV" >&2
    python3 -m venv "$VENV"
fi

STAMP="$VENV/.spark_mq_install.sha256"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    echo "[setup] installing spark-mq[dev] into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
    # compat mode puts the repo root on sys.path (a .pth file): Spark's Python workers find
    # data sources by listing top-level pyspark_* modules there, which the default editable
    # install's import hook hides
    "$VENV/bin/python" -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
    echo "$want" >"$STAMP"
fi
# RocketMQ 5's gRPC stubs (git-ignored), generated from the kept .proto files when missing or older
"$VENV/bin/python" scripts/gen_grpc_stubs.py --if-stale
# Bytecode of our modules, refreshed where a source changed: with PYTHONDONTWRITEBYTECODE=1 (CI,
# this environment) nothing else writes it, and a broker's start then compiled every module it
# imports (~0.18 CPU-s of its restart). Python reads .pyc files even when writing them is off.
"$VENV/bin/python" -m compileall -q -j 0 spark_mq
# Our C library for the append path (spark_mq/common/unit/native.c: unit encoder, dispatch info),
# compiled when missing or its source changed. Without a C compiler (installed here as Java is, where
# apt-get exists) the numpy paths run: the same bytes, slower.
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] no C compiler found: installing gcc" >&2
    { _spark_mq_sudo apt-get update -qq &&
      _spark_mq_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev; } ||
        echo "[setup] installing gcc failed" >&2
fi
"$VENV/bin/python" -m spark_mq.common.unit.native || true

export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV="$VENV"
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
