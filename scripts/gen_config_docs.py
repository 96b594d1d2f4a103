"""Write docs/configuration.md from the config dataclasses, so the reference cannot drift from the code.

Every key of every process's properties file (``spark_mq.common.config``: BrokerConfig, NamesrvConfig,
ControllerConfig and the connection keys of ServerChannelConfig they share) gets one row: its name,
type, default, RocketMQ's name and what it does. What it does is the field's trailing comment in the
source; the comment block above a run of fields introduces that run. RocketMQ's name is the key itself
unless ``ROCKETMQ_NAMES`` says otherwise. The client's ``ClientConfig`` (Python keyword arguments, not
a file) is listed the same way.

    python scripts/gen_config_docs.py           # rewrite docs/configuration.md
    python scripts/gen_config_docs.py --check   # exit 1 if it is out of date (tests/unit/test_docs.py runs this)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_mq.client.config import ClientConfig  # noqa: E402 (the repository's package, from ROOT)
from spark_mq.common.config import (  # noqa: E402
    ROCKETMQ_NAMES,
    BrokerConfig,
    ControllerConfig,
    NamesrvConfig,
    SecurityConfig,
    ServerChannelConfig,
    config_key,
)
from spark_mq.common.lazy_dataclass import realize  # noqa: E402

OUTPUT = ROOT / "docs" / "configuration.md"
NOT_A_KEY = {"extra"}  # the loader's own field, never read from a file
SHORT_INTRO = 30  # characters: a comment block this short is a heading


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    rocketmq: str
    what: str


@dataclass(frozen=True)
class Run:
    """Fields declared one after another, introduced by the comment block above the first."""

    intro: str
    rows: list[Row]


@dataclass(frozen=True)
class Section:
    cls: type
    title: str
    lead: str  # what the section is, where its keys are read from
    camel: bool = True  # keys are camelCase properties (False: Python keyword arguments)


SECTIONS = (
    Section(BrokerConfig, "Broker", "`spark-mq broker -c conf/broker.conf` (and each broker of `spark-mq dev`)."),
    Section(realize(NamesrvConfig), "NameServer", "`spark-mq namesrv -c conf/namesrv.conf`. With "
            "`enableControllerInNamesrv=true` the same file also takes the controller's keys below (its address, "
            "port and `scanNotActiveBrokerInterval` are the NameServer's)."),
    Section(realize(ControllerConfig), "Controller", "`spark-mq controller -c conf/controller.conf`, or the "
            "controller keys of namesrv.conf with `enableControllerInNamesrv=true`."),
    Section(ServerChannelConfig, "Connections (every server)", "Keys of broker.conf, namesrv.conf and "
            "controller.conf alike."),
    Section(SecurityConfig, "Security (every server)", "Keys of broker.conf, namesrv.conf and controller.conf "
            "alike: ACL, this process's own account, TLS (see docs/security.md)."),
    Section(ClientConfig, "Client (`ClientConfig`)", "Keyword arguments of `spark_mq.client.config.ClientConfig`, "
            "which every producer, consumer and admin takes (not a file).", camel=False),
)


def comments(source: str) -> dict[int, str]:
    """Line number → the text of the comment on it."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is dataclasses.MISSING:
        return "required"
    value = f.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "none"
    if value == "":
        return "empty"
    return f"`{value}`"


def _type(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def runs(section: Section) -> list[Run]:
    """The fields the class itself declares, in source order, grouped by the comment blocks above them."""
    cls = section.cls
    source = inspect.getsource(cls)
    notes = comments(source)
    lines = source.splitlines()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    (node,) = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    out: list[Run] = []
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if name in NOT_A_KEY:
            continue
        block = []
        line = stmt.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            block.insert(0, notes[line])
            line -= 1
        key = config_key(name) if section.camel else name
        rocketmq = ROCKETMQ_NAMES.get(key, key) if section.camel else "-"
        row = Row(key, _type(hints[name]), _default(fields[name]),
                  "none (spark_mq's own)" if rocketmq is None else rocketmq, notes.get(stmt.end_lineno or 0, ""))
        if block or not out:
            out.append(Run(" ".join(block), []))
        out[-1].rows.append(row)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    parts = [
        "# Configuration reference",
        "",
        "<!-- generated by scripts/gen_config_docs.py from spark_mq/common/config.py and spark_mq/client/config.py: "
        "edit the fields' comments there and run the script (tests/unit/test_docs.py fails while this file is "
        "stale) -->",
        "",
        "Processes read RocketMQ-style `key=value` properties files (`#` and `!` start comments) into frozen "
        "dataclasses: camelCase keys map to snake_case fields (`mapedFileSizeCommitLog` → "
        "`maped_file_size_commit_log`). An unknown key or a value of the wrong type stops the process with a line "
        "naming the key (and the closest known key), so a typo never falls back to a default silently. The shipped "
        "files in `conf/` list every key at its default. Units are in the descriptions: `ms`, seconds, bytes.",
        "",
        "The *RocketMQ* column gives RocketMQ's name for the key (the same as ours, except where it says), or "
        "says the key is spark_mq's own.",
        "",
    ]
    for section in SECTIONS:
        parts += [f"## {section.title}", "", section.lead, ""]
        doc = inspect.getdoc(section.cls)
        if doc and not doc.startswith(f"{section.cls.__name__}("):  # not the signature dataclass writes
            parts += [doc, ""]
        if section.cls in (BrokerConfig, NamesrvConfig, ControllerConfig):
            parts += ["Plus the connection keys of [every server](#connections-every-server).", ""]
        for run in runs(section):
            intro = run.intro[:1].upper() + run.intro[1:]
            if intro:  # a short one names the run ("# flush"), a longer one explains it
                parts += [f"### {intro}" if len(intro) <= SHORT_INTRO else intro, ""]
            parts += ["| key | type | default | RocketMQ | what it does |", "| --- | --- | --- | --- | --- |"]
            parts += [f"| `{r.key}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.rocketmq)} | {_cell(r.what)} |"
                      for r in run.rows]
            parts.append("")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
