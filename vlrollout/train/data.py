"""The items of a ``vlrollout train`` run: training and held-out items, and each step's share.

Items come from ``train_dataset.path`` and ``valid_dataset.path`` through the one item loader
(:func:`vlrollout.datasets.load_items`, any format it reads), or from the synthetic task's
generator (``vlrollout.task`` with ``vlrollout.data_seed`` / ``eval_seed``). :func:`batch_items` fixes the
order in which a run trains them, so a resumed run, the asynchronous loader
(:mod:`vlrollout.train.asynchronous`) and the TRL peer (``bench/trl_peer.py``) all see the same
items at the same step.
"""

from __future__ import annotations

import random

from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.errors import ConfigError
from vlrollout.eval.tasks import get_task
from vlrollout.logs import get_logger
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.messages import normalize_media
from vlrollout.readers.rows import check_data_path
from vlrollout.tiny.synthetic import generate_items
from vlrollout.train.config import TrainConfig, TrainSection

logger = get_logger(__name__)


def load_data(cfg: TrainConfig) -> tuple[list[dict], list[dict]]:
    """``(training items, held-out items)``.

    Training items come from ``train_dataset.path`` when it is set, else from the synthetic task
    (``vlrollout.task``, ``data_seed``); held-out items from ``valid_dataset.path`` when it is
    set, else from the synthetic task (``eval_seed``). Both files are read with the
    ``vlrollout`` data keys (``data_format``, ``data_map``, ``images_root``, ``prompt``). With
    ``vlrollout.eval_task`` the held-out file is read as ``vlrollout eval --task`` reads it (the
    task's prompt unless ``prompt`` is set) and its unreadable rows are kept as placeholders: the
    evaluator counts them as rejected with their reason, as ``vlrollout eval`` does.
    """
    vl = cfg.vlrollout
    if cfg.train_dataset.path:
        path = cfg.train_dataset.path
        check_data_path(path, "train_dataset.path")
        train = trainable_items(path, readable_items(path, read_file(path, vl, vl.prompt)))
    else:
        train = generate_items(vl.task, vl.train_items, vl.data_seed)
    path = cfg.valid_dataset.path if cfg.valid_dataset is not None else ""
    if path:
        check_data_path(path, "valid_dataset.path")
    if not path:
        return train, generate_items(vl.task, vl.eval_items, vl.eval_seed)
    if vl.eval_task is None:
        return train, readable_items(path, read_file(path, vl, vl.prompt))
    return train, read_file(path, vl, eval_prompt(vl))


def check_batch_fits(cfg: TrainConfig, train: list[dict]) -> None:
    """Refuse a batch larger than the training items (each step would train fewer than it
    says), and more steps than the learning-rate schedule: AReaL sizes it by
    ``total_train_epochs`` (``FinetuneSpec``), so later steps would train at its end (lr 0
    after a linear decay, rising again on a cosine).

    Raises:
        ConfigError: naming the numbers.
    """
    batch = cfg.train_dataset.batch_size
    if len(train) < batch:
        raise ConfigError(
            f"train_dataset.batch_size={batch} is more than the {len(train)} training items: a "
            "step would train fewer than it says; lower the batch size or add items"
        )
    per_epoch = len(train) // batch
    scheduled = cfg.total_train_epochs * per_epoch
    steps = cfg.total_train_steps
    if steps is not None and steps > scheduled:
        raise ConfigError(
            f"total_train_steps={steps} runs past the learning-rate schedule, which AReaL sizes "
            f"as total_train_epochs={cfg.total_train_epochs} x {per_epoch} steps per epoch "
            f"({len(train)} items // batch {batch}) = {scheduled} steps: raise "
            "total_train_epochs or lower total_train_steps"
        )


def eval_prompt(vl: TrainSection) -> str | None:
    """The prompt template of the held-out file: ``vlrollout.prompt``, else with ``eval_task``
    the task's own (what ``vlrollout eval --task`` uses without ``--prompt``)."""
    if vl.prompt is not None or vl.eval_task is None:
        return vl.prompt
    return get_task(vl.eval_task).prompt


def read_file(path: str, vl: TrainSection, prompt: str | None) -> list[dict]:
    """The items of a data file, read with the ``vlrollout`` data keys (bad rows are
    ``LOAD_ERROR`` placeholders)."""
    return load_items(
        path,
        fmt=vl.data_format,
        mapping=dict(vl.data_map) or None,
        images_root=vl.images_root,
        prompt=prompt,
    )


def readable_items(path: str, items: list[dict]) -> list[dict]:
    """``items`` (of file ``path``) without the placeholders of unreadable rows, each skipped with
    a warning."""
    for item in items:
        if LOAD_ERROR in item:
            error = item[LOAD_ERROR]
            logger.warning(
                "%s %s skipped: %s: %s", path, item["id"], error["reason"], error["detail"]
            )
    return [item for item in items if LOAD_ERROR not in item]


def trainable_items(path: str, items: list[dict]) -> list[dict]:
    """``items`` less the text-only ones when others carry images or videos, each skipped with a
    warning: AReaL joins a step's trajectories into one batch whose keys must agree, and a
    text-only episode carries no ``multi_modal_input`` (a run reaching one would stop mid-way).
    A set of text-only items is kept whole."""
    with_media = [_has_media(item) for item in items]
    if not any(with_media) or all(with_media):
        return items
    kept = []
    for item, media in zip(items, with_media, strict=True):
        if media:
            kept.append(item)
        else:
            logger.warning(
                "%s %s skipped: text_only: the training items carry images or videos and this "
                "one none (a step's trajectories share one batch)",
                path,
                item["id"],
            )
    return kept


def _has_media(item: dict) -> bool:
    try:
        found = normalize_media(
            item.get("messages") or "", item.get("images"), item.get("videos"), "item"
        )
    except PreprocessError:  # a bad item: its episodes are rejected with the reason
        return True
    return bool(found.images or found.videos)


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
