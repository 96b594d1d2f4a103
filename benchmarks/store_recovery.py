"""Recovery after SIGKILL: how long ``MessageStore.start()`` takes on a crashed store.

A writer subprocess appends (ASYNC_FLUSH, 100-byte bodies (``--body-size``) with
TAGS/KEYS/UNIQ_KEY, batches of 64 over 4 queues) until the commitlog holds ``--size-mb`` MiB,
reports its max offsets, and is SIGKILLed by this script (the abort file stays, the checkpoint lags by up to one
``flushIntervalConsumeQueue``). Then each case starts the store in a fresh process and times
``start()`` (interpreter start-up and imports excluded):

  a     checkpoint present: the normal crash case; walks the last ``checkCRCOnRecoverFiles``
        files (and the whole file holding the checkpoint) and replays what lies past the
        checkpoint; the body CRCs of the units below the checkpoint are checked by a
        background thread after start() (its CPU seconds: "check CPU s"), reads check
        those units themselves until it is done
  b     checkpoint deleted: walks the whole commitlog with body CRC checks and rebuilds every
        consume queue (index entries already on disk are skipped: IndexService.end_phys)
  c     checkpoint, consumequeue/ and index/ deleted: full walk and rebuild of queues AND index
  b-cold  case b after evicting the store's files from the page cache (posix_fadvise
        DONTNEED on each file): what a restart after a machine crash or reboot sees
  clean a start after a clean stop (the store is first started and stopped once, untimed, if
        the abort file is there): the queues match the clean-stop record, so start() walks
        nothing and the units of the last ``checkCRCOnRecoverFiles`` files (``--check-files``)
        are checked by a background thread; its CPU seconds are reported ("check CPU s")
  clean-sync  the same without the clean-stop record (deleted first): start() checks those
        files and the consume queues before it returns, as after a record mismatch

The cases run in order on the same store; before b, c and b-cold the abort file is
recreated and the named files deleted. Every case checks that the recovered commitlog max
offset and every queue's max offset equal what the writer last reported. MB/s is bytes
walked (recovery end - start offset) per second of start().

    .venv/bin/python benchmarks/store_recovery.py [--size-mb 1024] [--cases a,b,c]  (b-cold: opt in)
    .venv/bin/python benchmarks/store_recovery.py --profile-case b --profile-out /tmp/rec.txt
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import (
    MB,
    TOPIC,
    MiB,
    Timer,
    batch_pool,
    code_version,
    dump_json,
    fill,
    import_store,
    machine_line,
    parser,
    print_table,
    rate,
    scratch_dir,
    store_config,
)

TARGET_SECONDS = 10.0
CASES = ("a", "b", "c", "b-cold", "clean", "clean-sync")
DEFAULT_CASES = ("a", "b", "c")  # b-cold adds ~40 s: opt in with --cases a,b,c,b-cold
THIS = Path(__file__).resolve()


# -- child processes ----------------------------------------------------------------------
def writer(root: Path, size_bytes: int, pool: int, body_size: int) -> None:
    """Append until the commitlog reaches ``size_bytes``, print offsets, wait to be killed."""
    MessageStore = import_store()
    store = MessageStore(store_config(root)).start()
    p = batch_pool(pool, 64, 4, body_size, True)
    step = 64 * len(p)  # one pass over the pool between size checks
    messages = 0
    with Timer() as t:
        while store.commitlog.max_offset() < size_bytes:
            messages += fill(store, p, step)
    report = {
        "messages": messages,
        "seconds": t.seconds,
        "commitlog_max": store.commitlog.max_offset(),
        "queues": {str(q): store.get_max_offset(TOPIC, q) for q in store.queue_ids(TOPIC)},
        "checkpoint_safe": store._checkpointer.file.safe_offset if store._checkpointer.file else None,
    }
    print(json.dumps(report), flush=True)
    sys.stdin.read()  # no more puts; the parent SIGKILLs us here
    os._exit(3)


def recover_once(root: Path, check_files: int | None) -> None:
    """Time start() on ``root``; print the recovery report and the recovered offsets."""
    MessageStore = import_store()
    extra = {} if check_files is None else {"check_crc_on_recover_files": check_files}
    store = MessageStore(store_config(root, **extra))
    with Timer() as t:
        store.start()
    check_cpu = 0.0  # process CPU while waiting for the background check: that thread's
    background = getattr(store, "startup_check", None)  # absent before the start-up checks (to compare)
    if background is not None:
        with Timer() as check:
            background.join()
        check_cpu = check.seconds * check.cpu_share
    try:
        rep = store.recovery
        out = {
            "seconds": t.seconds,
            "cpu_share": t.cpu_share,
            "cpu_seconds": t.seconds * t.cpu_share,
            "check_cpu_seconds": check_cpu,
            "recover_seconds": rep.seconds,
            "start_offset": rep.start_offset,
            "end_offset": rep.end_offset,
            "units_replayed": rep.units_replayed,
            "units_checked": getattr(rep, "units_checked", 0),
            "quarantined": getattr(rep, "quarantined", 0),
            "stop_reason": rep.stop_reason,
            "commitlog_max": store.commitlog.max_offset(),
            "queues": {str(q): store.get_max_offset(TOPIC, q) for q in store.queue_ids(TOPIC)},
            # the newest message of queue 0 must be findable by its KEYS through the index
            "index_ok": _index_finds_last(store),
        }
    finally:
        store.shutdown()
    print(json.dumps(out), flush=True)


def _index_finds_last(store) -> bool:
    from spark_mq.common.unit.decode import decode_message

    q = store.queue_ids(TOPIC)[0]
    last = store.get_messages(TOPIC, q, store.get_max_offset(TOPIC, q) - 1, 1)
    msg = decode_message(last.data)
    key = msg.keys[0]
    return any(decode_message(u).queue_offset == msg.queue_offset for u in store.query_by_key(TOPIC, key, 64))


# -- parent -------------------------------------------------------------------------------
def crash_writer(root: Path, size_bytes: int, pool: int, body_size: int) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, str(THIS), "--_writer", str(root), "--size-mb", str(size_bytes // MiB),
                             "--pool", str(pool), "--body-size", str(body_size)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"writer exited early with code {proc.wait()}")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    assert (root / "abort").exists(), "the abort file should survive a SIGKILL"
    return json.loads(line)


def prepare_case(root: Path, case: str, check_files: int | None) -> None:
    if case == "a":
        return
    if case.startswith("clean"):
        if (root / "abort").exists():
            _run_recover(root, check_files)
        if case == "clean-sync":
            (root / "cleanstop").unlink(missing_ok=True)
        return
    (root / "abort").touch()
    (root / "checkpoint").unlink(missing_ok=True)
    if case == "c":
        shutil.rmtree(root / "consumequeue", ignore_errors=True)
        shutil.rmtree(root / "index", ignore_errors=True)
    if case.endswith("-cold"):
        evict(root)


def evict(root: Path) -> int:
    """Drop the page-cache pages of every file under ``root`` (flushed first); returns bytes."""
    total = 0
    for p in root.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return total


def _recover_cmd(root: Path, check_files: int | None) -> list[str]:
    cmd = [sys.executable, str(THIS), "--_recover", str(root)]
    return cmd if check_files is None else [*cmd, "--check-files", str(check_files)]


def _run_recover(root: Path, check_files: int | None) -> None:
    subprocess.run(_recover_cmd(root, check_files), check=True, stdout=subprocess.DEVNULL)


def run_case(root: Path, case: str, check_files: int | None, profile_out: Path | None = None) -> dict[str, Any]:
    prepare_case(root, case, check_files)
    cmd = _recover_cmd(root, check_files)
    if profile_out is not None:
        py_spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(py_spy), "record", "--format", "raw", "-o", str(profile_out), "--", *cmd]
    with Timer() as t:
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    res = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])  # py-spy prints too
    res["process_seconds"] = t.seconds
    res["scanned_bytes"] = res["end_offset"] - res["start_offset"]
    res["mb_s"] = rate(res["scanned_bytes"] / MB, res["seconds"])
    return res


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=1024, help="commitlog size (MiB) the writer reaches")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated subset of {CASES}, run in order")
    p.add_argument("--pool", type=int, default=1024, help="distinct prepared batches in the writer")
    p.add_argument("--body-size", type=int, default=100, help="message body bytes (1024: the peers' restart store)")
    p.add_argument("--profile-case", choices=CASES, default=None,
                   help="after the timed cases, run this case once more under py-spy (not timed)")
    p.add_argument("--profile-out", type=Path, default=Path("/tmp/recovery.pyspy.txt"),
                   help="py-spy raw (collapsed stacks) output for --profile-case")
    p.add_argument("--check-files", type=int, default=None,
                   help="checkCRCOnRecoverFiles for the timed starts (default: the config's default)")
    p.add_argument("--_writer", type=Path, help=argparse_hidden())
    p.add_argument("--_recover", type=Path, help=argparse_hidden())
    a = p.parse_args()
    if a._writer:
        writer(a._writer, a.size_mb * MiB, a.pool, a.body_size)
        return
    if a._recover:
        recover_once(a._recover, a.check_files)
        return
    if a.quick:
        a.size_mb, a.pool = 16, 64
    cases = [c for c in a.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}: choose from {CASES}")

    with scratch_dir(a.dir, "bench-recovery-") as root:
        wrote = crash_writer(root, a.size_mb * MiB, a.pool, a.body_size)
        results = {}
        for c in cases:
            r = run_case(root, c, a.check_files)
            r["verified"] = (r["commitlog_max"] == wrote["commitlog_max"] and r["queues"] == wrote["queues"]
                             and r["index_ok"])
            results[c] = r
        if a.profile_case:
            run_case(root, a.profile_case, a.check_files, a.profile_out)

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    print(f"writer: {wrote['messages']:,} messages, commitlog {wrote['commitlog_max']:,} bytes in "
          f"{wrote['seconds']:.1f} s ({rate(wrote['messages'], wrote['seconds']):,.0f} msg/s); "
          f"checkpoint safe offset at kill {wrote['checkpoint_safe']:,}")
    rows = [
        [c, r["seconds"], r["cpu_seconds"], r["recover_seconds"], r["check_cpu_seconds"], r["scanned_bytes"] / MiB,
         r["units_checked"], r["units_replayed"], r["quarantined"], r["stop_reason"], r["cpu_share"],
         "yes" if r["verified"] else "NO", TARGET_SECONDS / r["seconds"]]
        for c, r in results.items()
    ]
    print_table(
        f"recovery of a {wrote['commitlog_max'] / MiB:,.0f} MiB commitlog after SIGKILL",
        ("case", "start() s", "start() CPU s", "recover() s", "check CPU s", "walked MiB", "units walked",
         "units replayed", "quarantined", "stop", "CPU", "offsets match", f"target {TARGET_SECONDS:g} s / result"),
        rows,
    )
    if a.profile_case:
        print(f"py-spy profile of case {a.profile_case}: {a.profile_out}")
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "writer": wrote, "recovery": results})
    if not all(r["verified"] for r in results.values()):
        sys.exit("recovered offsets differ from what the writer reported")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
