"""The accounts of ``spark-mq dev --acl``: a ``plain_acl.yml`` (RocketMQ's format) with an admin account, which the
dev brokers and controller sign their own requests with, and a publisher/subscriber account for the user; fresh
random secrets at every start.

Both files are written mode 0600 (the owner only): the ACL file, and ``credentials.env``, which exports the user
account as ``SPARK_MQ_ACCESS_KEY``/``SPARK_MQ_SECRET_KEY`` (``source`` it for the CLI and the jobs). The
secrets are never logged: what the dev command prints names the files, not their contents.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

ADMIN_ACCESS_KEY = "sparkmq-admin"
USER_ACCESS_KEY = "sparkmq-user"
ACL_FILE = "plain_acl.yml"
CREDENTIALS_FILE = "credentials.env"
PRIVATE = 0o600
SECRET_BYTES = 24


@dataclass(frozen=True)
class DevAccounts:
    """Where the files are and the accounts' keys (the admin account is the servers' own)."""

    acl_file: Path
    credentials_file: Path
    admin_secret: str = field(repr=False)
    user_secret: str = field(repr=False)
    admin_access_key: str = ADMIN_ACCESS_KEY
    user_access_key: str = USER_ACCESS_KEY


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (an existing file is narrowed to 0600 first)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), PRIVATE)
        f.write(text)


def new_secret() -> str:
    """A fresh random secret key that never starts with ``-``: given on a command line (``--secret-key S``),
    such a secret would be read as an option and refused."""
    while (secret := secrets.token_urlsafe(SECRET_BYTES)).startswith("-"):
        pass
    return secret


def write_dev_accounts(directory: Path) -> DevAccounts:
    """A fresh ``plain_acl.yml`` and ``credentials.env`` in ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    admin_secret, user_secret = new_secret(), new_secret()
    acl = directory / ACL_FILE
    write_private(acl, f"""# by `spark-mq dev --acl` at every start (fresh secrets); RocketMQ's plain_acl.yml format
globalWhiteRemoteAddresses: []
accounts:
  # the dev servers' own account: registration, replication, controller (admin operations)
  - accessKey: {ADMIN_ACCESS_KEY}
    secretKey: {admin_secret}
    whiteRemoteAddress:
    admin: true
  # yours: send to and read from every topic, as any group
  - accessKey: {USER_ACCESS_KEY}
    secretKey: {user_secret}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
""")
    env = directory / CREDENTIALS_FILE
    write_private(env, f"export SPARK_MQ_ACCESS_KEY={USER_ACCESS_KEY}\nexport SPARK_MQ_SECRET_KEY={user_secret}\n")
    return DevAccounts(acl, env, admin_secret, user_secret)
