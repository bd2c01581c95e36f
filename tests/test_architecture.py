"""The layout is the architecture: one import identity per module, no package cycles, components
that never import recipes or test doubles.

The import graph is read statically (``ast``), every ``import`` in a file counted — inside
functions too, since a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "vlrollout": REPO / "vlrollout",
    "vlrollout.processors": REPO / "processors",
    "vlrollout.rewards": REPO / "rewards",
}
RECIPES = {
    "vlrollout.run",
    "vlrollout.train",
    "vlrollout.serve",
    "vlrollout.snapshots",
    "vlrollout.cli",
}
"""Wire components into programs; nothing below may import them, and only the CLI (which starts
every recipe) imports another recipe."""
COMPONENTS = {
    "vlrollout.processors",
    "vlrollout.rewards",
    "vlrollout.workflows",
    "vlrollout.engine",
    "vlrollout.packaging",
    "vlrollout.tools",
    "vlrollout.geometry",
    "vlrollout.jsonl",
    "vlrollout.datasets",
    "vlrollout.readers",
    "vlrollout.eval",
    "vlrollout.report_drawing",
    "vlrollout.charts",
    "vlrollout.ledger",
    "vlrollout.checks",
    "vlrollout.families",
    "vlrollout.compat",
    "vlrollout.config",
    "vlrollout.errors",
    "vlrollout.files",
}


def _modules() -> Iterator[tuple[str, Path]]:
    for root_name, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            yield ".".join([root_name, *rel]), path


def _unit(module: str) -> str:
    """The package a module belongs to: ``vlrollout.X`` (a subpackage or a top-level module)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "vlrollout" or name.startswith("vlrollout.")}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        unit = _unit(module)
        targets = {_unit(name) for name in _imports(module, path)} - {unit, "vlrollout"}
        graph.setdefault(unit, set()).update(t for t in targets if t in _known_units())
    return graph


def _known_units() -> set[str]:
    return {_unit(module) for module, _ in _modules()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_package_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _module_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports, at any depth of the file.

    ``from package import name`` counts as an import of ``package.name`` when that is a module,
    otherwise of ``package`` (its ``__init__``).
    """
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                found.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + [node.module or ""])
                target = target.rstrip(".")
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return (found & known) - {module}


def _module_graph() -> dict[str, set[str]]:
    paths = dict(_modules())
    known = set(paths)
    return {module: _module_imports(module, path, known) for module, path in paths.items()}


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One import path around ``component`` (a strongly connected set), first module repeated
    at the end: ``[a, b, a]``."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    todo = [start]
    while todo:  # breadth first: the shortest way back to ``start``
        v = todo.pop(0)
        for w in sorted(graph.get(v, set()) & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    raise ValueError(f"{component} is not a cycle of the graph")


def test_no_module_cycles():
    """No import circle between two modules, through imports inside functions too: a lazy import
    that closes a circle only hides it until the import order changes."""
    graph = _module_graph()
    circles = [" -> ".join(_cycle_path(graph, c)) for c in _cycles(graph)]
    assert not circles, "import circles: " + "; ".join(circles)


def test_module_graph_sees_imports_inside_functions(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from pkg import b\n")
    b.write_text("def f():\n    from pkg.a import g\n")
    known = {"pkg", "pkg.a", "pkg.b"}
    graph = {
        "pkg.a": _module_imports("pkg.a", a, known),
        "pkg.b": _module_imports("pkg.b", b, known),
    }
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert _cycle_path(graph, _cycles(graph)[0]) == ["pkg.a", "pkg.b", "pkg.a"]


LONGEST_FUNCTION = 80
"""Lines a function of the trainer may take (docstring included): one screen, read at once."""


def test_no_trainer_function_is_longer_than_a_screen():
    long = []
    for module, path in _modules():
        if not module.startswith("vlrollout.train"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines})")
    assert not long, f"functions over {LONGEST_FUNCTION} lines: {long}"


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_components_import_no_recipe_and_no_test_double(component):
    graph = _graph()
    forbidden = graph.get(component, set()) & (RECIPES | {"vlrollout.testing"})
    assert not forbidden, f"{component} imports {sorted(forbidden)}"


@pytest.mark.parametrize("recipe", sorted(RECIPES - {"vlrollout.cli"}))
def test_recipes_do_not_import_each_other(recipe):
    """What two recipes need (errors, files, config rules, data loading) lives in a shared module."""
    forbidden = _graph().get(recipe, set()) & RECIPES
    assert not forbidden, f"{recipe} imports {sorted(forbidden)}"


@pytest.mark.parametrize("folder", ["processors", "rewards"])
def test_top_level_folders_have_one_import_identity(folder):
    """From the repository root (where pytest and users start), the folder cannot be imported as a
    second, top-level package."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {folder}"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert f"vlrollout.{folder}" in proc.stderr


def test_layout():
    """Where each concern lives (docs/architecture.md)."""
    expected = [
        "vlrollout/engine/factory.py",  # the engine and its factory together
        "vlrollout/testing/scripted_engine.py",  # test doubles under a name that says so
        "vlrollout/testing/tiny_model.py",
        "vlrollout/testing/offline_processors.py",
        "vlrollout/registry.py",  # one registry helper for processors, rewards and tools
        "vlrollout/geometry.py",  # image geometry shared by processors, rewards and tools
        "vlrollout/run/config.py",  # the recipes, each in its own package
        "vlrollout/run/runner.py",
        "vlrollout/train/loop.py",
        "vlrollout/serve/app.py",
        "vlrollout/eval/runner.py",  # one evaluator for `vlrollout eval` and training's held-out pass
        "vlrollout/readers/__init__.py",  # every data format behind vlrollout.datasets.load_items
    ]
    missing = [p for p in expected if not (REPO / p).exists()]
    assert not missing
    gone = [
        "vlrollout/engines.py",
        "vlrollout/scripted_engine.py",
        "processors/offline.py",
        "vlrollout/run_config.py",
        "vlrollout/runner.py",
        "vlrollout/report.py",
    ]
    assert not [p for p in gone if (REPO / p).exists()]


def _third_party_imports() -> set[str]:
    """Top-level names of non-standard-library packages imported by the installed code."""
    names = set()
    for module, path in _modules():
        if module.startswith("vlrollout.testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "vlrollout"}


def test_every_imported_package_is_declared():
    """Each package the library imports is a declared dependency (not only present because areal
    happens to pull it in)."""
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    declared = {
        re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower().replace("_", "-")
        for req in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    distributions = packages_distributions()
    undeclared = {}
    for name in sorted(_third_party_imports()):
        dists = {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
        if not dists & declared:
            undeclared[name] = sorted(dists)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_areal_and_transformers_are_bounded():
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    by_name = {d.split("=")[0].split("<")[0].split(">")[0]: d for d in deps}
    assert "<" in by_name["transformers"] or "==" in by_name["transformers"]
    assert "<" in by_name["areal"] or "==" in by_name["areal"]
