"""What the client commands share: the --namesrv and --tls options, the account (--access-key/--secret-key),
time parsing, console and JSON output.

The account signs every request (RocketMQ's ACL). Flags win over the environment variables
``SPARK_MQ_ACCESS_KEY``/``SPARK_MQ_SECRET_KEY``; the environment keeps the secret out of the shell history
and ``ps``. The secret is never printed, logged or put in an error text.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from datetime import datetime

from spark_mq.client.config import (
    ACCESS_KEY_ENV,
    SECRET_KEY_ENV,
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_ENV,
    TLS_KEY_ENV,
    open_api,
)
from spark_mq.common.errors import ConfigError

NAMESRV_ENV = "SPARK_MQ_NAMESRV"
DEFAULT_NAMESRV = "127.0.0.1:9876"


def add_namesrv(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namesrv", default=os.environ.get(NAMESRV_ENV, DEFAULT_NAMESRV),
                        help=f"NameServer address(es), ';'-separated (default: ${NAMESRV_ENV} or {DEFAULT_NAMESRV})")


def add_tls(parser: argparse.ArgumentParser) -> None:
    """--tls and the certificates (or their environment variables): any certificate given implies --tls."""
    parser.add_argument("--tls", action="store_true", default=os.environ.get(TLS_ENV, "") in ("1", "true"),
                        help=f"connect over TLS (default: ${TLS_ENV}=1; implied by --tls-ca/--tls-cert)")
    parser.add_argument("--tls-ca", default=os.environ.get(TLS_CA_ENV, ""),
                        help=f"PEM CA certificate(s) the servers' certificates are checked against (default: "
                             f"${TLS_CA_ENV}, else the system's CAs)")
    parser.add_argument("--tls-cert", default=os.environ.get(TLS_CERT_ENV, ""),
                        help=f"PEM client certificate, for servers requiring one (default: ${TLS_CERT_ENV})")
    parser.add_argument("--tls-key", default=os.environ.get(TLS_KEY_ENV, ""),
                        help=f"PEM private key of --tls-cert (default: ${TLS_KEY_ENV})")


def add_credentials(parser: argparse.ArgumentParser) -> None:
    """--access-key/--secret-key: the account requests are signed with (ACL); neither has a default shown."""
    group = parser.add_argument_group("account (servers with aclEnable)", "requests are signed with this account of "
                                      "the servers' plain_acl.yml; the secret is never echoed or logged")
    group.add_argument("--access-key", metavar="KEY", help=f"the account's accessKey (default: ${ACCESS_KEY_ENV})")
    group.add_argument("--secret-key", metavar="SECRET",
                       help=f"its secretKey (default: ${SECRET_KEY_ENV}, which keeps it out of the shell history "
                            "and ps)")


def credentials_of(args: argparse.Namespace) -> tuple[str, str]:
    """(access key, secret key) from the flags, else the environment; ('', '') for none."""
    access = getattr(args, "access_key", None) or os.environ.get(ACCESS_KEY_ENV, "")
    secret = getattr(args, "secret_key", None) or os.environ.get(SECRET_KEY_ENV, "")
    if bool(access) != bool(secret):
        given, missing = ("--access-key", "--secret-key") if access else ("--secret-key", "--access-key")
        raise ConfigError(f"{given} (or its environment variable) is given without {missing}: give both "
                          f"(or ${ACCESS_KEY_ENV} and ${SECRET_KEY_ENV}), or neither")
    return access, secret


def add_command(sub: argparse._SubParsersAction, name: str, run, *, help: str,
                description: str) -> argparse.ArgumentParser:
    """The subcommand ``name`` of ``sub``, talking to the NameServers (``--namesrv``, listed first) and
    carried out by ``run(args)``; the caller adds its own options."""
    parser = sub.add_parser(name, help=help, description=description)
    add_namesrv(parser)
    add_tls(parser)
    add_credentials(parser)
    parser.set_defaults(func=run)
    return parser


def client_config(args: argparse.Namespace, **overrides: object):
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.config import ClientConfig

    access_key, secret_key = credentials_of(args)
    return ClientConfig(namesrv_addr=args.namesrv, tls_enable=bool(args.tls or args.tls_ca or args.tls_cert),
                        tls_trust_cert_path=args.tls_ca, tls_cert_path=args.tls_cert, tls_key_path=args.tls_key,
                        access_key=access_key, secret_key=secret_key, **overrides)


def client_api(args: argparse.Namespace, timeout: float | None = None):
    """A ``SyncMQClientAPI`` with the command's TLS and account (``timeout``: the client config's by default)."""
    return open_api(client_config(args), timeout)


def parse_time_ms(text: str, what: str = "time") -> int:
    """Milliseconds since the epoch from ``text``: an integer (ms) or an ISO 8601 time (local time
    when it has no offset: ``2024-05-01T12:00:00``, ``2024-05-01 12:00:00.250+02:00``)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ConfigError(f"{what} {text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
                          f"such as 2024-05-01T12:00:00") from None
    return int(when.timestamp() * 1000)


def format_ms(ms: int | None) -> str:
    """Local ISO time of ``ms`` (to the millisecond), '-' for none."""
    if not ms or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def console():
    """A rich console on stdout, 200 columns wide when stdout is not a terminal (so pipes and tests
    get whole tables)."""
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def message_json(m, msg_id: str | None = None) -> str:
    """One JSON line for a StoredMessage: body as UTF-8 text, or base64 with ``body_base64: true``."""
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.common.message_id import offset_msg_id

    offset_id = offset_msg_id(m.store_host, m.physical_offset)
    try:
        body, b64 = m.body.decode("utf-8"), False
    except UnicodeDecodeError:
        body, b64 = base64.b64encode(m.body).decode("ascii"), True
    record = {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": msg_id or m.properties.get("UNIQ_KEY") or offset_id,
        "offset_msg_id": offset_id,
        "keys": m.keys,
        "tags": m.tags,
        "properties": m.properties,
        "body": body,
        "body_base64": b64,
        "store_timestamp": m.store_timestamp,
        "born_timestamp": m.born_timestamp,
    }
    return json.dumps(record, ensure_ascii=False)


def body_preview(body: bytes, limit: int = 60) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes, not UTF-8>"
    return text if len(text) <= limit else text[: limit - 1] + "…"
