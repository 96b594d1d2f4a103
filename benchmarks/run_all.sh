#!/usr/bin/env bash
# Run every store benchmark at its default size, one after another (never in parallel: the
# reference machine has 2 cores), then py-spy profiles of the append loop and of a
# full-scan recovery. Results (JSON, logs, profiles) go to $OUT (default /tmp/spark_mq_bench).
#   benchmarks/run_all.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
SPY=.venv/bin/py-spy
OUT=${OUT:-/tmp/spark_mq_bench}
mkdir -p "$OUT"
extra=("$@")

run() {  # name, script, args...
    local name=$1; shift
    echo "== $name ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$PY" "$@" "${extra[@]}" --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log"
}

run disk benchmarks/disk_write.py
run append benchmarks/store_append.py
run read benchmarks/store_read.py
run recovery benchmarks/store_recovery.py --profile-case b --profile-out "$OUT/recovery.pyspy.txt"

echo "== profile: append, props variant, one repetition ($(date -u +%H:%M:%S))"
"$SPY" record --format raw -o "$OUT/append.pyspy.txt" -- \
    "$PY" benchmarks/store_append.py --variants props --reps 1 --disk-mb 0 "${extra[@]}" >/dev/null
for what in "append fill,_run" "recovery recover"; do
    set -- $what
    echo "== top frames: $1 (stacks through $2)"
    "$PY" benchmarks/profile_summary.py "$OUT/$1.pyspy.txt" --within "$2" | tee "$OUT/$1.profile.txt"
done
