"""numpy imported at its first use: importing the store makes nothing of numpy's, the first use loads it and
every module of ours holding the stand-in then holds numpy itself."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_first_use_imports_numpy_and_rebinds_every_holder():
    seen = _run(
        "import json, sys\n"
        "from spark_mq.store import consume_queue, queue_reader\n"
        "from spark_mq.common.unit import layout\n"
        "before = 'numpy' in sys.modules\n"
        "record = layout.header_record()\n"  # the first use: through the stand-in
        "import numpy\n"
        "holders = [n for n, m in list(sys.modules.items()) if n.startswith('spark_mq') and hasattr(m, 'np')]\n"
        "print(json.dumps({'before': before, 'itemsize': record.itemsize,\n"
        "                  'not_numpy': [n for n in holders if sys.modules[n].np is not numpy],\n"
        "                  'holders': len(holders)}))\n")
    assert seen["before"] is False
    assert seen["itemsize"] == 88
    assert seen["holders"] >= 3 and seen["not_numpy"] == []


def test_a_module_imported_once_numpy_is_loaded_gets_numpy_itself():
    seen = _run(
        "import json, numpy\n"
        "from spark_mq.common.lazy_numpy import np\n"
        "from spark_mq.store import timer_wheel\n"
        "print(json.dumps([np is numpy, timer_wheel.np is numpy]))\n")
    assert seen == [True, True]
