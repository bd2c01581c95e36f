"""The items of a ``vlrollout train`` run: training and held-out items, and each step's share.

Items come from ``train_dataset.path`` (and ``valid_dataset.path``) through the one item loader
(:func:`vlrollout.datasets.load_items`), or from the synthetic task's generator
(``vlrollout.task`` with ``vlrollout.data_seed`` / ``eval_seed``). :func:`batch_items` fixes the
order in which a run trains them, so a resumed run, the asynchronous loader
(:mod:`vlrollout.train.asynchronous`) and the TRL peer (``bench/trl_peer.py``) all see the same
items at the same step.
"""

from __future__ import annotations

import random

from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.logs import get_logger
from vlrollout.tiny.synthetic import generate_items
from vlrollout.train.config import TrainConfig

logger = get_logger(__name__)


def load_data(cfg: TrainConfig) -> tuple[list[dict], list[dict]]:
    """``(training items, held-out items)``: from the data files when ``train_dataset.path`` is
    set (held-out items from ``valid_dataset.path``, else generated), otherwise both generated
    by the synthetic task from their own seeds."""
    vl = cfg.vlrollout
    if not cfg.train_dataset.path:
        return (
            generate_items(vl.task, vl.train_items, vl.data_seed),
            generate_items(vl.task, vl.eval_items, vl.eval_seed),
        )
    train = readable_items(cfg.train_dataset.path)
    if cfg.valid_dataset is not None and cfg.valid_dataset.path:
        return train, readable_items(cfg.valid_dataset.path)
    return train, generate_items(vl.task, vl.eval_items, vl.eval_seed)


def readable_items(path: str) -> list[dict]:
    """The file's items; lines that are not items are skipped with a warning each."""
    items = load_items(path)
    for item in items:
        if LOAD_ERROR in item:
            logger.warning("%s %s skipped: %s", path, item["id"], item[LOAD_ERROR])
    return [item for item in items if LOAD_ERROR not in item]


def batch_items(items: list[dict], step: int, batch_size: int, seed: int) -> list[dict]:
    """Items of ``step`` (0-based): a fresh seeded permutation per epoch, so a resumed run sees
    the same items at the same step.

    >>> items = list(range(4))
    >>> sorted(batch_items(items, 0, 2, seed=1) + batch_items(items, 1, 2, seed=1))
    [0, 1, 2, 3]
    """
    per_epoch = max(1, len(items) // batch_size)
    epoch, i = divmod(step, per_epoch)
    order = list(range(len(items)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return [items[j] for j in order[i * batch_size : (i + 1) * batch_size]]
