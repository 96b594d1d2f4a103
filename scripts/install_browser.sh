#!/usr/bin/env bash
# Installs the headless browser the web console's tests drive, only what is missing (idempotent):
# Debian's `chromium` and `chromium-driver` (the WebDriver server selenium talks to; selenium itself is
# in spark-mq[dev]). On a machine without them: apt-get update and ~100 MB of packages; a moment when
# they are there. scripts/test.sh runs it; tests/integration/dashboard skips, naming this script, when
# it failed.
#   scripts/install_browser.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"   # .venv with spark-mq[dev] (selenium); cd to the repo root

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "[browser] chromium and chromedriver already installed" >&2
    exit 0
fi

echo "[browser] installing chromium and chromium-driver" >&2
status=0
_spark_mq_apt_install_no_services chromium chromium-driver || status=$?
if [ "$status" -ne 0 ]; then
    echo "[browser] apt-get failed ($status) installing chromium" >&2
    exit "$status"
fi
