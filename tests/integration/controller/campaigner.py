"""A stand-in controller process for the ZooKeeper store tests: it campaigns and, as a writer, keeps
appending decisions to one record as a leader would.

    python campaigner.py HOSTS ROOT ADDRESS KEY SESSION_TIMEOUT_S (write|passive)

It prints, one per line and flushed: ``READY``, ``ELECTED``, ``LOST``, ``WROTE <decision> <version>``
after each acknowledged compare-and-set (the ledger a test checks the record against), ``REFUSED``
and ``UNKNOWN`` (a write the store refused or whose outcome it could not tell). A writer tries to
write whatever it believes about its leadership, so a deposed leader's attempts reach the store.
The record is a JSON list of decisions "<address>/<pid>#<n>"; after a refusal the writer reloads it.
SIGTERM closes the store and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

from spark_mq.controller.state_store import NO_RECORD, StaleStateError, StateStoreError
from spark_mq.controller.zookeeper_state_store import ZooKeeperStateStore

WRITE_INTERVAL_S = 0.05


_out = threading.Lock()


def say(line: str) -> None:
    """One whole line: ELECTED and LOST come from the store's callback thread while the main thread writes
    (``print`` writes the text and its newline apart, so two threads' lines could interleave)."""
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> int:
    hosts, root, address, key, session_timeout, mode = sys.argv[1:]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    store = ZooKeeperStateStore(hosts, root, float(session_timeout))
    say("READY")
    store.campaign(address, lambda: say("ELECTED"), lambda: say("LOST"))
    decisions: list[str] | None = None
    version = NO_RECORD
    n = 0
    while not stop.wait(WRITE_INTERVAL_S):
        if mode != "write":
            continue
        try:
            if decisions is None:
                value, version = store.load_all().get(key, (b"[]", NO_RECORD))
                decisions = json.loads(value)
            decision = f"{address}/{os.getpid()}#{n}"
            version = store.compare_and_set(key, json.dumps([*decisions, decision]).encode(), version)
            decisions.append(decision)
            n += 1
            say(f"WROTE {decision} {version}")
        except StaleStateError as e:
            say(f"REFUSED {e}")
            decisions = None
        except StateStoreError as e:
            say(f"UNKNOWN {e}")
            decisions = None
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
