"""Subprocess for the lock test: opens a store, says so, and holds it until killed."""

from __future__ import annotations

import json
import os
import sys
import time

from _support import store_config

from spark_mq.store.message_store import MessageStore

store = MessageStore(store_config(sys.argv[1])).start()
os.write(1, (json.dumps({"ready": True, "pid": os.getpid()}) + "\n").encode())
while True:
    time.sleep(1)
