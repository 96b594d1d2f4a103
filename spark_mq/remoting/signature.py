"""RocketMQ's request signature (its ``AclClientRPCHook`` and ``AclUtils``), one definition for both ends.

A client with credentials puts ``AccessKey`` in a request's extFields and ``Signature``: the base64
HmacSHA1, keyed by its secret key, of every extFields *value* in the order of their sorted keys
(``Signature`` itself and ``_UNIQUE_KEY_QUERY`` left out), UTF-8, followed by the body's bytes. The
C++ 4.x client adds ``OnsChannel`` before signing, so whatever is in extFields is what is signed; the
server recomputes the same bytes from the frame it decoded and compares. The secret never travels.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import field

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # RocketMQ's MixAll.UNIQUE_MSG_QUERY_FLAG: never signed
_NOT_SIGNED = frozenset((SIGNATURE, UNIQUE_KEY_QUERY))


def signed_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    """The bytes a signature covers: the values in sorted-key order, then the body."""
    text = "".join(ext_fields[k] for k in sorted(ext_fields) if k not in _NOT_SIGNED)
    return text.encode() + body


def signature(secret_key: str, ext_fields: dict[str, str], body: bytes) -> str:
    """Base64 HmacSHA1 of :func:`signed_content` under ``secret_key`` (RocketMQ's ``AclUtils.calSignature``),
    the body fed to the MAC as it is rather than copied after the header values (a send's body may be MiBs)."""
    mac = hmac.new(secret_key.encode(), signed_content(ext_fields, b""), hashlib.sha1)
    mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_matches(secret_key: str, ext_fields: dict[str, str], body: bytes) -> bool:
    """Whether the request's ``Signature`` is the one ``secret_key`` gives (a constant-time comparison)."""
    given = ext_fields.get(SIGNATURE)
    if not given:
        return False
    return hmac.compare_digest(given.encode(), signature(secret_key, ext_fields, body).encode())


@lazy_dataclass(frozen=True)
class Credentials(LazyDataclass):
    """An account's keys; ``repr`` never shows the secret (it lands in logs and tracebacks)."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")

    def sign(self, ext_fields: dict[str, str], body: bytes) -> None:
        """Add ``AccessKey`` and ``Signature`` to ``ext_fields`` in place (what the client hook does)."""
        ext_fields[ACCESS_KEY] = self.access_key
        ext_fields[SIGNATURE] = signature(self.secret_key, ext_fields, body)
