"""plain_acl.yml address patterns (acl/remote_address.py): every form RocketMQ accepts, IPv4 and IPv6, and the
mistakes it must name."""

from __future__ import annotations

import pytest

from spark_mq.acl.remote_address import parse_address_pattern
from spark_mq.common.errors import ConfigError


@pytest.mark.parametrize(("pattern", "inside", "outside"), [
    ("*", ["10.0.0.1", "::1", "fe80::1"], []),
    ("*.*.*.*", ["192.168.7.9"], []),
    ("*:*:*:*:*:*:*:*", ["2001:db8::1"], []),
    ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2", "192.168.0.10", "::1"]),
    ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1", "10.168.0.1"]),
    ("192.168.*.*", ["192.168.200.3"], ["192.169.0.1"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.0.12"]),
    ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.0", "192.168.1.6", "192.168.2.3"]),
    ("10.0.2-3.*", ["10.0.2.0", "10.0.3.255"], ["10.0.4.1", "10.0.1.9"]),
    ("10.0.0.1,10.0.0.7", ["10.0.0.1", "10.0.0.7"], ["10.0.0.2"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1", "::2"]),
    ("fe80::*", ["fe80::abcd"], ["fe81::1", "fe80::1:0"]),
    ("2001:db8::1-ff", ["2001:db8::1", "2001:db8::ff"], ["2001:db8::100", "2001:db8::"]),
    ("2001:db8:0:0:0:0:0:{1,a}", ["2001:db8::1", "2001:db8::a"], ["2001:db8::b"]),
    ("2001:db8::1,2001:db8::2", ["2001:db8::2"], ["2001:db8::3"]),
    ("fe80::1", ["fe80::1%eth0"], []),  # a zone names no other address
])
def test_pattern_matches_what_it_names(pattern, inside, outside):
    p = parse_address_pattern(pattern)
    assert [h for h in inside if not p.matches(h)] == []
    assert [h for h in outside if p.matches(h)] == []


def test_a_peer_that_is_no_ip_address_matches_only_everyone():
    assert not parse_address_pattern("192.168.0.*").matches("localhost")
    assert parse_address_pattern("*").matches("localhost")


@pytest.mark.parametrize(("pattern", "said"), [
    ("192.168.0.300", "not an IPv4 or IPv6 address"),
    ("192.168.*", "an IPv4 pattern has 4 parts, this one has 3"),
    ("192.168.1-5.7", "after a * or a range every part must be *, not '7'"),
    ("192.168.1.5-1", "the range '5-1' runs backwards"),
    ("192.168.1.1-300", "'300' is not a number 0-255"),
    ("192.168.1.-5", "'' is not a number 0-255"),
    ("192.168.0.{1,,2}", "an empty entry between the braces"),
    ("192.168.0.{1,x}", "'192.168.0.x' is not an IPv4 or IPv6 address"),
    ("10.0.0.1,,10.0.0.2", "an empty entry in the list"),
    ("fe80::*::1", "'::' may appear once"),
    ("fe80::1-fffff", "'fffff' is not a hex group 0-ffff"),
    ("1:2:3:4:5:6:7:8::*", "'::' stands for no group here"),
    ("not-an-address", "an IPv4 pattern has 4 parts, this one has 1 (examples: 192.168.0.*"),
])
def test_a_malformed_pattern_is_named(pattern, said):
    with pytest.raises(ConfigError) as e:
        parse_address_pattern(pattern)
    assert repr(pattern) in str(e.value) and said in str(e.value)
