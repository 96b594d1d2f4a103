"""The accounts of a plain_acl.yml (RocketMQ 4.x's format, ``PlainPermissionManager``), parsed and checked.

::

    globalWhiteRemoteAddresses:      # requests from these addresses pass unchecked
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress:          # set: the account is usable from these addresses only
        admin: false                 # admin requests (topic create/delete, registration...)
        defaultTopicPerm: DENY       # for a topic not in topicPerms (absent: DENY)
        defaultGroupPerm: SUB        # for a group not in groupPerms (absent: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]

A permission is ``DENY``, ``PUB``, ``SUB`` or ``PUB|SUB`` (``SUB|PUB``), RocketMQ's ``Permission`` bits.
Scalars are read as text (YAML's BaseLoader): ``secretKey: 012345`` is the text ``012345``, never the
octal number a typed loader would make of it. Stricter than RocketMQ, which turns a mistake into DENY or
ignores it: an unknown key, a permission that is not one of the above, a malformed address pattern, a
duplicate accessKey or a key of 6 characters or fewer (RocketMQ's minimum) is a ``ConfigError`` naming
the file, the line and the account.

Thread-safety: the parsed rules are immutable; a reload replaces them whole (``acl_file.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntFlag
from typing import Any

from spark_mq.acl.remote_address import AddressPattern, parse_address_pattern
from spark_mq.common.errors import ConfigError

GLOBAL_WHITE = "globalWhiteRemoteAddresses"
ACCOUNTS = "accounts"
IGNORED_TOP_LEVEL = frozenset(("dataVersion",))  # RocketMQ's updateAclConfig writes it; it names no rule
KEY_MIN_LENGTH = 7  # RocketMQ's AclConstants: accessKey and secretKey longer than 6 characters
_TRUE, _FALSE = frozenset(("true", "yes", "on")), frozenset(("false", "no", "off"))  # YAML 1.1 booleans
_NOT_IN_KEY = frozenset(" \t\"'=")  # an accessKey lands in key=value audit lines as it is
_LINE = object()  # the key under which a mapping keeps the line it starts on


class Perm(IntFlag):
    """RocketMQ's ``Permission`` bits: DENY wins over anything; ANY is a need (PUB or SUB will do)."""

    DENY = 1
    ANY = 1 << 1
    PUB = 1 << 2
    SUB = 1 << 3

    def allows(self, owned: Perm) -> bool:
        """Whether ``owned`` grants this need (RocketMQ's ``checkPermission``). On plain ints: run for every
        checked request, and the flag operators build enum members."""
        need, own = int(self), int(owned)
        if own & _DENY:
            return False
        if need & _ANY:
            return bool(own & _PUB_OR_SUB)
        return bool(need & own)

    @property
    def label(self) -> str:
        """As plain_acl.yml writes it (``PUB|SUB``); ``ANY`` reads "PUB or SUB"."""
        if self & Perm.ANY:
            return "PUB or SUB"
        return "|".join(p.name for p in (Perm.DENY, Perm.PUB, Perm.SUB) if self & p and p.name)


_DENY, _ANY, _PUB_OR_SUB = int(Perm.DENY), int(Perm.ANY), int(Perm.PUB | Perm.SUB)
PERMS = {"DENY": Perm.DENY, "PUB": Perm.PUB, "SUB": Perm.SUB, "PUB|SUB": Perm.PUB | Perm.SUB,
         "SUB|PUB": Perm.PUB | Perm.SUB}


@dataclass(frozen=True)
class Account:
    """One entry of ``accounts``; ``repr`` never shows the secret."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern | None = None
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)

    @property
    def has_every_resource(self) -> bool:
        """An admin listing no perms has every topic and group (RocketMQ: ``ownedPermMap == null && admin``)."""
        return self.admin and not self.topic_perms and not self.group_perms

    def topic_perm(self, topic: str) -> Perm:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        return self.group_perms.get(group, self.default_group_perm)


@dataclass(frozen=True)
class PlainAcl:
    """What one plain_acl.yml says: the global white addresses and the accounts by accessKey."""

    source: str  # the file, for messages
    global_white: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)


def parse_plain_acl(text: str, source: str) -> PlainAcl:
    """The rules of a plain_acl.yml's ``text``; ``ConfigError`` naming ``source``, the line and the account."""
    doc = _load_yaml(text, source)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with {GLOBAL_WHITE} and {ACCOUNTS} at the top")
    _reject_unknown(doc, (GLOBAL_WHITE, ACCOUNTS, *IGNORED_TOP_LEVEL), f"{source}: line {doc.get(_LINE, 1)}")
    white = tuple(_white_patterns(doc.get(GLOBAL_WHITE), source))
    accounts: dict[str, Account] = {}
    entries = doc.get(ACCOUNTS) or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: {ACCOUNTS} must be a list of accounts (each starting with '- accessKey:')")
    for index, entry in enumerate(entries):
        where = f"{source}: line {entry.get(_LINE, '?') if isinstance(entry, dict) else '?'}, {ACCOUNTS}[{index}]"
        account = _account(entry, where)
        if account.access_key in accounts:
            raise ConfigError(f"{where}: accessKey {account.access_key!r} is given twice")
        accounts[account.access_key] = account
    return PlainAcl(source, white, accounts)


