"""A port a process binds, already taken: the error names the address and the config key that set it.

Without this the operator reads "Address already in use" and must guess which of a broker's three
ports (listenPort, haListenPort, metricsPort) collided, e.g. two brokers started on one host from
the shipped ``conf/broker.conf`` share metricsPort 9100.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from spark_mq.common.errors import PortInUseError

# what 0 means for each key, said in the error so the operator knows the way out
ZERO_MEANS = {
    "listenPort": "0 picks one",
    "haListenPort": "0 serves slaves on listenPort + 1, or a free port when that is taken",
    "metricsPort": "0 turns metrics off",
    "grpcListenPort": "0 picks one",
}


@contextlib.contextmanager
def naming_the_port(key: str, host: str, port: int) -> Iterator[None]:
    """Turn a bind of ``host:port`` that fails with EADDRINUSE into ``PortInUseError`` naming ``key``."""
    try:
        yield
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        zero = ZERO_MEANS.get(key)
        raise PortInUseError(f"{host}:{port} ({key}) is already in use — stop the process using it or set {key} "
                             f"to a free port{f' ({zero})' if zero else ''}") from e
