"""Shared pieces of the ACL integration tests: one plain_acl.yml with an account per role, signed requests,
and servers started with aclEnable=true (``tests/servers.py`` processes)."""

from __future__ import annotations

from pathlib import Path

from servers import NAMESRV_READY, ServerProcess

from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.signature import Credentials

TOPIC, GROUP = "AclTopic", "AclGroup"
ADMIN = Credentials("acl_admin_key", "acl_admin_secret")
PUBLISHER = Credentials("acl_pub_key", "acl_pub_secret")  # PUB on TOPIC, nothing else
SUBSCRIBER = Credentials("acl_sub_key", "acl_sub_secret")  # SUB on TOPIC and GROUP, nothing else
DENIED = Credentials("acl_denied_key", "acl_denied_secret")  # a valid account with no permission at all
ACCOUNTS: dict[str, Credentials | None] = {"admin": ADMIN, "publisher": PUBLISHER, "subscriber": SUBSCRIBER,
                                           "denied": DENIED, "unsigned": None}
# what each role may do, as the test's own model (not the server's code): kind -> name -> perms
OWNED: dict[str, dict[str, dict[str, set[str]]]] = {
    "publisher": {"topic": {TOPIC: {"PUB"}}, "group": {}},
    "subscriber": {"topic": {TOPIC: {"SUB"}}, "group": {GROUP: {"SUB"}}},
    "denied": {"topic": {}, "group": {}},
}

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {PUBLISHER.access_key}
    secretKey: {PUBLISHER.secret_key}
    topicPerms: [{TOPIC}=PUB]
  - accessKey: {SUBSCRIBER.access_key}
    secretKey: {SUBSCRIBER.secret_key}
    topicPerms: [{TOPIC}=SUB]
    groupPerms: [{GROUP}=SUB]
  - accessKey: {DENIED.access_key}
    secretKey: {DENIED.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""


def write_acl(root: Path, text: str = PLAIN_ACL) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "plain_acl.yml"
    path.write_text(text)
    return path


def acl_conf(acl_file: Path) -> str:
    """The config lines that turn the ACL on with ``acl_file``."""
    return f"aclEnable=true\naclFile={acl_file}\n"


def start_acl_namesrv(root: Path, acl_file: Path) -> ServerProcess:
    """A NameServer with aclEnable=true on a free port (log: root/namesrv.log)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "namesrv.conf").write_text(acl_conf(acl_file))
    return ServerProcess(["namesrv", "-c", str(root / "namesrv.conf"), "--port", "0"], root / "namesrv.log",
                         NAMESRV_READY, verbose=False)


def request(code: int, fields: dict[str, object] | None = None, body: bytes = b"",
            credentials: Credentials | None = None) -> RemotingCommand:
    """A request, signed by ``credentials`` (unsigned without)."""
    cmd = RemotingCommand.request(code, fields, body)
    if credentials is not None:
        credentials.sign(cmd.ext_fields, cmd.body)
    return cmd
