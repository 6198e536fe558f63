"""The `allocator` package's import graph: no cycles, and the few layering rules the
architecture states (docs/architecture.md).

Every import statement counts, wherever it is: at module level, inside a function (a lazy
import is still a dependency: the policy package's selection <-> FUGA cycle was one) and
under `if TYPE_CHECKING:` (a type-only arrow still ties the two modules' designs together).
An import of a submodule is an edge to that submodule only, not to the packages above it
that Python also imports (else every package that re-exports a submodule would be in a
cycle with it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: module -> packages it must not import (what the architecture says each layer ignores).
FORBIDDEN = {
    # The shared metric definitions serve the simulators too; they must not know the broker.
    "allocator.metrics_defs": ("allocator.broker",),
    # Input formats: every driver and command reads them, so they import none of those.
    "allocator.scenarios": ("allocator.sim", "allocator.batch", "allocator.broker", "spark_shim"),
    # The policies are pure functions of an allocation state.
    "allocator.policy": ("allocator.engine", "allocator.engine_config", "allocator.broker"),
}


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` under `root` (a package
    by its __init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """{module of `modules` that `module` imports: line}, relative imports resolved.
    `from package import name` is an edge to package.name if that is a module, else to the
    package; a name outside `modules` is followed up to the module it is inside, if any."""

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            target = owner(name)
            if target is not None and target != module:
                edges.setdefault(target, node.lineno)
    return edges


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def allocator_graph() -> dict[str, dict[str, int]]:
    """`allocator` with `spark_shim` (so that an arrow between them is seen too)."""
    return import_graph(module_files(ROOT, "allocator") | module_files(ROOT, "spark_shim"))


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    arrows = [
        f"{a} -> {b} (line {graph[a][b]})" for a in component for b in graph[a] if b in component
    ]
    return "; ".join(arrows)


def test_the_cycle_finder_finds_a_lazy_import_cycle_and_a_type_only_one(tmp_path: Path):
    """The walk itself, on a made-up package: a function-level import and a TYPE_CHECKING
    import each close a cycle; a one-way chain and a package re-exporting its submodule
    close none."""
    package = tmp_path / "toy"
    package.mkdir()
    (package / "__init__.py").write_text("from toy import a\n")  # toy -> toy.a
    (package / "a.py").write_text("from toy.b import thing\n")
    (package / "b.py").write_text("def f():\n    from toy import a\n")  # lazy: a <-> b
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n"
    )
    (package / "d.py").write_text("from toy import c\n")  # type-only: c <-> d
    (package / "e.py").write_text("import toy.a\nfrom toy import a\n")  # e -> a only
    graph = import_graph(module_files(tmp_path, "toy"))
    assert graph == {
        "toy": {"toy.a": 1},
        "toy.a": {"toy.b": 1},
        "toy.b": {"toy.a": 2},
        "toy.c": {"toy.d": 3},
        "toy.d": {"toy.c": 1},
        "toy.e": {"toy.a": 1},
    }
    assert sorted(cycles(graph)) == [["toy.a", "toy.b"], ["toy.c", "toy.d"]]


def test_allocator_has_no_import_cycles():
    graph = allocator_graph()
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(describe(c, graph) for c in found)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_nothing_above_them(layer):
    graph = allocator_graph()
    modules = [m for m in graph if m == layer or m.startswith(layer + ".")]
    assert modules, layer
    bad = [
        f"{m} -> {target} (line {line})"
        for m in modules
        for target, line in graph[m].items()
        if any(target == f or target.startswith(f + ".") for f in FORBIDDEN[layer])
    ]
    assert not bad, bad
