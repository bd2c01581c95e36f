"""Docstring examples are tests (executable examples cannot drift from the code), collected under
the one import identity of each module (``vlrollout.processors.x``, never ``processors.x``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest


def _modules_with_examples() -> list[str]:
    """Every module of ours with a ``>>>`` example (processors/ and rewards/ are mapped folders, so
    ``walk_packages`` over ``vlrollout`` alone does not see them)."""
    import vlrollout.processors
    import vlrollout.rewards

    names = []
    for package in (vlrollout, vlrollout.processors, vlrollout.rewards):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            if any(t.examples for t in doctest.DocTestFinder().find(module)):
                names.append(info.name)
    return sorted(set(names))


MODULES = _modules_with_examples()


def test_examples_are_found_in_every_package():
    packages = {name.split(".")[1] for name in MODULES}
    assert {"processors", "rewards", "tiny"} <= packages


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures = []
    for test in doctest.DocTestFinder().find(module):
        runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