def _load_yaml(text: str, source: str) -> Any:
    """The document, every scalar as text and each mapping remembering its line (for error messages)."""
    # lazy import: PyYAML only where an ACL file is read (aclEnable), not on every server's start path
    import yaml

    class TextLoader(yaml.BaseLoader):  # a BaseLoader builds no objects: every scalar is text
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
            mapping = super().construct_mapping(node, deep=True)
            mapping[_LINE] = node.start_mark.line + 1
            return mapping

    try:
        return yaml.load(text, Loader=TextLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"{source}: not valid YAML: {where}{problem}") from None


def _reject_unknown(mapping: dict[Any, Any], known: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key is not _LINE and key not in known:
            # lazy import: only for this message
            import difflib

            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"{where}: unknown key {key!r}: {hint}")


def _white_patterns(value: Any, source: str) -> list[AddressPattern]:
    if value is None or value == "":
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{source}: {GLOBAL_WHITE} must be a list of address patterns")
    patterns = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{source}: {GLOBAL_WHITE}[{index}] must be an address pattern, not a {_kind(item)}")
        if item.strip():
            try:
                patterns.append(parse_address_pattern(item))
            except ConfigError as e:
                raise ConfigError(f"{source}: {GLOBAL_WHITE}[{index}]: {e}") from None
    return patterns


_ACCOUNT_KEYS = ("accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm", "defaultGroupPerm",
                 "topicPerms", "groupPerms")


def _account(entry: Any, where: str) -> Account:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: an account is a mapping (accessKey: ..., secretKey: ...), not a {_kind(entry)}")
    access_key = _text(entry, "accessKey", where)
    where = f"{where} (accessKey {access_key!r})"
    _reject_unknown(entry, _ACCOUNT_KEYS, where)
    secret_key = _text(entry, "secretKey", where)
    for name, value in (("accessKey", access_key), ("secretKey", secret_key)):
        if len(value) < KEY_MIN_LENGTH:
            raise ConfigError(f"{where}: {name} must be at least {KEY_MIN_LENGTH} characters (RocketMQ's minimum)")
    if any(c in _NOT_IN_KEY or not c.isprintable() for c in access_key):
        raise ConfigError(f"{where}: accessKey may not hold spaces, quotes or '=' (it is written in audit lines)")
    white = entry.get("whiteRemoteAddress")
    if white is not None and not isinstance(white, str):
        raise ConfigError(f"{where}: whiteRemoteAddress must be one address pattern, not a {_kind(white)}")
    try:
        pattern = parse_address_pattern(white) if white and white.strip() else None
    except ConfigError as e:
        raise ConfigError(f"{where}: whiteRemoteAddress {e}") from None
    return Account(access_key, secret_key, pattern, _boolean(entry.get("admin"), "admin", where),
                   _perm(entry.get("defaultTopicPerm"), "defaultTopicPerm", where),
                   _perm(entry.get("defaultGroupPerm"), "defaultGroupPerm", where),
                   _resource_perms(entry.get("topicPerms"), "topicPerms", where),
                   _resource_perms(entry.get("groupPerms"), "groupPerms", where))


def _text(entry: dict[Any, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key} is missing or empty")
    return value.strip()


def _boolean(value: Any, key: str, where: str) -> bool:
    if value is None or value == "":
        return False
    low = value.lower() if isinstance(value, str) else None
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise ConfigError(f"{where}: {key} must be true or false, not {value!r}")


def _perm(value: Any, key: str, where: str) -> Perm:
    if value is None or value == "":
        return Perm.DENY  # RocketMQ's parsePermFromString(null)
    perm = PERMS.get(value.replace(" ", "")) if isinstance(value, str) else None
    if perm is None:
        raise ConfigError(f"{where}: {key} {value!r} is not one of {', '.join(PERMS)}")
    return perm


def _resource_perms(value: Any, key: str, where: str) -> dict[str, Perm]:
    if value is None or value == "":
        return {}
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {key} must be a list of NAME=PERM entries")
    perms: dict[str, Perm] = {}
    for item in value:
        name, eq, perm = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not eq or not name.strip() or not perm.strip():
            raise ConfigError(f"{where}: {key} entry {item!r} is not NAME=PERM (e.g. topicA=PUB|SUB)")
        perms[name.strip()] = _perm(perm.strip(), f"{key} entry {item!r}:", where)
    return perms


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list"}.get(type(value), "text")
