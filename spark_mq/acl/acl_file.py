"""The plain_acl.yml a server checks requests against, reloaded when it changes (no restart).

RocketMQ watches its file with a ``FileWatchService`` thread; here the server's own event loop polls
it (``reload``, every second: ``gate.py``): a ``stat`` per poll, and only when its size, mtime or
inode moved a read and a hash, so that touching the file without changing it reloads nothing. A new
version that parses replaces the rules whole, between two requests; one that does not (a syntax error,
a bad pattern, a deleted file) leaves the previous rules in force and logs one ERROR line naming the
file and the problem, once per version of the file.

At start the file must be there and valid (``AclFile.open`` raises ``ConfigError`` saying what to do):
a server with aclEnable never serves without rules.

Thread-safety: one event loop; ``rules`` may be read at any time and is replaced atomically.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from spark_mq.acl.plain_acl import PlainAcl, parse_plain_acl
from spark_mq.common.errors import ConfigError

log = logging.getLogger(__name__)

Fingerprint = tuple[int, int, int]  # (size, mtime_ns, inode)


class AclFile:
    """The current rules of one plain_acl.yml; ``reload`` picks up a changed file."""

    def __init__(self, path: Path, rules: PlainAcl, fingerprint: Fingerprint | None, digest: str) -> None:
        self.path = path
        self.rules = rules
        self._fingerprint = fingerprint
        self._digest = digest  # of the version in force, or of the last one refused

    @classmethod
    def open(cls, path: str | Path) -> AclFile:
        """The rules of ``path`` now; ``ConfigError`` (one line: what is wrong, what to do) if missing or invalid."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"aclEnable=true but the ACL file {p} does not exist: write the accounts there "
                              "(conf/plain_acl.yml is an example) or point aclFile at it")
        fingerprint = _fingerprint(p)
        try:
            data = p.read_bytes()
            rules = parse_plain_acl(data.decode("utf-8"), str(p))
        except OSError as e:
            raise ConfigError(f"aclEnable=true but the ACL file {p} cannot be read: {e.strerror}") from None
        except (ConfigError, UnicodeDecodeError) as e:
            raise ConfigError(f"aclEnable=true but {_problem(e, p)} (fix the file, then start again)") from None
        log.info("ACL: %d accounts, %d global white addresses from %s", len(rules.accounts), len(rules.global_white),
                 p)
        return cls(p, rules, fingerprint, _digest(data))

    def reload(self) -> bool:
        """Take a changed file's rules if it parses; True when the rules changed."""
        fingerprint = _fingerprint(self.path)
        if fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        try:
            data = self.path.read_bytes()
        except OSError as e:
            return self._refuse(f"cannot read it: {e.strerror}", f"unreadable:{e.errno}")
        digest = _digest(data)
        if digest == self._digest:
            return False
        try:
            rules = parse_plain_acl(data.decode("utf-8"), str(self.path))
        except (ConfigError, UnicodeDecodeError) as e:
            return self._refuse(_problem(e, self.path), digest)
        self.rules, self._digest = rules, digest
        log.info("ACL: reloaded %s: %d accounts, %d global white addresses", self.path, len(rules.accounts),
                 len(rules.global_white))
        return True

    def _refuse(self, problem: str, digest: str) -> bool:
        """Keep the rules in force; one ERROR line per refused version."""
        if digest != self._digest:
            self._digest = digest
            log.error("ACL: %s changed but is not valid, the previous rules stay in force: %s", self.path, problem)
        return False


def _problem(e: ConfigError | UnicodeDecodeError, path: Path) -> str:
    """What is wrong with the file (a ConfigError already names it)."""
    return str(e) if isinstance(e, ConfigError) else f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"


def _fingerprint(path: Path) -> Fingerprint | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
