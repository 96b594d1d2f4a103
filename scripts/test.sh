#!/usr/bin/env bash
# Runs the whole test suite: ruff, then pytest (after installing ZooKeeper, nftables, iptables and chromium if
# missing). Slow tests (crash/fuzz loops) run only with SPARK_MQ_SLOW=1. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
# the consensus server the controller's tests run (those tests skip, naming the script, if it failed)
bash scripts/install_consensus.sh || echo "[test] installing ZooKeeper failed: its controller tests will skip" >&2
# the network fault injector's tools (the fault tests skip, naming the script, if it failed)
bash scripts/install_netfaults.sh || echo "[test] installing nftables/iptables failed: the fault tests will skip" >&2
# the headless browser the web console's tests drive (they skip, naming the script, if it failed)
bash scripts/install_browser.sh || echo "[test] installing chromium failed: the web console's browser tests will skip" >&2

echo "== ruff check ."
ruff_rc=0
ruff check . || ruff_rc=$?

marker=()
if [ "${SPARK_MQ_SLOW:-0}" != "1" ]; then
    marker=(-m "not slow")
fi

echo "== pytest ${marker[*]} $*"
pytest_rc=0
# the 30 slowest tests are listed at the end: where the suite's time goes (its budget is ~25 min)
python -m pytest "${marker[@]}" --durations=30 "$@" || pytest_rc=$?

if [ "$pytest_rc" -eq 5 ]; then
    echo "FAIL: pytest collected no tests (exit 5)" >&2
fi
if [ "$ruff_rc" -ne 0 ]; then
    echo "FAIL: ruff check exited $ruff_rc" >&2
fi
if [ "$pytest_rc" -ne 0 ] && [ "$pytest_rc" -ne 5 ]; then
    echo "FAIL: pytest exited $pytest_rc" >&2
fi
if [ "$ruff_rc" -ne 0 ] || [ "$pytest_rc" -ne 0 ]; then
    exit 1
fi
