"""Which modules a piece of code loads, seen from a fresh interpreter (start-up paths stay light: a broker's
restart and each Spark query's runner are mostly imports)."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_by(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of ``prefixes`` that are loaded once ``code`` has run in a new interpreter."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
