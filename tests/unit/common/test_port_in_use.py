"""A bind that fails because the port is taken names the address and the key (``port_in_use``);
any other failure passes through unchanged."""

from __future__ import annotations

import errno
import socket

import pytest

from spark_mq.common.errors import PortInUseError
from spark_mq.common.port_in_use import naming_the_port


def test_a_taken_port_names_the_address_and_the_key():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError) as e, naming_the_port("metricsPort", "127.0.0.1", port), \
                socket.socket() as s:
            s.bind(("127.0.0.1", port))
    assert str(e.value) == (f"127.0.0.1:{port} (metricsPort) is already in use — stop the process using it "
                            f"or set metricsPort to a free port (0 turns metrics off)")


def test_other_bind_errors_pass_through():
    with pytest.raises(OSError) as e, naming_the_port("listenPort", "127.0.0.1", 1):
        raise OSError(errno.EACCES, "Permission denied")
    assert e.value.errno == errno.EACCES and not isinstance(e.value, PortInUseError)
