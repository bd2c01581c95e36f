"""The evaluation splits of the learning benchmarks: which held-out items a record is measured on.

The recipes' held-out items are synthetic (``vlrollout.tiny.synthetic.generate_items``), drawn
from ``vlrollout.eval_seed``. Two seeds, two jobs:

- ``dev`` (seed 200, the recipes' own ``vlrollout.eval_seed``) is for choosing: every recipe,
  lever and starting checkpoint was picked on its items, so a number measured there is
  flattered by those choices.
- ``test`` (seed 7001) is for reporting: no recipe, lever or checkpoint was chosen on its items
  (nothing in the repository used the seed before, and none of its items' images is one of the
  training items of ``vlrollout.data_seed`` 100), so the learning and vs-TRL records the docs
  cite are measured there. Develop on ``dev``; a change made because of a ``test`` number makes
  ``test`` a development split, and the next report needs a new seed.

A benchmark selects a split with ``--split`` (:func:`add_split`) and passes
:func:`eval_override` to every run, then records ``split`` and ``eval_seed`` in its numbers.

    >>> eval_override("test")
    'vlrollout.eval_seed=7001'
"""

from __future__ import annotations

import argparse

SPLITS: dict[str, int] = {"dev": 200, "test": 7001}
"""Split name -> ``vlrollout.eval_seed`` of its held-out items."""
DEFAULT = "test"
"""The split a benchmark reports on unless told otherwise (the one the docs cite)."""


def eval_override(split: str) -> str:
    """The ``KEY=VALUE`` override that makes a run evaluate on ``split``'s items."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    return f"vlrollout.eval_seed={SPLITS[split]}"


def add_split(parser: argparse.ArgumentParser) -> None:
    """``--split dev|test``: the held-out items the runs are evaluated on (default ``test``)."""
    parser.add_argument(
        "--split",
        choices=sorted(SPLITS),
        default=DEFAULT,
        help=(
            f"held-out items to evaluate on: test (eval_seed {SPLITS['test']}, never used to "
            f"choose anything; the default, and the split the docs cite) or dev (eval_seed "
            f"{SPLITS['dev']}, the recipes' own, for choosing recipes and levers)"
        ),
    )


def refuse_eval_seed(parser: argparse.ArgumentParser, overrides: list[str]) -> None:
    """Exit with a usage error where an override sets ``vlrollout.eval_seed`` itself (it would
    silently replace the split's seed, and the record would name the wrong split)."""
    if any(o.partition("=")[0].lstrip("+") == "vlrollout.eval_seed" for o in overrides):
        parser.error("give the held-out items with --split, not a vlrollout.eval_seed override")
