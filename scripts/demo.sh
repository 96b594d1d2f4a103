#!/usr/bin/env bash
# End-to-end demo: a dev NameServer + broker, 20,000 messages produced with the CLI, consumed by
# `spark-submit jobs/consume.py` (Trigger.AvailableNow) into a Delta table, the table read back with
# deltalake and the consumer group's lag shown (0); then tiered storage: `jobs/offload.py --all`
# archives the topic into a Delta table, `jobs/replay.py` republishes a time window from the archive
# into another topic, and `spark-mq query --archive` finds one key's messages in both tiers.
# Stops the dev server on exit.
# Environment: DEMO_MESSAGES (default 20000), DEMO_NAMESRV_PORT (19876), DEMO_BROKER_PORT (20911),
# DEMO_ARCHIVE (archive root; default a directory in the temporary one), DEMO_KEEP=1 keeps the
# temporary directory. The embedded-store demo is `spark-mq demo`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"

MESSAGES="${DEMO_MESSAGES:-20000}"
NAMESRV_PORT="${DEMO_NAMESRV_PORT:-19876}"
BROKER_PORT="${DEMO_BROKER_PORT:-20911}"
NAMESRV="127.0.0.1:$NAMESRV_PORT"
TOPIC="DemoOrders"
GROUP="demo-group"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/spark-mq-demo.XXXXXX")"
ARCHIVE="${DEMO_ARCHIVE:-$WORK/archive}"
REPLAY_TOPIC="DemoOrdersReplay"
VIP_KEY="vip-order-7"
SPARK_SUBMIT=(spark-submit --master "local[2]" --conf spark.log.level=WARN --conf spark.ui.enabled=false
              --conf spark.driver.bindAddress=127.0.0.1)
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
"${SPARK_SUBMIT[@]}" jobs/consume.py --namesrv "$NAMESRV" --topic "$TOPIC" --group "$GROUP" --starting-offsets earliest \
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

step "tiered storage: offload $TOPIC into the archive at $ARCHIVE (jobs/offload.py --all)"
echo '{"order": "vip-7", "amount": 999.0, "status": "created"}' \
    | spark-mq produce --namesrv "$NAMESRV" --topic "$TOPIC" --tag created --key "$VIP_KEY"
"${SPARK_SUBMIT[@]}" jobs/offload.py --namesrv "$NAMESRV" --topic "$TOPIC" --root "$ARCHIVE" --all \
    2>"$WORK/offload.log" || { echo "[demo] offload failed:"; tail -40 "$WORK/offload.log"; exit 1; }
echo '{"order": "vip-7", "amount": 999.0, "status": "paid"}' \
    | spark-mq produce --namesrv "$NAMESRV" --topic "$TOPIC" --tag paid --key "$VIP_KEY"
spark-mq admin topic stats --namesrv "$NAMESRV" --topic "$TOPIC"

step "replay the middle half of the produce window from both tiers into $REPLAY_TOPIC (jobs/replay.py)"
read -r FROM_TIME TO_TIME < <("$PYSPARK_PYTHON" - "$WORK/orders_delta" <<'EOF'
import sys
import pyarrow.parquet as pq
from deltalake import DeltaTable
# the table's files read with pyarrow: deltalake's own dataset reader aborts this short-lived
# interpreter at exit ("terminate called without an active exception", deltalake 1.x)
files = DeltaTable(sys.argv[1]).file_uris()
times = sorted(pq.read_table(files, columns=["store_timestamp"]).column(0).to_pylist())
print(times[len(times) // 4].isoformat(), times[3 * len(times) // 4].isoformat())
EOF
)
spark-mq admin topic create --namesrv "$NAMESRV" --topic "$REPLAY_TOPIC" --queues 4
"${SPARK_SUBMIT[@]}" jobs/replay.py --namesrv "$NAMESRV" --topic "$TOPIC" --root "$ARCHIVE" \
    --from-time "$FROM_TIME" --to-time "$TO_TIME" --to-topic "$REPLAY_TOPIC" 2>"$WORK/replay.log" \
    || { echo "[demo] replay failed:"; tail -40 "$WORK/replay.log"; exit 1; }
spark-mq admin topic stats --namesrv "$NAMESRV" --topic "$REPLAY_TOPIC"

step "the messages with key $VIP_KEY in both tiers (spark-mq query --archive)"
spark-mq query --namesrv "$NAMESRV" --topic "$TOPIC" --key "$VIP_KEY" --archive "$ARCHIVE" | tee "$WORK/query.txt"
grep -q "cold" "$WORK/query.txt" && grep -q "hot" "$WORK/query.txt" \
    || { echo "[demo] expected the key's messages in both tiers"; exit 1; }

step "done"
echo "[demo] notebooks/query_by_key_and_time.ipynb walks through queries by key and time on this data"
echo "[demo] (with DEMO_KEEP=1 and a broker serving the store): SPARK_MQ_NAMESRV=$NAMESRV"
echo "[demo]   SPARK_MQ_ARCHIVE=$ARCHIVE SPARK_MQ_TOPIC=$TOPIC SPARK_MQ_KEY=$VIP_KEY"
echo "[demo] stopping spark-mq dev (pid $DEV_PID); the embedded-store demo is: spark-mq demo --messages 20000"
