"""A server started on a port another process listens on: ``spark-mq`` exits non-zero with one line
naming the address and the config key that set the port (no traceback), for every port a process
binds: the broker's listenPort, haListenPort and metricsPort, the NameServer's and the controller's
listenPort."""

from __future__ import annotations

import pytest
from servers import SMALL_BROKER_CONF, Broker, free_port, start_namesrv, unique

from .conftest import run_cli

ZERO_MEANS = {"listenPort": "0 picks one", "haListenPort": "0 serves slaves on listenPort + 1",
              "metricsPort": "0 turns metrics off"}


def assert_port_in_use(result, what: str, port: int, key: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    error = f"spark-mq: error: cannot start {what}: 127.0.0.1:{port} ({key}) is already in use — " \
            f"stop the process using it or set {key} to a free port ({ZERO_MEANS[key]}"
    assert any(line.startswith(error) for line in result.stderr.splitlines()), result.stderr


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    server = start_namesrv(tmp_path_factory.mktemp("namesrv") / "namesrv.log", verbose=False)
    yield server
    server.stop_cleanly()


@pytest.fixture(scope="module")
def ha_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def first(tmp_path_factory, namesrv, ha_port):
    """A running master whose three ports the second broker of each test collides with."""
    b = Broker(namesrv.addr, tmp_path_factory.mktemp("first"), f"haListenPort={ha_port}\n", metrics=True,
               verbose=False)
    yield b
    b.stop()


def second_broker(tmp_path, namesrv: str, *, port: int = 0, metrics_port: int = 0, extra_conf: str = ""):
    """``spark-mq broker`` on its own store and name with these ports; runs until it fails."""
    conf = tmp_path / "second.conf"
    conf.write_text(f"{SMALL_BROKER_CONF}brokerName={unique('second')}\n{extra_conf}")
    return run_cli("broker", "-c", str(conf), "--namesrv", namesrv, "--port", str(port), "--store",
                   str(tmp_path / "store"), "--metrics-port", str(metrics_port))


def test_a_broker_on_a_listen_port_in_use(tmp_path, namesrv, first):
    assert_port_in_use(second_broker(tmp_path, namesrv.addr, port=first.server.port), "the broker",
                       first.server.port, "listenPort")


def test_a_broker_on_an_ha_port_in_use(tmp_path, namesrv, first, ha_port):
    result = second_broker(tmp_path, namesrv.addr, extra_conf=f"haListenPort={ha_port}\n")
    assert_port_in_use(result, "the broker", ha_port, "haListenPort")


def test_a_broker_on_a_metrics_port_in_use(tmp_path, namesrv, first):
    """The shipped broker.conf twice on one host: the metrics port (9100) collides."""
    result = second_broker(tmp_path, namesrv.addr, metrics_port=first.metrics_port)
    assert_port_in_use(result, "the broker", first.metrics_port, "metricsPort")
    assert first.server.alive()


def test_a_namesrv_on_a_port_in_use(namesrv):
    assert_port_in_use(run_cli("namesrv", "--port", str(namesrv.port)), "the NameServer", namesrv.port,
                       "listenPort")


def test_a_controller_on_a_port_in_use(tmp_path, namesrv):
    result = run_cli("controller", "--port", str(namesrv.port), "--store", str(tmp_path / "controller"))
    assert_port_in_use(result, "the controller", namesrv.port, "listenPort")
