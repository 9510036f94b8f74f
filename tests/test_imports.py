"""The import graph of ``src/empo2`` has no circles (docs/architecture.md, Import rules).

Read with Python's ``ast`` (nothing is imported): an edge ``a -> b`` is a statement in module ``a``
that imports module ``b`` — ``import b``, ``from b import name``, or ``from pkg import b`` when ``b``
is a submodule; importing ``pkg.mod`` also runs ``pkg/__init__.py``, so it adds the edge to ``pkg``
too. Statements at module level (including ``try``/``if`` blocks) run at import time; those inside a
function or method run when it is called, and those under ``if TYPE_CHECKING:`` only for a type
checker: both are counted separately.

Checked here:

* no two-file circle (``a -> b`` and ``b -> a``) among module-level imports, nor one that a
  function-level or ``TYPE_CHECKING`` import closes;
* no cycle between the top-level parts of the package (``empo2.trainer``, ``empo2.config``,
  ``empo2.envs``, …; a module ``empo2/x.py`` is its own part) counting every import, function-level
  ones included.

``python tests/test_imports.py`` prints the counts.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "empo2"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package (``pkg/__init__.py`` -> ``pkg``)."""
    out = {}
    for p in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt], list[ast.stmt]]:
    """(module-level, function-level, ``TYPE_CHECKING``-only) import statements of one file."""
    top: list[ast.stmt] = []
    inner: list[ast.stmt] = []
    typing_only: list[ast.stmt] = []

    def walk(nodes: list[ast.stmt], where: list[ast.stmt]) -> None:
        for n in nodes:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                where.append(n)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(n.body, typing_only if where is typing_only else inner)
            elif isinstance(n, ast.If) and _is_type_checking(n.test):
                walk(n.body, typing_only)
                walk(n.orelse, where)
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    sub = getattr(n, field, None)
                    if isinstance(sub, list):
                        walk([s for s in sub if isinstance(s, ast.AST)], where)
    walk(tree.body, top)
    return top, inner, typing_only


def _targets(node: ast.stmt, module: str, is_pkg: bool, known: set[str]) -> set[str]:
    """The package's modules that ``node`` (in ``module``) makes Python import, packages included.

    ``from pkg import sub`` (a submodule) imports ``pkg.sub``; ``from pkg import name`` (anything
    else) reads ``pkg`` itself. The packages above an imported module run first, but not when they
    are above ``module`` too: those are already being imported (a sibling import is no circle).
    """
    explicit: set[str] = set()
    if isinstance(node, ast.Import):
        explicit = {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_pkg else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        subs = {f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in known}
        explicit = subs if len(subs) == len(node.names) else subs | {stem}
    own_parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    out = set()
    for name in explicit:
        if not (name == ROOT or name.startswith(ROOT + ".")):
            continue
        if name in known:
            out.add(name)
        parts = name.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:i])
            if prefix in known and prefix not in own_parents:
                out.add(prefix)
    out.discard(module)
    return out


def import_graph(typing_only: bool = False) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level edges, function-level edges): module -> the package modules it imports; with
    ``typing_only`` the second graph holds the ``TYPE_CHECKING`` imports instead."""
    mods = _modules()
    known = set(mods)
    top: dict[str, set[str]] = defaultdict(set)
    inner: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        t, f, tc = _import_nodes(tree)
        if typing_only:
            f = tc
        for n in t:
            top[name] |= _targets(n, name, is_pkg, known)
        for n in f:
            inner[name] |= _targets(n, name, is_pkg, known)
    return top, inner


def two_file_circles(a_edges: dict[str, set[str]], b_edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Pairs ``(a, b)`` with ``a -> b`` in ``a_edges`` and ``b -> a`` in ``b_edges`` (sorted pairs)."""
    return {tuple(sorted((a, b))) for a, bs in a_edges.items() for b in bs if a in b_edges.get(b, ())}


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets (more than one part) of the graph between the package's top-level parts."""
    g: dict[str, set[str]] = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if _part(a) != _part(b) and _part(b) != ROOT:
                g[_part(a)].add(_part(b))
    nodes = set(g) | {b for bs in g.values() for b in bs}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def _union(a: dict[str, set[str]], b: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for d in (a, b):
        for k, v in d.items():
            out[k] |= v
    return out


def test_the_graph_is_read():
    """The reader sees the package's real imports (a guard against a reader that finds nothing)."""
    top, inner = import_graph()
    assert "empo2.algo" in top["empo2.algo.advantages"] or "empo2.algo" in top.get("empo2.trainer.loop", set())
    assert "empo2.records" in top["empo2.trainer.batch"]
    assert sum(map(len, top.values())) > 100


def test_circle_detection_finds_a_planted_circle():
    assert two_file_circles({"a": {"b"}}, {"b": {"a"}}) == {("a", "b")}
    assert package_cycles({"empo2.x.m": {"empo2.y.n"}, "empo2.y.n": {"empo2.x.k"}}) == [["empo2.x", "empo2.y"]]
    assert package_cycles({"empo2.x.m": {"empo2.y.n"}}) == []


def test_no_two_file_circles():
    top, inner = import_graph()
    assert not two_file_circles(top, top), "module-level import circles (move the shared part to a third module)"
    closed = two_file_circles(top, inner) | two_file_circles(inner, inner)
    assert not closed, f"function-level imports closing a circle: {sorted(closed)}"
    _, typing = import_graph(typing_only=True)
    closed = two_file_circles(_union(top, inner), typing) | two_file_circles(typing, typing)
    assert not closed, f"TYPE_CHECKING imports closing a circle (move the shared types): {sorted(closed)}"


def test_no_package_cycles():
    top, inner = import_graph()
    cycles = package_cycles(_union(top, inner))
    assert not cycles, f"cycles between parts of empo2 (function-level imports included): {cycles}"


if __name__ == "__main__":
    top, inner = import_graph()
    both = _union(top, inner)
    print(f"modules: {len(_modules())}; edges: module-level {sum(map(len, top.values()))}, "
          f"function-level {sum(map(len, inner.values()))}")
    for label, pairs in (("two-file circles, module-level", two_file_circles(top, top)),
                         ("two-file circles closed by a function-level import",
                          two_file_circles(top, inner) | two_file_circles(inner, top) | two_file_circles(inner, inner))):
        print(f"{label}: {len(pairs)}")
        for p in sorted(pairs):
            print("   ", " <-> ".join(p))
    _, typing = import_graph(typing_only=True)
    pairs = two_file_circles(both, typing) | two_file_circles(typing, both) | two_file_circles(typing, typing)
    print(f"two-file circles closed by a TYPE_CHECKING import: {len(pairs)}")
    for p in sorted(pairs):
        print("   ", " <-> ".join(p))
    for label, edges in (("package cycles, module-level", top), ("package cycles, all imports", both)):
        cyc = package_cycles(edges)
        print(f"{label}: {len(cyc)}")
        for c in cyc:
            print("   ", " <-> ".join(c))
