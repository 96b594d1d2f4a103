#!/usr/bin/env bash
# End-to-end demo: a dev NameServer + broker, 20,000 messages produced with the CLI, consumed by
# `spark-submit jobs/consume.py` (Trigger.AvailableNow) into a Delta table, the table read back with
# deltalake and the consumer group's lag shown (0). Stops the dev server on exit.
# Environment: DEMO_MESSAGES (default 20000), DEMO_NAMESRV_PORT (19876), DEMO_BROKER_PORT (20911),
# DEMO_KEEP=1 keeps the temporary directory. The embedded-store demo is `spark-mq demo`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"

MESSAGES="${DEMO_MESSAGES:-20000}"
NAMESRV_PORT="${DEMO_NAMESRV_PORT:-19876}"
BROKER_PORT="${DEMO_BROKER_PORT:-20911}"
NAMESRV="127.0.0.1:$NAMESRV_PORT"
TOPIC="DemoOrders"
GROUP="demo-group"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/spark-mq-demo.XXXXXX")"
DEV_PID=""

cleanup() {
    local rc=$?
    if [ -n "$DEV_PID" ] && kill -0 "$DEV_PID" 2>/dev/null; then
        kill -TERM "$DEV_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$DEV_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$DEV_PID" 2>/dev/null && kill -KILL "$DEV_PID" 2>/dev/null || true
    fi
    if [ "${DEMO_KEEP:-0}" = "1" ]; then echo "[demo] kept $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting spark-mq dev (namesrv $NAMESRV, broker port $BROKER_PORT, store $WORK/store)"
spark-mq dev --namesrv-port "$NAMESRV_PORT" --port "$BROKER_PORT" --metrics-port 0 --store "$WORK/store" \
    >"$WORK/dev.log" 2>&1 &
DEV_PID=$!
for _ in $(seq 1 100); do
    grep -q "^spark-mq dev:" "$WORK/dev.log" && break
    kill -0 "$DEV_PID" 2>/dev/null || { echo "[demo] spark-mq dev exited:"; cat "$WORK/dev.log"; exit 1; }
    sleep 0.2
done
grep "^spark-mq dev:" "$WORK/dev.log" || { echo "[demo] spark-mq dev not ready in 20s:"; cat "$WORK/dev.log"; exit 1; }

step "creating topic $TOPIC (4 queues) and producing $MESSAGES messages"
spark-mq admin topic create --namesrv "$NAMESRV" --topic "$TOPIC" --queues 4
# four tags, a quarter of the messages each; each message's body is a small JSON order
PER_TAG=$((MESSAGES / 4))
for tag in created paid shipped delivered; do
    "$PYSPARK_PYTHON" - "$PER_TAG" "$tag" >"$WORK/orders-$tag.jsonl" <<'EOF'
import json, random, sys
n, tag = int(sys.argv[1]), sys.argv[2]
rnd = random.Random(tag)
for i in range(n):
    print(json.dumps({"order": f"{tag}-{i}", "amount": round(rnd.uniform(1, 500), 2), "status": tag}))
EOF
    spark-mq produce --namesrv "$NAMESRV" --topic "$TOPIC" --tag "$tag" --key "orders $tag" --batch 500 \
        --file "$WORK/orders-$tag.jsonl"
done
spark-mq admin topic stats --namesrv "$NAMESRV" --topic "$TOPIC"

step "spark-submit jobs/consume.py --sink delta --trigger availableNow"
spark-submit --master "local[2]" --conf spark.log.level=WARN --conf spark.ui.enabled=false \
    --conf spark.driver.bindAddress=127.0.0.1 \
    jobs/consume.py --namesrv "$NAMESRV" --topic "$TOPIC" --group "$GROUP" --starting-offsets earliest \
    --sink delta --trigger availableNow --max-per-trigger 8000 \
    --path "$WORK/orders_delta" --checkpoint "$WORK/ckpt" 2>"$WORK/spark-submit.log" \
    || { echo "[demo] spark-submit failed; the end of its log:"; tail -40 "$WORK/spark-submit.log"; exit 1; }

step "the Delta table, read with deltalake"
"$PYSPARK_PYTHON" - "$WORK/orders_delta" "$MESSAGES" <<'EOF'
import sys
from deltalake import DeltaTable
path, expected = sys.argv[1], int(sys.argv[2])
dt = DeltaTable(path)
table = dt.to_pyarrow_table()
print(f"version {dt.version()}, {table.num_rows} rows, partitions by {dt.metadata().partition_columns}")
head = table.select(["broker_name", "queue_id", "queue_offset", "tags", "keys", "body"]).sort_by(
    [("queue_id", "ascending"), ("queue_offset", "ascending")]).slice(0, 5).to_pylist()
for row in head:
    row["body"] = row["body"].decode()
    print(row)
counts = table.group_by("tags").aggregate([("msg_id", "count")]).to_pylist()
print("rows per tag:", {r["tags"]: r["msg_id_count"] for r in sorted(counts, key=lambda r: r["tags"])})
distinct = len(set(table.column("msg_id").to_pylist()))
if table.num_rows != expected or distinct != expected:
    sys.exit(f"expected {expected} distinct rows, got {table.num_rows} rows ({distinct} distinct msg ids)")
EOF

step "consumer group lag (spark-mq admin group lag)"
spark-mq admin group lag --namesrv "$NAMESRV" --group "$GROUP" --topic "$TOPIC" | tee "$WORK/lag.txt"
grep -q "total lag: 0 " "$WORK/lag.txt" || { echo "[demo] expected total lag 0"; exit 1; }

step "done"
echo "[demo] stopping spark-mq dev (pid $DEV_PID); the embedded-store demo is: spark-mq demo --messages 20000"
