"""Top frames of a py-spy profile recorded with ``--format raw`` (collapsed stacks).

Own time: samples where the function is the innermost frame. Total time: samples where
the function is anywhere on the stack (counted once per sample even if recursive); that
table leaves out the benchmark scripts' own frames, thread start-up and any frame present in
every kept sample.
Functions are keyed by ``name (file)`` with line numbers dropped. ``--within NAME`` keeps
only samples whose stack contains a function called NAME (comma-separate several; e.g.
``fill,_run`` for the put loop plus the store's background threads, ``recover`` for
recovery), so set-up and imports do not dilute the percentages.

py-spy samples every non-idle thread, so with background threads the samples are thread
samples, not wall-clock slices of one thread.

    .venv/bin/py-spy record --format raw -o /tmp/append.txt -- \\
        .venv/bin/python benchmarks/store_append.py --variants props --reps 1 --disk-mb 0
    .venv/bin/python benchmarks/profile_summary.py /tmp/append.txt --within fill,_run [--markdown]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from _common import print_table

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
_WAIT = re.compile(r"\(threading\.py(?::\d+)?\)$")


def _key(frame: str, lines: bool = False) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    name, path = m.groups()
    if lines:
        name, path = name, frame[len(name) + 2 : -1]
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def _name(frame_key: str) -> str:
    """Function name of a frame key, without the class: ``PeriodicTask._run`` -> ``_run``."""
    return frame_key.split(" (", 1)[0].rsplit(".", 1)[-1]


def summarise(path: Path, within: set[str] | None = None, lines: bool = False,
              keep_waits: bool = False) -> tuple[int, int, Counter, Counter]:
    """(samples kept, all samples, own counts, total counts). Samples whose innermost frame
    is in threading.py (a background thread between ticks, which py-spy does not always
    classify as idle) are dropped unless ``keep_waits``."""
    own: Counter = Counter()
    total: Counter = Counter()
    kept = everything = 0
    for line in path.read_text().splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        stack, n = m.group(1), int(m.group(2))
        everything += n
        frames = [_key(f, lines) for f in stack.split(";") if f]
        if within and not any(_name(f) in within for f in frames):
            continue
        if not keep_waits and _WAIT.search(frames[-1]):
            continue
        kept += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    return kept, everything, own, total


def top_rows(counter: Counter, kept: int, n: int) -> list[list[object]]:
    return [[f, c, 100.0 * c / kept] for f, c in counter.most_common(n)]


def markdown(title: str, rows: list[list[object]]) -> str:
    out = [f"**{title}**", "", "| frame | samples | % |", "|---|---:|---:|"]
    out += [f"| `{f}` | {c:,} | {p:.1f} |" for f, c, p in rows]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("profile", type=Path, help="py-spy --format raw output")
    p.add_argument("--within", default=None,
                   help="comma-separated function names (no class); keep only samples with one on the stack")
    p.add_argument("--top", type=int, default=10, help="rows per table")
    p.add_argument("--keep-waits", action="store_true",
                   help="keep samples whose innermost frame is a threading.py wait (dropped by default)")
    p.add_argument("--lines", action="store_true", help="keep line numbers (one row per source line)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables (for BENCHMARKS.md)")
    a = p.parse_args()
    within = set(a.within.split(",")) if a.within else None
    kept, everything, own, total = summarise(a.profile, within, a.lines, a.keep_waits)
    if not kept:
        raise SystemExit(f"no samples{' under ' + a.within if a.within else ''} in {a.profile}")
    scope = f"{kept:,} of {everything:,} samples" + (f" (stacks through {a.within})" if a.within else "")
    # the total-time table skips the harness (benchmark scripts, thread bootstrap) and roots
    # every kept sample passes through: they say nothing about the store
    harness = {f.name for f in Path(__file__).parent.glob("*.py")} | {"threading.py"}
    store_frames = Counter({f: c for f, c in total.items()
                            if f.rsplit("(", 1)[-1].rstrip(")") not in harness and c < kept})
    total_rows = top_rows(store_frames, kept, a.top)
    if a.markdown:
        print(markdown(f"own time, {scope}", top_rows(own, kept, a.top)))
        print()
        print(markdown(f"total time, {scope}", total_rows))
        return
    print_table(f"own time, {scope}", ("frame", "samples", "%"), top_rows(own, kept, a.top))
    print_table(f"total time, {scope}", ("frame", "samples", "%"), total_rows)


if __name__ == "__main__":
    main()
