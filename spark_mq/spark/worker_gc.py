"""The executors' Python workers and the cyclic GC: what a worker holds once it has read its first partition
(PySpark, pyarrow, numpy, this package, and what the first task loaded on the way: ~85k objects that live as
long as the worker) frozen out of the GC's way.

Why: PySpark's daemon runs ``gc.collect()`` in a worker after every task (``pyspark/daemon.py``), a full
collection that walks every tracked object of the process. In a worker that had read a ``spark_mq`` partition
that was ~40 ms of CPU per task on a loaded machine (8 tasks a query: ~0.3 CPU-s per 1M-row pruned query,
more than the decode and the pulls together). Frozen objects (``gc.freeze``) are not walked; they are freed by
reference counting as before, only a cycle among them is never collected. So the freeze is taken once per
process, when its first read has yielded its last batch: by then the worker has imported all it will (a
freeze at the read's start left ~29k objects that the first task loads to be walked, ~15 ms a task); the
first task's values that are in cycles are kept.

Thread-safety: the flag is set before the freeze; two first reads at once in one process freeze twice at
most, which is harmless.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pyarrow as pa

_frozen = False  # set by the first read of the process that ran to its end


def freeze_after_first_read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``; in a process that has not frozen yet, followed by ``gc.freeze()`` once they are all read."""
    return batches if _frozen else _then_freeze(batches)


def _then_freeze(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    global _frozen
    yield from batches
    if not _frozen:
        _frozen = True
        gc.freeze()
