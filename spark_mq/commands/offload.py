"""``spark-mq offload`` (and ``jobs/offload.py``, which runs the same under spark-submit): archive the cold
range of every queue of some topics into ``<root>/<topic>/`` and record the new watermarks at the brokers.

The work is :mod:`spark_mq.tiered.offload`'s; this module parses the options, shows a rich progress bar
(queues, messages, MB/s of Arrow message data) and prints one ``[offload]`` line per event a person or
a script may wait for: a chunk committed to the table, a watermark recorded at the broker, a queue done.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING

from spark_mq.commands.common import add_command, client_config, console
from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError
from spark_mq.tiered.formats import DEFAULT_FORMAT, FORMATS

if TYPE_CHECKING:
    from rich.console import Console

    from spark_mq.tiered.offload import QueuePlan, QueueResult

MB = 1_000_000
MiB = 1 << 20
REQUEST_TIMEOUT_S = 10.0
# Test hook: the name of an event ("committed" or "queue_done") after whose first ``[offload]`` line the
# process stops and waits to be killed, so crash tests SIGKILL it exactly in that window
TEST_PAUSE_ENV = "SPARK_MQ_OFFLOAD_TEST_PAUSE_AT"
PAUSE_POINTS = ("committed", "queue_done")

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
DESCRIPTION = (
    "Archive the cold messages of each queue of the topics into <root>/<topic>/ (a Delta table written "
    "with deltalake, or Parquet files named by offset range), partitioned by broker_name and queue_id, "
    "then record each queue's archived-up-to offset at its broker. Cold means: in full commitlog files "
    "(default), stored longer ago than --older-than, or everything (--all). Re-running after a crash "
    "neither repeats nor skips a message.")


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a duration such as ``500ms``, ``90s``, ``30m``, ``1h``, ``2d`` or ``1h30m``."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ConfigError(f"--older-than {text!r} is not a duration: write a number with a unit (ms, s, m, h, d), "
                          f"e.g. 30m, 1h, 2d or 1h30m")
    return round(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options after --namesrv (shared by ``spark-mq offload`` and ``jobs/offload.py``)."""
    p.add_argument("--topic", action="append", required=True,
                   help="topic to offload; repeat it or separate with commas for several")
    p.add_argument("--root", required=True, help="archive root (tieredStoreRoot): a directory or a URI")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help=f"table format of new archives (default {DEFAULT_FORMAT}; an existing table keeps its own)")
    cold = p.add_mutually_exclusive_group()
    cold.add_argument("--older-than", metavar="AGE",
                      help="offload the messages stored longer ago than AGE (e.g. 30m, 1h, 2d)")
    cold.add_argument("--all", action="store_true", help="offload everything up to each queue's max offset")
    p.add_argument("--chunk-mb", type=int, default=128,
                   help="MiB of Arrow data per append: one Delta commit or Parquet file (default 128)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "offload", run, help="archive cold queue ranges to Delta/Parquet tables",
                    description=DESCRIPTION)
    add_arguments(p)


def topics_of(args: argparse.Namespace) -> list[str]:
    return list(dict.fromkeys(t.strip() for arg in args.topic for t in arg.split(",") if t.strip()))


def run(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.config import open_api
    from spark_mq.tiered.offload import ColdBoundary, plan_offload, run_offload

    topics = topics_of(args)
    if not topics:
        raise ConfigError("--topic names no topic")
    if args.chunk_mb < 1:
        raise ConfigError("--chunk-mb must be at least 1")
    boundary = ColdBoundary(all=args.all, older_than_ms=parse_duration_ms(args.older_than)
                            if args.older_than is not None else None)
    out = console()
    client = client_config(args)
    with open_api(client, REQUEST_TIMEOUT_S) as api:
        plans = plan_offload(api, split_addresses(args.namesrv), topics, args.root, fmt=args.format,
                             boundary=boundary)
        queue_plans = [q for t in plans for q in t.queues]
        for t in plans:
            out.print(f"[offload] {t.archive.topic}: {len(t.queues)} queue(s), "
                      f"{sum(q.messages for q in t.queues):,} message(s) to archive into {t.archive.format} table "
                      f"{t.archive.uri} ({boundary.describe()})", markup=False)
        reporter = ProgressReporter(out, len(queue_plans), sum(q.messages for q in queue_plans))
        with reporter:
            results = run_offload(api, plans, reporter, chunk_bytes=args.chunk_mb * MiB, client=client)
    messages = sum(r.messages for r in results)
    nbytes = sum(r.nbytes for r in results)
    elapsed = reporter.elapsed()
    out.print(f"[offload] done: {messages:,} message(s), {nbytes / MB:,.1f} MB in {elapsed:.1f}s "
              f"({nbytes / MB / max(elapsed, 1e-9):,.1f} MB/s) over {len(queue_plans)} queue(s)", markup=False)
    return 0


class ProgressReporter:
    """The offload's :class:`~spark_mq.tiered.offload.OffloadListener`: a rich progress bar of queues and
    messages with the MB/s so far, and ``[offload]`` event lines above it. ``pulled`` runs on the pull
    thread; rich's Progress is thread-safe."""

    def __init__(self, out: Console, queues: int, messages: int) -> None:
        # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.out = out
        self.progress = Progress(TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=out)
        self.queues = self.progress.add_task("queues", total=queues, detail="")
        self.messages = self.progress.add_task("messages", total=messages, detail="")
        self.nbytes = 0
        self.t0 = time.perf_counter()
        self.pause_at = os.environ.get(TEST_PAUSE_ENV)
        if self.pause_at is not None and self.pause_at not in PAUSE_POINTS:
            raise ConfigError(f"{TEST_PAUSE_ENV}={self.pause_at!r}: use one of {', '.join(PAUSE_POINTS)}")

    def __enter__(self) -> ProgressReporter:
        self.t0 = time.perf_counter()
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _line(self, text: str, event: str) -> None:
        self.progress.console.print(f"[offload] {text}", markup=False, highlight=False)
        sys.stdout.flush()
        if event == self.pause_at:
            self.progress.console.print(f"[offload] test hook {TEST_PAUSE_ENV}: paused after {event}, waiting to "
                                        f"be killed", markup=False, highlight=False)
            sys.stdout.flush()
            while True:
                signal.pause()

    def queue_started(self, plan: QueuePlan) -> None:
        self.progress.update(self.queues, detail=plan.name)

    def pulled(self, plan: QueuePlan, messages: int, nbytes: int) -> None:
        self.nbytes += nbytes
        rate = f"{self.nbytes / MB / max(self.elapsed(), 1e-9):,.1f} MB/s"
        self.progress.update(self.messages, advance=messages, detail=rate)

    def committed(self, plan: QueuePlan, start: int, end: int, written: bool) -> None:
        state = "committed" if written else "already in the table"
        self._line(f"{state} {plan.name} [{start}, {end}): {end - start} message(s)", "committed")

    def watermark_recorded(self, plan: QueuePlan, offset: int) -> None:
        self._line(f"watermark {plan.name} = {offset}", "watermark")

    def queue_done(self, plan: QueuePlan, result: QueueResult) -> None:
        self.progress.update(self.queues, advance=1)
        self._line(f"queue {plan.name} done: {result.messages} message(s) in {result.commits} commit(s) and "
                   f"{result.seconds:.2f}s, "
                   f"watermark {result.watermark if result.watermark is not None else plan.watermark}", "queue_done")
