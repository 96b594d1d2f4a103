"""Fixtures of the ACL integration tests: one accounts file, and per module a broker with aclEnable=true
(registered with a NameServer without ACL: the broker's own registration is signed by the client side,
branch acl-client), a NameServer and a controller with aclEnable=true."""

from __future__ import annotations

import pytest
from integration.controller._support import start_controller
from servers import Broker, start_namesrv

from ._support import acl_conf, start_acl_namesrv, write_acl


@pytest.fixture(scope="module")
def acl_root(tmp_path_factory):
    return tmp_path_factory.mktemp("acl")


@pytest.fixture(scope="module")
def acl_file(acl_root):
    return write_acl(acl_root)


@pytest.fixture(scope="module")
def plain_namesrv(acl_root):
    """A NameServer without ACL, where the ACL broker registers."""
    server = start_namesrv(acl_root / "plain-namesrv.log", verbose=False)
    yield server.addr
    server.stop_cleanly()


@pytest.fixture(scope="module")
def acl_broker(acl_root, acl_file, plain_namesrv):
    """A broker with aclEnable=true and metrics, stopped cleanly after the module."""
    b = Broker(plain_namesrv, acl_root / "broker", acl_conf(acl_file), metrics=True, verbose=False)
    yield b
    if b.server.alive():
        b.stop()


@pytest.fixture(scope="module")
def acl_namesrv(acl_root, acl_file):
    server = start_acl_namesrv(acl_root / "namesrv", acl_file)
    yield server
    server.stop_cleanly()


@pytest.fixture(scope="module")
def acl_controller(acl_root, acl_file):
    server = start_controller(acl_root / "controller", acl_conf(acl_file))
    yield server
    server.stop_cleanly()
