"""The import rules of the package (DESIGN.md, "imports flow one way"), read from the source with ``ast``:
no module imports a layer above its own, no import cycle anywhere (imports inside functions count: a
cycle they hide is still a cycle, and so do imports for annotations only: a cycle through them is a cycle
of concepts), and an import inside a function says why it is there.

An import inside a function is allowed only for a dependency that is optional or heavy for the
module's callers; it carries a comment with :data:`LAZY_MARKER` on its line or the line above (once
for a run of import statements), e.g. ``# lazy import: deltalake only for Delta archives``. Imports
under ``if TYPE_CHECKING:`` are for annotations only: they need no marker, but they respect the layers
and count in the cycle check like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "spark_mq"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
LAZY_MARKER = "lazy import:"

# each part of the package (a subpackage, a layer inside one such as "store.ha", or a top-level module)
# and the parts right below it that it builds on; a part may import anything below those too (the table
# is closed transitively). A module is in the longest part its dotted name starts with.
LAYERS: dict[str, set[str]] = {
    "common": set(),
    "store": {"common"},
    "store.ha": {"store"},  # replication of the commitlog: the store never imports it
    "remoting": {"common"},
    "acl": {"remoting"},  # plain_acl.yml accounts and the request check (signing itself is remoting's)
    "controller": {"remoting", "acl"},
    "namesrv": {"remoting", "controller"},
    "filter": {"common"},  # SQL92 selectors: no network, no store (the Spark source uses it too)
    "broker": {"store.ha", "remoting", "filter", "acl"},
    "client": {"remoting"},
    "arrow": {"client"},  # never pyspark
    "tiered": {"arrow"},  # never pyspark: `spark-mq offload` and `query --archive` run without Spark
    "spark": {"tiered", "filter"},  # filter: SQL92 filters checked at planning, applied to archive reads
    "commands": {"tiered", "store"},  # never spark: commands run without pyspark; offline store tools (copy-store)
    "dashboard": {"commands"},  # the web console over the admin API; never spark
    "cli": {"commands", "dashboard", "broker", "namesrv", "controller"},
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (of spark_mq: a package when the name imported is not a module)
    line: int
    in_function: bool
    type_only: bool  # under `if TYPE_CHECKING:`
    marked: bool  # LAZY_MARKER on its line or the line above, or on those of the first of its run of imports

    @property
    def internal(self) -> bool:
        return self.target.split(".")[0] == PACKAGE


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_names()


def part_of(module: str) -> str:
    """The part of the package ``module`` is in (the longest name of :data:`LAYERS` it is in, else its
    first component); "" for the package itself (its version, below all)."""
    names = module.split(".")[1:]
    for n in range(len(names), 1, -1):
        if (part := ".".join(names[:n])) in LAYERS:
            return part
    return names[0] if names else ""


def imports_of(module: str, path: Path) -> Iterator[Import]:
    source = path.read_text()
    lines = source.splitlines()

    def marked(lineno: int) -> bool:
        return any(LAZY_MARKER in lines[i - 1] for i in (lineno, lineno - 1) if i >= 1)

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        assert node.level == 0 and node.module, f"{module}:{node.lineno}: use absolute imports"
        if node.module.split(".")[0] != PACKAGE:
            return [node.module]
        return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                for a in node.names]

    def walk(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Import]:
        block_marked = False  # a run of import statements shares the marker of its first one
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                block_marked = block_marked or marked(child.lineno)
                for target in dict.fromkeys(targets(child)):
                    yield Import(module, target, child.lineno, in_function, type_only, block_marked)
                continue
            block_marked = False
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, type_only)
            else:
                yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                                type_only)

    return walk(ast.parse(source, str(path)), False, False)


ALL_IMPORTS = [imp for module, path in MODULES.items() for imp in imports_of(module, path)]
INTERNAL = [imp for imp in ALL_IMPORTS if imp.internal]


def allowed_below(part: str) -> set[str]:
    """Every part ``part`` may import: its own and those below it, transitively."""
    seen, todo = {part, ""}, [part]
    while todo:
        for lower in LAYERS.get(todo.pop(), ()):
            if lower not in seen:
                seen.add(lower)
                todo.append(lower)
    return seen


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(m) for m in MODULES} - {""}
    assert parts <= set(LAYERS), f"place {sorted(parts - set(LAYERS))} in LAYERS (DESIGN.md's import flow)"


def test_every_layer_names_a_part_of_the_package():
    """A stale entry (a package moved or removed) fails, so the table stays the current map."""
    packages = {name.removeprefix(f"{PACKAGE}.") for name in MODULES if name != PACKAGE}
    stale = sorted(name for name in {*LAYERS, *(p for below in LAYERS.values() for p in below)}
                   if name not in packages)
    assert not stale, f"LAYERS names {stale}, which are not modules or packages of {PACKAGE}"


def test_no_module_imports_a_higher_layer():
    wrong = [f"{i.module}:{i.line} imports {i.target} ({part_of(i.target)} is not below {part_of(i.module)})"
             for i in INTERNAL
             if part_of(i.module) and part_of(i.target) not in allowed_below(part_of(i.module))]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    edges: dict[str, set[str]] = {}
    for i in INTERNAL:
        if i.target != i.module:
            edges.setdefault(i.module, set()).add(i.target)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_inside_functions_say_why():
    unmarked = [f"{i.module}:{i.line} imports {i.target} inside a function without a '# {LAZY_MARKER} <why>' comment"
                for i in ALL_IMPORTS
                if i.in_function and not i.type_only and not i.marked]
    assert not unmarked, "\n".join(unmarked)


def test_the_checks_catch_a_cycle_and_an_upward_import():
    """The graph code itself: a cycle through a function-level import is found, tiered -> spark and
    store -> store.ha are refused."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert "spark" not in allowed_below("tiered") and "spark" not in allowed_below("commands")
    assert part_of("spark_mq.store.ha.ha_service") == "store.ha" and part_of("spark_mq.store.commitlog") == "store"
    assert "store.ha" not in allowed_below("store") and "store.ha" in allowed_below("broker")
    assert allowed_below("spark") >= {"tiered", "arrow", "client", "remoting", "common"}
