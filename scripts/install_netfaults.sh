#!/usr/bin/env bash
# Installs what the network fault injector (tests/faults.py, scripts/netfaults.py) drives, only what is
# missing (idempotent): Debian's `nftables` (`nft`: partitions, one-way partitions, loss) and `iptables`
# (its NFQUEUE target hands packets to tests/netdelay.py, the added latency, on kernels without
# sch_netem). A moment when they are there; apt-get update and two small packages when not. scripts/test.sh
# runs it; the fault tests skip, naming this script, when it failed.
#   scripts/install_netfaults.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"   # cd to the repo root; the apt helper

missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)

if [ ${#missing[@]} -eq 0 ]; then
    echo "[netfaults] nftables and iptables already installed" >&2
    exit 0
fi

echo "[netfaults] installing ${missing[*]}" >&2
_spark_mq_apt_install_no_services "${missing[@]}" ||
    { status=$?; echo "[netfaults] apt-get failed ($status) installing ${missing[*]}" >&2; exit "$status"; }
