"""``common/tls.py``: contexts from the ``tls.*`` keys, and a ``ConfigError`` naming the key and the file for
every file that cannot serve (missing, not PEM, a key of another certificate, client auth without a CA)."""

from __future__ import annotations

import ssl

import pytest

from spark_mq.client.config import ClientConfig
from spark_mq.commands.certs import make_certs
from spark_mq.common.config import NamesrvConfig
from spark_mq.common.errors import ConfigError
from spark_mq.common.tls import client_context, peer_context, server_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs")
    make_certs(out, [], [])
    return out


def served(certs, cert="server.pem", key="server.key", **more) -> NamesrvConfig:
    return NamesrvConfig(tls_server_mode="enforcing", tls_server_cert_path=str(certs / cert),
                         tls_server_key_path=str(certs / key), **more)


def test_server_and_client_contexts_need_tls_1_2_and_check_as_configured(certs):
    ctx = server_context(served(certs, tls_server_need_client_auth="require",
                                tls_server_trust_cert_path=str(certs / "ca.pem")))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.verify_mode == ssl.CERT_REQUIRED
    assert server_context(NamesrvConfig()) is None  # disabled
    dial = client_context(str(certs / "ca.pem"))
    assert dial.check_hostname and dial.verify_mode == ssl.CERT_REQUIRED
    assert peer_context(NamesrvConfig()) is None  # tls.enable off
    assert not client_context(verify_server=False).check_hostname


@pytest.mark.parametrize(("config", "message"), [
    (dict(cert="missing.pem"), r"tls\.server\.certPath=.*missing\.pem: no such file"),
    (dict(key="client.key"), r"tls\.server\.keyPath=.*client\.key is not the key of tls\.server\.certPath="),
    (dict(cert="ca.key"), r"tls\.server\.certPath=.*ca\.key / tls\.server\.keyPath=.*: not a PEM certificate"),
    (dict(tls_server_need_client_auth="require"), r"need\.client\.auth=require needs tls\.server\.trustCertPath"),
    (dict(tls_server_need_client_auth="optional", tls_server_trust_cert_path="/nowhere/ca.pem"),
     r"tls\.server\.trustCertPath=/nowhere/ca\.pem: no such file"),
])
def test_a_file_that_cannot_serve_is_a_config_error_naming_key_and_file(certs, config, message):
    with pytest.raises(ConfigError, match=message):
        server_context(served(certs, **config))


def test_client_side_errors_name_the_setting(certs):
    with pytest.raises(ConfigError, match=r"tls\.client\.certPath and tls\.client\.keyPath go together"):
        client_context(str(certs / "ca.pem"), str(certs / "client.pem"))
    with pytest.raises(ConfigError, match=r"tls_trust_cert_path \(--tls-ca\)=/nowhere\.pem: no such file"):
        ClientConfig("127.0.0.1:9876", tls_enable=True, tls_trust_cert_path="/nowhere.pem").ssl_context()
    with pytest.raises(ConfigError, match="tls_enable is off"):
        ClientConfig("127.0.0.1:9876", tls_trust_cert_path=str(certs / "ca.pem"))
    assert ClientConfig("127.0.0.1:9876").ssl_context() is None
