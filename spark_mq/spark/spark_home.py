"""The ``SPARK_HOME`` a local session's JVM is launched with when pyspark is pip-installed: the installed
package itself, seen through a directory of links that leaves out ``python/lib/pyspark.zip`` (and py4j's
zip when the installed py4j is that version).

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the ``PYTHONPATH`` of every
Python process it starts (``PythonUtils.sparkPythonPath``): the executors' workers and, for every streaming
query, the driver-side runner of its Python stream reader. A zip holds no bytecode, and
``PYTHONDONTWRITEBYTECODE`` (or a read-only install) keeps any from being cached, so each of those processes
compiled pyspark from source: about half of the ~1.3 CPU-s a query's runner costs (issue 27). Without the
zips on their path they import the installed pyspark and py4j, which pip compiled when it installed them.

Only for a session that is certainly local and whose home nobody chose: nothing in the environment names
a master or a configuration (no spark-submit, ``PYSPARK_SUBMIT_ARGS``, ``SPARK_CONF_DIR``, ``MASTER``) and
``SPARK_HOME`` is unset. A cluster manager ships ``$SPARK_HOME/python/lib/pyspark.zip`` to its executors
(YARN does), so a home without it is for local sessions only.

Thread-safety: called before the JVM starts; processes building the same home at once each build a copy
and rename it into place, the first rename wins.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pyspark

log = logging.getLogger(__name__)

# set by spark-submit, or a master / configuration / home the user chose: the session is not ours to place
HANDS_OFF_ENV = ("SPARK_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "MASTER")
PYSPARK_ZIP = "pyspark.zip"
PY4J_DIST = "py4j"
CACHE_ENV = "XDG_CACHE_HOME"
HOME_PREFIX = "spark-home-"


def local_spark_home() -> Path | None:
    """The home to launch a local session's JVM with (built on first use under the user's cache directory),
    or None where Spark's own must stay: a home or master chosen in the environment, pyspark not laid out as
    pip installs it, or a cache directory that cannot be written (then the session starts as before)."""
    if any(name in os.environ for name in HANDS_OFF_ENV):
        return None
    package = Path(pyspark.__file__).resolve().parent
    if not (package / "jars").is_dir() or not (package / "python" / "lib" / PYSPARK_ZIP).is_file():
        return None
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    home = _cache_root() / f"{HOME_PREFIX}{pyspark.__version__}-{digest}"
    if not home.is_dir():
        try:
            _build(package, home)
        except OSError as e:
            log.info("launching Spark with its own SPARK_HOME: cannot build %s (%s)", home, e)
            return None
    return home


def _cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "spark_mq"


def _left_out() -> set[str]:
    """The zips of ``python/lib`` the installed packages replace."""
    left_out = {PYSPARK_ZIP}
    try:
        left_out.add(f"py4j-{importlib.metadata.version(PY4J_DIST)}-src.zip")
    except importlib.metadata.PackageNotFoundError:
        pass  # py4j only as the zip: it stays on the path
    return left_out


def _build(package: Path, home: Path) -> None:
    """``home``: a link to every entry of ``package`` but ``python/lib``'s left-out zips, built beside it and
    renamed into place."""
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    try:
        _link_entries(package, staging, {"python"})
        _link_entries(package / "python", staging / "python", {"lib"})
        _link_entries(package / "python" / "lib", staging / "python" / "lib", _left_out())
        staging.rename(home)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not home.is_dir():  # else another process renamed its copy first
            raise


def _link_entries(source: Path, target: Path, skip: set[str]) -> None:
    target.mkdir(exist_ok=True)
    for entry in source.iterdir():
        if entry.name not in skip:
            (target / entry.name).symlink_to(entry)
