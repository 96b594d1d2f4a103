#!/usr/bin/env bash
# Runs the spark-mq demo on an embedded local broker. Extra arguments go to `spark-mq demo`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
exec spark-mq demo "$@"
