"""docs/security.md's permission table is the check's table (acl/resources.py RULES), row for row."""

from __future__ import annotations

from pathlib import Path

from spark_mq.acl.resources import RULES
from spark_mq.acl.validator import REASONS
from spark_mq.remoting.codes import RequestCode

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def test_every_code_has_its_row():
    text = DOC.read_text()
    rows = {line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    want = {f"| {code.value} | {code.name} | {RULES[code].describe()} |" for code in RequestCode}
    assert sorted(want - rows) == [], "rows missing or different in docs/security.md"
    assert sorted(rows - want) == [], "rows in docs/security.md for no code (or an outdated rule)"


def test_every_refusal_reason_is_documented():
    text = DOC.read_text()
    assert [r for r in REASONS if f"`{r}`" not in text] == []
