"""The executors' Python workers and the cyclic GC: what a worker holds once it has read a partition (PySpark,
pyarrow, numpy, this package: ~85k objects that live as long as it) frozen out of the GC's way.

Why: PySpark's daemon runs ``gc.collect()`` in a worker after every task (``pyspark/daemon.py``), a full
collection that walks every tracked object of the process. In a worker that has read a ``spark_mq`` partition
that was ~40 ms of CPU per task (8 tasks a query: ~0.3 CPU-s per 1M-row pruned query, more than the decode
and the pulls together). Frozen objects (``gc.freeze``) are not walked; they are freed by reference counting
as before, only a cycle among them is never collected, so the freeze is taken once per process, at its first
read, when what it holds is mostly what it imported (the cycles of that first task's values are kept).

Thread-safety: the flag is set before the freeze; two first reads at once in one process freeze at most twice,
which is harmless.
"""

from __future__ import annotations

import gc

_frozen = False  # set by the first read of the process


def freeze_imports_once() -> None:
    """``gc.freeze()`` at the first call in this process (see the module doc); nothing after."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
