"""The documents stay true to the code (issue 24): README.md is a front page, every relative link in it
and in docs/ reaches a file (and a heading, for an #anchor), every ``spark_mq/...`` path they name
exists, docs/architecture.md's module map lists every module and nothing else, the README's test
command is the one CI runs, and docs/configuration.md is what scripts/gen_config_docs.py writes from the
config dataclasses (a key without a description, or a stale file, fails here)."""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path

import pytest

from spark_mq.common.config import ROCKETMQ_NAMES, config_key

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
GENERATED = ROOT / "spark_mq" / "broker" / "grpc" / "stubs"  # the gRPC stubs, generated at install: one line in the map
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_README_LINES = 300
TREE_BEGIN, TREE_END = "<!-- module tree: begin -->", "<!-- module tree: end -->"
TREE_INDENT = 2
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PACKAGE_PATH = re.compile(r"(?<![\w/.])spark_mq/[\w/.]*")  # not a znode such as /spark_mq/controller
gen = runpy.run_path(str(ROOT / "scripts" / "gen_config_docs.py"))


def prose(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    out, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a file's headings: lower case, punctuation dropped, spaces to hyphens,
    repeats numbered."""
    seen: dict[str, int] = {}
    for line in prose(path):
        if m := re.match(r"#{1,6} (.+)", line):
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            if n:
                seen[f"{slug}-{n}"] = 1
    return set(seen)


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc):
    for target in (m for line in prose(doc) for m in LINK.findall(line)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.name}: link {target!r}: no file {path}"
        if anchor:
            assert anchor in anchors(path), f"{doc.name}: link {target!r}: no such heading in {path.name}"


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_package_path_named_exists(doc):
    for path in PACKAGE_PATH.findall(doc.read_text()):
        assert (ROOT / path.rstrip(".")).exists(), f"{doc.name} names {path}, which does not exist"


def module_tree() -> set[str]:
    """The paths (relative to the repository) of docs/architecture.md's module map."""
    text = ARCHITECTURE.read_text()
    lines = text[text.index(TREE_BEGIN):text.index(TREE_END)].splitlines()
    stack: list[str] = []
    out = set()
    for line in lines:
        if not line.strip() or line.startswith(("<!--", "```")):
            continue
        depth = (len(line) - len(line.lstrip())) // TREE_INDENT
        name = line.split()[0]
        stack[depth:] = [name]
        out.add("".join(stack))
    return out


def test_module_map_lists_real_modules_and_every_module():
    """The map is the whole package: a module added, moved or removed without its line fails here."""
    tree = module_tree()
    for path in tree:
        assert (ROOT / path).exists(), f"docs/architecture.md's module map lists {path}, which does not exist"
    packages = {f"{p.parent.relative_to(ROOT).as_posix()}/" for p in (ROOT / "spark_mq").rglob("__init__.py")}
    assert packages <= tree, f"subpackages missing from docs/architecture.md's module map: {sorted(packages - tree)}"
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spark_mq").rglob("*.py")
               if p.name != "__init__.py" and GENERATED not in p.parents}
    assert modules <= tree, f"modules missing from docs/architecture.md's module map: {sorted(modules - tree)}"


def test_readme_runs_the_tests_as_ci_does():
    (command,) = (line.removeprefix("exec ").strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                  if "scripts/test.sh" in line and not line.startswith("#"))
    assert any(line.startswith(command) for line in README.read_text().splitlines()), command


def test_configuration_reference_is_current():
    assert gen["main"](["--check"]) == 0, "run: python scripts/gen_config_docs.py"


@pytest.mark.parametrize("section", [s for s in gen["SECTIONS"] if s.camel], ids=lambda s: s.cls.__name__)
def test_every_key_has_a_described_row(section):
    rows = {row.key: row for run in gen["runs"](section) for row in run.rows}
    own = {config_key(f.name) for f in dataclasses.fields(section.cls)} - {"extra"}
    inherited = {config_key(f.name) for base in section.cls.__mro__[1:] if dataclasses.is_dataclass(base)
                 for f in dataclasses.fields(base)}
    assert set(rows) == own - inherited
    assert all(row.what for row in rows.values()), [k for k, row in rows.items() if not row.what]
    reference = (ROOT / "docs" / "configuration.md").read_text()
    assert all(f"| `{key}` |" in reference for key in rows)


def test_rocketmq_names_are_of_real_keys():
    keys = {config_key(f.name) for s in gen["SECTIONS"] if s.camel for f in dataclasses.fields(s.cls)}
    assert set(ROCKETMQ_NAMES) <= keys, sorted(set(ROCKETMQ_NAMES) - keys)
