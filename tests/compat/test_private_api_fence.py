"""Private names of other packages are reached only from ``vlrollout/compat/``.

Read as code (``ast``), not as text, over ``vlrollout/``, ``processors/`` and ``rewards/``. A name
is private when it starts with one underscore and is not a dunder. Outside ``vlrollout/compat/``
these fail, each reported with its file, line and name:

- ``import x._y``, ``from x._y import z`` and ``from x import _y`` for a package not our own;
- ``getattr`` / ``hasattr`` / ``setattr`` / ``delattr`` with a literal private name;
- ``obj._name`` on anything but ``self`` or ``cls``,

unless the name is our own. A name is our own when our source defines it: a ``def`` or
``class``, an assigned or imported-as name, an attribute assigned on ``self`` or ``cls``, or a
marker that our code puts on another package's object and names ``_vlrollout_...``. Assigning
any other private attribute on a foreign object is reaching into it, so it does not make the name
ours. The standard library is not a third-party package: names taken from a module it provides
(``argparse._SubParsersAction``, the type of ``add_subparsers()``) pass.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = [REPO / "vlrollout", REPO / "processors", REPO / "rewards"]
OURS = {"vlrollout", "processors", "rewards"}
COMPAT = REPO / "vlrollout" / "compat"
ATTRIBUTE_BUILTINS = {"getattr", "hasattr", "setattr", "delattr"}
OUR_MARKER = "_vlrollout"


def is_private(name: str) -> bool:
    """``_x`` and ``__x`` are private; ``__x__`` and ``_`` are not."""
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and name != "_" and not dunder


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def defined_names(trees: Iterable[ast.AST]) -> set[str]:
    """Private names our source defines (see the module docstring)."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if _is_self(node.value) or node.attr.startswith(OUR_MARKER):
                    names.add(node.attr)
    return {n for n in names if is_private(n)}


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in OURS and top not in sys.stdlib_module_names


def _stdlib_aliases(tree: ast.AST) -> set[str]:
    """Local names bound to standard-library modules by ``import m`` / ``import m as n``."""
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] in sys.stdlib_module_names
    }


def private_uses(tree: ast.AST, ours: set[str]) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every reach into another package's private names in ``tree``."""
    stdlib = _stdlib_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name) and any(map(is_private, alias.name.split("."))):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _third_party(node.module):
                continue
            if any(map(is_private, node.module.split("."))):
                yield node.lineno, f"from {node.module} import"
            for alias in node.names:
                if is_private(alias.name):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ATTRIBUTE_BUILTINS and len(node.args) >= 2:
                name = node.args[1]
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and is_private(name.value)
                    and name.value not in ours
                ):
                    yield node.lineno, f'{node.func.id}(..., "{name.value}")'
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            if _is_self(node.value) or node.attr in ours:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in stdlib:
                continue
            yield node.lineno, f"{ast.unparse(node.value)}.{node.attr}"


def _sources() -> dict[Path, ast.AST]:
    return {
        path: ast.parse(path.read_text(), str(path))
        for root in PACKAGE
        for path in sorted(root.rglob("*.py"))
    }


def test_no_private_name_of_another_package_outside_the_compat_modules():
    sources = _sources()
    ours = defined_names(sources.values())
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path, tree in sources.items()
        if COMPAT not in path.parents
        for line, what in private_uses(tree, ours)
    ]
    assert found == [], (
        "private names of other packages outside vlrollout/compat/ (add a function there, behind "
        "its version check, and call it):\n" + "\n".join(found)
    )


CAUGHT = """
import torch._dynamo
from torch._dynamo import config
from transformers import _private_helper
from areal.infra import workflow_executor
import argparse


def f(model, config, site, sub: argparse._SubParsersAction):
    a = getattr(config, "_attn_implementation", None)
    b = config._name_or_path
    port = site._server.sockets[0]
    children = model._modules
    model._thirdparty_flag = True
    return self_like._own_helper(), torch._dynamo.config
"""


def test_the_fence_names_each_kind_of_reach_with_its_line():
    ours = defined_names(
        [ast.parse("def _own_helper(): pass\nclass A:\n    def m(self): self._x = 1")]
    )
    found = sorted(private_uses(ast.parse(CAUGHT), ours))
    assert found == [
        (2, "import torch._dynamo"),
        (3, "from torch._dynamo import"),
        (4, "from transformers import _private_helper"),
        (10, 'getattr(..., "_attn_implementation")'),
        (11, "config._name_or_path"),
        (12, "site._server"),
        (13, "model._modules"),
        (14, "model._thirdparty_flag"),
        (15, "torch._dynamo"),
    ]


def test_our_own_private_names_pass():
    ours = defined_names(
        [ast.parse("_CACHE = {}\ndef _helper(): pass\ndef g(engine): engine._vlrollout_flag = 1")]
    )
    code = ast.parse(
        "from vlrollout.rewards import pool\nfrom . import _sibling\n"
        "pool._CACHE.clear()\nmod._helper()\ngetattr(engine, '_vlrollout_flag', False)\n"
        "self._anything\n"
    )
    assert list(private_uses(code, ours)) == []
