"""The offload command's option parsing: durations, the cold boundary, topic lists, --help."""

from __future__ import annotations

import argparse

import pytest

from spark_mq.cli import build_parser
from spark_mq.commands.offload import parse_duration_ms, topics_of
from spark_mq.common.errors import ConfigError
from spark_mq.tiered.offload import ColdBoundary


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500), ("90s", 90_000), ("30m", 1_800_000), ("1h", 3_600_000),
                                          ("2d", 172_800_000), ("1h30m", 5_400_000), ("1.5s", 1500), ("0s", 0),
                                          (" 1h 30m ", 5_400_000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "-1h", "1h-", "1hh", "one hour"])
def test_bad_durations_say_how_to_write_one(text):
    with pytest.raises(ConfigError, match="write a number with a unit"):
        parse_duration_ms(text)


def test_cold_boundary_is_one_of_three():
    assert "cold offset" in ColdBoundary().describe()
    assert "max offset" in ColdBoundary(all=True).describe()
    assert "more than 3600s ago" in ColdBoundary(older_than_ms=3_600_000).describe()
    with pytest.raises(ConfigError, match="not both"):
        ColdBoundary(all=True, older_than_ms=0)
    with pytest.raises(ConfigError, match="must not be negative"):
        ColdBoundary(older_than_ms=-1)


def test_topics_may_repeat_or_be_comma_separated():
    args = argparse.Namespace(topic=["a,b", " c ", "a", ","])
    assert topics_of(args) == ["a", "b", "c"]


def test_cli_has_offload_with_help(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["offload", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--namesrv", "--topic", "--root", "--format", "--older-than", "--all"))
