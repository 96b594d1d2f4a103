"""Remote address patterns of plain_acl.yml (RocketMQ's ``RemoteAddressStrategyFactory``), parsed once.

The forms RocketMQ accepts, IPv4 and IPv6 alike:

==========================  ===================================================================
``*`` (``*.*.*.*``,          every address
``*:*:*:*:*:*:*:*``)
``192.168.0.1``, ``::1``     one address
``192.168.0.1,10.0.0.2``     any of a list of addresses
``192.168.0.{1,2}``          the prefix followed by any of the listed last parts
``192.168.*.*``              ``*`` for a whole part: every part after it must be ``*`` too
``192.168.1.1-5``            a range in one part (IPv6: hex, ``fe80::1-ff``); ``*`` after it
==========================  ===================================================================

Every form becomes a tuple of alternatives, each one range per part (4 bytes of IPv4, 8 groups of
IPv6), so matching a peer is one comparison per part. A peer reached over an IPv4-mapped IPv6
address (``::ffff:10.0.0.1``, a dual-stack listener) matches as the IPv4 address it is. Stricter than
RocketMQ where RocketMQ silently ignores a part: ``192.168.1-5.7`` (RocketMQ never looks at the ``7``)
and three-part ``192.168.*`` are errors here, named.

Thread-safety: patterns are immutable; ``peer_parts`` caches its parse (thread-safe).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache

from spark_mq.common.errors import ConfigError

ANY_ADDRESS = frozenset(("*", "*.*.*.*", "*:*:*:*:*:*:*:*"))
V4_PARTS, V6_PARTS = 4, 8
_V4_MAX, _V6_MAX = 0xFF, 0xFFFF
_BRACES = re.compile(r"\A(?P<prefix>[^{}]*)\{(?P<items>[^{}]*)\}\Z")
_DECIMAL_PART = re.compile(r"[0-9]{1,3}\Z")
_HEX_GROUP = re.compile(r"[0-9a-fA-F]{1,4}\Z")
PEER_CACHE = 4096  # peer hosts whose parse is kept (each new connection's host is looked up again)

Part = tuple[int, int]  # the lowest and highest value a part may take
Alternative = tuple[int, tuple[Part, ...]]  # (IP version, a range per part)


@dataclass(frozen=True)
class AddressPattern:
    """One whiteRemoteAddress (or global white address) as written, and what it matches."""

    text: str
    alternatives: tuple[Alternative, ...]  # empty with ``everyone``
    everyone: bool = False

    def matches(self, host: str) -> bool:
        """Whether the peer ``host`` (an IP address as the socket reports it) is one this pattern names."""
        if self.everyone:
            return True
        peer = peer_parts(host)
        if peer is None:
            return False
        version, values = peer
        return any(v == version and all(lo <= x <= hi for x, (lo, hi) in zip(values, parts, strict=True))
                   for v, parts in self.alternatives)


def parse_address_pattern(text: str) -> AddressPattern:
    """``text`` as a pattern; ``ConfigError`` saying what is wrong with it."""
    text = text.strip()
    if text in ANY_ADDRESS:
        return AddressPattern(text, (), everyone=True)
    if not text:
        raise ConfigError("an empty address pattern (leave the key out, or write * for every address)")
    braces = _BRACES.match(text)
    if braces:
        items = [i.strip() for i in braces["items"].split(",")]
        if not all(items):
            raise ConfigError(f"{text!r}: an empty entry between the braces")
        return AddressPattern(text, tuple(_one_address(braces["prefix"] + i, text) for i in items))
    if "," in text:
        items = [i.strip() for i in text.split(",")]
        if not all(items):
            raise ConfigError(f"{text!r}: an empty entry in the list")
        return AddressPattern(text, tuple(_one_address(i, text) for i in items))
    if "*" in text or "-" in text:
        return AddressPattern(text, (_ranged(text),))
    return AddressPattern(text, (_one_address(text, text),))


@lru_cache(maxsize=PEER_CACHE)
def peer_parts(host: str) -> tuple[int, tuple[int, ...]] | None:
    """(version, parts) of a peer's address; an IPv4-mapped IPv6 address as its IPv4; None if not an IP."""
    try:
        addr = ipaddress.ip_address(host.partition("%")[0])  # an IPv6 zone (fe80::1%eth0) names no address
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return _parts_of(addr)


def _parts_of(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[int, tuple[int, ...]]:
    raw = addr.packed
    if addr.version == 4:
        return 4, tuple(raw)
    return 6, tuple(int.from_bytes(raw[i:i + 2], "big") for i in range(0, 16, 2))


def _one_address(text: str, pattern: str) -> Alternative:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(f"{pattern!r}: {text!r} is not an IPv4 or IPv6 address") from None
    version, values = _parts_of(addr)
    return version, tuple((v, v) for v in values)


def _ranged(text: str) -> Alternative:
    """``192.168.*.*``, ``10.0.1-9.*``, ``fe80::*``: fixed parts, then one ``*`` or range, then ``*``."""
    version, raw = (6, _v6_parts(text)) if ":" in text else (4, text.split("."))
    count, top, base = (V6_PARTS, _V6_MAX, 16) if version == 6 else (V4_PARTS, _V4_MAX, 10)
    if len(raw) != count:
        raise ConfigError(f"{text!r}: an IPv{version} pattern has {count} parts, this one has {len(raw)} "
                          f"(examples: {'fe80::*, 2001:db8::1-ff' if version == 6 else '192.168.0.*, 192.168.1.1-5'})")
    parts: list[Part] = []
    ranged = False
    for part in (p.strip() for p in raw):
        if part == "*":
            parts.append((0, top))
            ranged = True
        elif ranged:
            raise ConfigError(f"{text!r}: after a * or a range every part must be *, not {part!r}")
        elif "-" in part:
            lo, _, hi = part.partition("-")
            low, high = _number(lo, base, top, text), _number(hi, base, top, text)
            if low > high:
                raise ConfigError(f"{text!r}: the range {part!r} runs backwards")
            parts.append((low, high))
            ranged = True
        else:
            value = _number(part, base, top, text)
            parts.append((value, value))
    return version, tuple(parts)


def _v6_parts(text: str) -> list[str]:
    """The 8 groups of an IPv6 pattern, a ``::`` expanded to the zero groups it stands for."""
    if text.count("::") > 1:
        raise ConfigError(f"{text!r}: '::' may appear once")
    if "::" not in text:
        return text.split(":")
    head, tail = text.split("::")
    left, right = head.split(":") if head else [], tail.split(":") if tail else []
    missing = V6_PARTS - len(left) - len(right)
    if missing < 1:
        raise ConfigError(f"{text!r}: '::' stands for no group here")
    return [*left, *(["0"] * missing), *right]


def _number(part: str, base: int, top: int, pattern: str) -> int:
    digits = _HEX_GROUP if base == 16 else _DECIMAL_PART
    if not digits.match(part) or int(part, base) > top:
        kind = "a hex group 0-ffff" if base == 16 else "a number 0-255"
        raise ConfigError(f"{pattern!r}: {part!r} is not {kind}")
    return int(part, base)
