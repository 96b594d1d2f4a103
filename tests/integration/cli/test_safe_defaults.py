"""Safe defaults: a NameServer, controller or broker asked to listen beyond loopback without ``aclEnable``
refuses to start, in one line that says what to set (no traceback, exit non-zero); with
``allowInsecureRemote=true`` it starts. Real ``spark-mq`` subprocesses; the broker's HA and metrics ports
bind the same ``listenAddress`` and so follow the same rule."""

from __future__ import annotations

import pytest
from integration.controller._support import CONTROLLER_READY
from servers import BROKER_READY, NAMESRV_READY, SMALL_BROKER_CONF, ServerProcess, free_port

from .conftest import run_cli

EVERYWHERE = "0.0.0.0"
REFUSAL = (f"spark-mq: error: {{conf}}: listenAddress={EVERYWHERE} serves other machines but aclEnable is off: "
           "anyone reaching the port could read, write and administer; set aclEnable=true (with a plain_acl.yml) "
           "or, on a trusted network, allowInsecureRemote=true")


def server_args(process: str, conf: str, tmp_path) -> list[str]:
    """``spark-mq <process>`` with config file ``conf`` on a free port (a broker with its store in tmp_path)."""
    extra = {"broker": ["--namesrv", f"127.0.0.1:{free_port()}", "--store", str(tmp_path / "store"),
                        "--metrics-port", str(free_port())],
             "controller": ["--store", str(tmp_path / "controller")]}
    return [process, "-c", conf, "--port", "0", *extra.get(process, [])]


@pytest.mark.parametrize("process", ["namesrv", "controller", "broker"])
def test_listening_beyond_loopback_without_acl_is_refused_in_one_line(process, tmp_path):
    conf = tmp_path / f"{process}.conf"
    conf.write_text(f"{SMALL_BROKER_CONF if process == 'broker' else ''}listenAddress={EVERYWHERE}\n")
    result = run_cli(*server_args(process, str(conf), tmp_path))
    assert result.returncode != 0
    assert result.stdout == ""  # never got as far as printing a ready line
    assert result.stderr.splitlines() == [REFUSAL.format(conf=conf)]


@pytest.mark.parametrize(("process", "ready"), [("namesrv", NAMESRV_READY), ("controller", CONTROLLER_READY),
                                                ("broker", BROKER_READY)])
def test_allow_insecure_remote_lets_it_listen_everywhere(process, ready, tmp_path):
    conf = tmp_path / f"{process}.conf"
    conf.write_text(f"{SMALL_BROKER_CONF if process == 'broker' else ''}listenAddress={EVERYWHERE}\n"
                    "allowInsecureRemote=true\n")
    server = ServerProcess(server_args(process, str(conf), tmp_path), tmp_path / f"{process}.log", ready,
                           verbose=False)
    try:
        assert server.alive()
    finally:
        server.stop_cleanly()
