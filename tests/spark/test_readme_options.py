"""docs/spark.md's Spark options tables list every option the source and the sink accept, each with a default
and the Kafka option it matches (a new option without a row fails here)."""

from __future__ import annotations

import re
from pathlib import Path

from spark_mq.spark.options import ALL_OPTIONS, SINK_OPTIONS

SPARK_DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
_ROW = re.compile(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", re.MULTILINE)


def _table(heading: str) -> dict[str, tuple[str, str]]:
    text = SPARK_DOC.read_text()
    start = text.index(heading)
    end = text.index("\n\n", text.index("| --- |", start))
    return {m[1]: (m[2].strip(), m[3].strip()) for m in _ROW.finditer(text[start:end])}


def test_every_read_option_has_a_row():
    rows = _table("Read (`spark.read`")
    assert sorted(rows) == sorted(ALL_OPTIONS)
    assert all(default and kafka for default, kafka in rows.values())


def test_every_write_option_has_a_row():
    rows = _table("Write (`df.write`")
    assert sorted(rows) == sorted(SINK_OPTIONS)
    assert all(default and kafka for default, kafka in rows.values())
