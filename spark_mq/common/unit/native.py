"""The native part of the append path: ``native.c`` (ours, next to this file), a plain C shared
library loaded with ctypes. :data:`ENCODER` writes a whole batch of commitlog units in one call, with
what the dispatch takes from their property strings; :data:`APPEND_ONE` encodes one message's unit
and ``pwrite``s it into its commitlog file in one call (a network send's usual put: ~20 Python and C calls fewer);
:data:`DISPATCH_INFO` takes a put's property strings to tag codes and index key hashes in one pass;
:data:`INDEX_PUT` inserts index keys into an index file (its slots and entries) in one pass;
:data:`BODY_CRCS` computes the BODYCRC of many bodies of one buffer (a slave's and recovery's checks);
:data:`PULL_UNITS` and :data:`PROPERTY_PAIRS` are the Arrow decoder's two sequential steps (a pull
body's units walked, checked and their headers and ranges gathered in one pass; every property pair, and the
TAGS/KEYS/UNIQ_KEY columns), each ~0.05-0.2 µs a message in numpy, a few ns (plus the cache misses) here;
:data:`HEADER_STRINGS` and :data:`GATHER_RANGES` write its other string columns (msg ids and hosts from the
headers; bodies and other byte ranges copied back to back) straight as Arrow buffers;
:data:`FIRST_NONZERO` finds a mapped file's stale tail without numpy (a restart imports none).

Why: the numpy encoder (:mod:`~spark_mq.common.unit.encode`: record fields, a four-piece join per
message, a CRC call per body) and the numpy scan of property strings (``store/dispatch.py``) cost
~0.4 µs a message each, together ~40 % of the store's append. No library builds RocketMQ units
or parses its property strings, so this is a small compiled part of our own, with no ``Python.h``:
it builds wherever ``cc`` exists.

Built by ``scripts/_setup.sh``, or by hand with ``python -m spark_mq.common.unit.native`` (only
when ``native.c`` changed since the last build). Every function of it (:data:`ENCODER`, ...) is
None, and the pure-Python/numpy paths run, when the library was not built (an install without a C
compiler), fails to load, was built from another ``native.c`` (it carries its source's SHA-256),
or ``SPARK_MQ_NATIVE=0`` is set (how the tests run both paths and compare their results).

Thread-safety: every function but :data:`INDEX_PUT` and :data:`APPEND_ONE` is a pure function of its arguments;
:data:`INDEX_PUT` writes the index file it is given, :data:`APPEND_ONE` the commitlog file and scratch buffer
(their callers serialise them).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native.c")
LIBRARY = Path(__file__).with_name("libspark_mq_units.so")  # git-ignored build output
DISABLE_ENV = "SPARK_MQ_NATIVE"  # "0": never load the library (the pure-Python encoder runs)
_CFLAGS = ("-O2", "-shared", "-fPIC", "-std=c99")

_P = ctypes.c_char_p  # bytes: passed as a pointer to their buffer, no copy
_I64 = ctypes.c_int64
_ADDR = ctypes.c_void_p  # an address: a mapping's, a numpy array's or a byref of a buffer
_OUT = ctypes.POINTER(ctypes.c_char)
# spark_mq_encode_batch(scalars, body_lengths, props_lengths, bodies, props, flags, born_timestamps, sys_flags,
#                       reconsume_times, header, topic_tail, units, meta): the scalars packed in one argument
_ENCODE_ARGS = (_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _OUT, _OUT)
# spark_mq_append_one(scalars, body, props, topic_tail, hosts, scratch, unit_size): the scalars packed in one argument
_APPEND_ONE_ARGS = (_P, _P, _P, _P, _P, _OUT, _I64)
# spark_mq_dispatch_info(props, props_size, props_lengths, rows, prefixes, prefix_step, tag_codes, key_rows,
#                        key_hashes, key_capacity)
_DISPATCH_ARGS = (_P, _I64, _P, _I64, _P, _I64, _OUT, _OUT, _OUT, _I64)
# spark_mq_index_put(slots, slot_num, entries, count, k, hashes, phys, timestamps, begin)
_INDEX_ARGS = (_ADDR, _I64, _ADDR, _I64, _I64, _ADDR, _ADDR, _ADDR, _I64)
# spark_mq_body_crcs(buf, buf_size, starts, ends, n, crcs, crc_mask)
_CRC_ARGS = (_ADDR, _I64, _P, _P, _I64, _ADDR, ctypes.c_uint32)
# the Arrow decoder's (addresses of numpy arrays): spark_mq_pull_units(buf, size, ranges, headers, capacity,
# same_topic),
# spark_mq_property_pairs(buf, props_start, props_end, rows, names, name_offsets, values, value_offsets,
#                         row_offsets, picks, capacity, pick_values, pick_offsets, pick_room)
_PULL_UNITS_ARGS = (_ADDR, _I64, _ADDR, _ADDR, _I64, _ADDR)
_PROPERTY_PAIRS_ARGS = (_ADDR, _ADDR, _ADDR, _I64, _ADDR, _ADDR, _ADDR, _ADDR, _ADDR, _ADDR, _I64, _ADDR, _ADDR, _I64)
# spark_mq_header_strings(headers, n, msg_ids, born, born_offsets, store, store_offsets),
# spark_mq_gather_ranges(buf, starts, ends, n, out, offsets)
_HEADER_STRINGS_ARGS = (_ADDR, _I64, _ADDR, _ADDR, _ADDR, _ADDR, _ADDR)
_GATHER_RANGES_ARGS = (_ADDR, _ADDR, _ADDR, _I64, _ADDR, _ADDR)
# spark_mq_first_nonzero(buf, size)
_FIRST_NONZERO_ARGS = (_ADDR, _I64)
_FUNCTIONS = {"spark_mq_encode_batch": _ENCODE_ARGS, "spark_mq_append_one": _APPEND_ONE_ARGS,
              "spark_mq_dispatch_info": _DISPATCH_ARGS,
              "spark_mq_index_put": _INDEX_ARGS, "spark_mq_body_crcs": _CRC_ARGS,
              "spark_mq_pull_units": _PULL_UNITS_ARGS, "spark_mq_property_pairs": _PROPERTY_PAIRS_ARGS,
              "spark_mq_header_strings": _HEADER_STRINGS_ARGS, "spark_mq_gather_ranges": _GATHER_RANGES_ARGS,
              "spark_mq_first_nonzero": _FIRST_NONZERO_ARGS}


def source_digest() -> str:
    """SHA-256 of ``native.c``: a library is used only when built from exactly this source."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def build(compiler: str | None = None) -> Path:
    """Compile ``native.c`` into :data:`LIBRARY` (atomically replaced), unless it is already built
    from this source; raises ``RuntimeError`` (with the compiler's output) when compiling fails."""
    digest = source_digest()
    if LIBRARY.exists() and digest.encode() in LIBRARY.read_bytes():  # the digest is a string constant in it
        return LIBRARY
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) found: install one, or set CC")
    tmp = str(LIBRARY.with_name(f".{LIBRARY.name}.{os.getpid()}"))  # renamed into place once whole
    try:
        done = subprocess.run([cc, *_CFLAGS, f'-DSPARK_MQ_SOURCE_SHA256="{digest}"', "-o", tmp, str(SOURCE)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{cc} failed to build {LIBRARY.name}:\n{done.stderr.strip()}")
        os.replace(tmp, LIBRARY)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return LIBRARY


def _load() -> ctypes.CDLL | None:
    """The library, when it may be used (see the module's docstring)."""
    if os.environ.get(DISABLE_ENV) == "0" or not LIBRARY.exists():
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        lib.spark_mq_units_source.restype = ctypes.c_char_p
        if lib.spark_mq_units_source().decode() != source_digest():
            log.warning("%s was built from another native.c: using the numpy paths instead "
                        "(rebuild it: python -m spark_mq.common.unit.native)", LIBRARY)
            return None
        for name, argtypes in _FUNCTIONS.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = _I64
    except (OSError, AttributeError) as e:
        log.warning("%s does not load (%s): using the numpy paths instead", LIBRARY, e)
        return None
    return lib


# the build command does not load the library it may be about to replace
_LIB = _load() if __name__ != "__main__" else None
ENCODER = _LIB.spark_mq_encode_batch if _LIB is not None else None  # see native.c
APPEND_ONE = _LIB.spark_mq_append_one if _LIB is not None else None  # see native.c
DISPATCH_INFO = _LIB.spark_mq_dispatch_info if _LIB is not None else None  # see native.c
INDEX_PUT = _LIB.spark_mq_index_put if _LIB is not None else None  # see native.c
BODY_CRCS = _LIB.spark_mq_body_crcs if _LIB is not None else None  # see native.c
PULL_UNITS = _LIB.spark_mq_pull_units if _LIB is not None else None  # see native.c
PROPERTY_PAIRS = _LIB.spark_mq_property_pairs if _LIB is not None else None  # see native.c
HEADER_STRINGS = _LIB.spark_mq_header_strings if _LIB is not None else None  # see native.c
GATHER_RANGES = _LIB.spark_mq_gather_ranges if _LIB is not None else None  # see native.c
FIRST_NONZERO = _LIB.spark_mq_first_nonzero if _LIB is not None else None  # see native.c


def main() -> int:
    """Build the library (the set-up's and a user's command); one line either way."""
    try:
        path = build()
    except (RuntimeError, OSError) as e:
        print(f"[native] {e}; the numpy paths will be used instead", file=sys.stderr)
        return 1
    print(f"[native] {path} is built from {SOURCE.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
