"""TLS on every port (RocketMQ's ``tls.*`` keys): the ``ssl.SSLContext`` a server and a dialing side
build from their settings, what a failed handshake means in words, and the accept step that lets one
port serve TLS, plaintext or both.

``tls.server.mode``: ``disabled`` serves plaintext as before; ``enforcing`` TLS only (a plaintext
client is refused, the caller says how); ``permissive`` both on the same port, told apart by the
first byte a client sends: a TLS ClientHello starts with the handshake record type 0x16, which a
remoting frame (its first byte is that of its length, below maxFrameSize < 0x16000000) and an HA
report (an offset below 2^60, or a negative hello word) never do. The server looks at that byte
without taking it from the socket (``MSG_PEEK`` on a duplicate descriptor, reading paused
meanwhile), then upgrades the connection in place (``StreamWriter.start_tls``), so connection limits
and everything after the accept stay the same for both kinds.

TLS 1.2 at least, both ways. A server asks for a client certificate per
``tls.server.need.client.auth`` (none, optional, require), checked against
``tls.server.trustCertPath``; a dialing side checks the server's certificate and host name against
``tls.client.trustCertPath`` (the system's CAs when empty) unless ``tls.client.authServer=false``.
A file that is missing, unreadable, not PEM, or a key that does not belong to its certificate is a
``ConfigError`` naming the key and the file, at start rather than at the first connection.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
from pathlib import Path

from spark_mq.common.config import DOTTED_KEYS, SecurityConfig
from spark_mq.common.errors import ConfigError

TLS_HANDSHAKE_RECORD = 0x16  # the first byte of every TLS ClientHello
HANDSHAKE_TIMEOUT_S = 10.0  # for a new connection's first byte and its TLS handshake
MIN_VERSION = ssl.TLSVersion.TLSv1_2
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}
SERVER_KEYS = tuple(DOTTED_KEYS[f"tls_server_{k}"] for k in ("trust_cert_path", "cert_path", "key_path"))
CLIENT_KEYS = tuple(DOTTED_KEYS[f"tls_client_{k}"] for k in ("trust_cert_path", "cert_path", "key_path"))
CLIENT_CERT_REFUSED = ("a TLS server does that when it refuses our client certificate or its absence (does it "
                       "require one? tls.client.certPath and keyPath, --tls-cert and --tls-key)")
# what an OpenSSL reason seen while dialing usually means, for the error a user reads
HANDSHAKE_HINTS = {
    "WRONG_VERSION_NUMBER": "the server does not speak TLS on this port (its tls.server.mode is disabled?)",
    "UNEXPECTED_EOF_WHILE_READING": "the server closed the connection (no TLS on this port, or it refused us)",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate (tls.client.certPath and "
                                         "keyPath, or --tls-cert and --tls-key)",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server refused the handshake (does it require a client certificate?)",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust our client certificate's CA",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused our client certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the server says our client certificate has expired",
}
# what a refused server certificate usually means, by OpenSSL's verify message
TRUST_OPTIONS = "tls.client.trustCertPath, --tls-ca, or the Spark option tlsTrustCertPath"
VERIFY_HINTS = {
    "unable to get local issuer certificate": f"its CA is not among the trusted ones ({TRUST_OPTIONS})",
    "self-signed certificate": f"it signed itself and is not among the trusted ones ({TRUST_OPTIONS})",
    "self-signed certificate in certificate chain": f"its CA is not among the trusted ones ({TRUST_OPTIONS})",
}


def _readable(key: str, path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{key}={path}: no such file (scripts/make_certs.py makes a throwaway set)")
    if not os.access(p, os.R_OK):
        raise ConfigError(f"{key}={path}: not readable by this process (user {os.getuid()})")
    return str(p)


def _trust(ctx: ssl.SSLContext, key: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=_readable(key, path))
    except ssl.SSLError as e:
        raise ConfigError(f"{key}={path}: not a PEM certificate ({e.reason or e})") from None


def _chain(ctx: ssl.SSLContext, cert_key: str, cert: str, key_key: str, key: str) -> None:
    cert_file, key_file = _readable(cert_key, cert), _readable(key_key, key)
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{key_key}={key} is not the key of {cert_key}={cert}: give the key the certificate "
                              "was made with") from None
        raise ConfigError(f"{cert_key}={cert} / {key_key}={key}: not a PEM certificate and its unencrypted PEM key "
                          f"({e.reason or e})") from None


def _context(purpose: int) -> ssl.SSLContext:
    if sys.version_info < (3, 11):  # StreamWriter.start_tls, for the accept step
        raise ConfigError("TLS needs Python 3.11 or later")
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = MIN_VERSION
    return ctx


def server_context(config: SecurityConfig) -> ssl.SSLContext | None:
    """The context of the ports ``config`` serves; None when ``tls.server.mode`` is disabled."""
    if config.tls_server_mode == "disabled":
        return None
    trust_key, cert_key, key_key = SERVER_KEYS
    ctx = _context(ssl.PROTOCOL_TLS_SERVER)
    _chain(ctx, cert_key, config.tls_server_cert_path, key_key, config.tls_server_key_path)
    ctx.verify_mode = CLIENT_AUTH_MODES[config.tls_server_need_client_auth]
    if config.tls_server_trust_cert_path:
        _trust(ctx, trust_key, config.tls_server_trust_cert_path)
    elif ctx.verify_mode != ssl.CERT_NONE:
        raise ConfigError(f"tls.server.need.client.auth={config.tls_server_need_client_auth} needs {trust_key}: the "
                          "CA certificates that client certificates are checked against")
    return ctx


def client_context(trust_cert_path: str = "", cert_path: str = "", key_path: str = "", verify_server: bool = True,
                   keys: tuple[str, str, str] = CLIENT_KEYS) -> ssl.SSLContext:
    """A dialing side's context: the server's certificate checked against ``trust_cert_path`` (the system's
    CAs when empty) and its host name, unless ``verify_server`` is false; ``cert_path``/``key_path``: our
    certificate for servers that ask for one. ``keys`` name the three settings in errors."""
    trust_key, cert_key, key_key = keys
    ctx = _context(ssl.PROTOCOL_TLS_CLIENT)
    if not verify_server:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif trust_cert_path:
        _trust(ctx, trust_key, trust_cert_path)
    else:
        ctx.load_default_certs()
    if cert_path or key_path:
        if not (cert_path and key_path):
            raise ConfigError(f"{cert_key} and {key_key} go together: give both or neither")
        _chain(ctx, cert_key, cert_path, key_key, key_path)
    return ctx


def peer_context(config: SecurityConfig) -> ssl.SSLContext | None:
    """The context a server process dials its peers with (NameServers, controllers, its master); None
    unless ``tls.enable``."""
    if not config.tls_enable:
        return None
    return client_context(config.tls_client_trust_cert_path, config.tls_client_cert_path,
                          config.tls_client_key_path, config.tls_client_auth_server)


def handshake_failure(e: BaseException) -> str:
    """Why a TLS handshake failed, in words (``certificate has expired``, ``Hostname mismatch...``)."""
    if isinstance(e, ssl.SSLCertVerificationError):
        hint = VERIFY_HINTS.get(e.verify_message)
        return f"the server's certificate is refused: {e.verify_message}" + (f": {hint}" if hint else "")
    if isinstance(e, ssl.SSLError):
        reason = e.reason or str(e)
        return f"TLS handshake failed ({reason}): {HANDSHAKE_HINTS[reason]}" if reason in HANDSHAKE_HINTS else \
            f"TLS handshake failed: {reason}"
    if isinstance(e, (ConnectionError, asyncio.IncompleteReadError)):
        return f"TLS handshake failed: the server closed the connection ({HANDSHAKE_HINTS['WRONG_VERSION_NUMBER']})"
    return f"TLS handshake failed: {e}"


async def _first_byte(writer: asyncio.StreamWriter, timeout: float) -> bytes:
    """The first byte the client sent, left in the socket (b"" if it closed first)."""
    loop = asyncio.get_running_loop()
    fd = writer.get_extra_info("socket").fileno()
    with socket.socket(fileno=os.dup(fd)) as peek:  # the transport owns ``fd`` in the selector
        peek.setblocking(False)
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(peek.fileno(), lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, timeout)
        finally:
            loop.remove_reader(peek.fileno())
        return peek.recv(1, socket.MSG_PEEK)


async def accept_tls(writer: asyncio.StreamWriter, context: ssl.SSLContext,
                     timeout: float = HANDSHAKE_TIMEOUT_S) -> bool:
    """Upgrade a just-accepted connection to TLS if its client starts a TLS handshake: True once it is
    TLS, False for a plaintext client (its bytes untouched, reading resumed). Must be the first thing an
    accept callback does (before it awaits anything), so that the transport has read nothing yet.
    Raises ``ssl.SSLError``/``OSError``/``TimeoutError`` for a failed handshake, ``ConnectionError`` for a
    client that closed without a byte."""
    transport = writer.transport
    transport.pause_reading()
    first = await _first_byte(writer, timeout)
    if not first:
        raise ConnectionResetError("closed before sending anything")
    if first[0] != TLS_HANDSHAKE_RECORD:
        transport.resume_reading()
        return False
    await writer.start_tls(context, ssl_handshake_timeout=timeout)
    return True
