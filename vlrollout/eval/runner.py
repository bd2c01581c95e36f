"""Running a predictor over items and scoring the completions with a task.

:func:`evaluate_items` is the one evaluator: ``vlrollout eval`` calls it with an output folder
(resumable), ``vlrollout train`` with none (its held-out curve). Output folder layout:

- ``eval.json``: the settings that shape the results; a rerun with the same ones resumes, with
  others it is refused unless ``--overwrite`` (:func:`prepare_output`), as ``vlrollout run`` does;
- ``predictions/<name>.json``: one finished item's :class:`~vlrollout.eval.prediction.Prediction`
  (``<name>`` is :func:`vlrollout.files.item_stem`) and the :data:`ITEM_KEY` of the item it
  answers, written atomically. A rerun reuses it only while the item's key is the same, so an item
  whose prompt or image changed since (an edited data file) runs again, and the others resume; a
  rejected prediction (a server error, say) is tried again too;
- ``results.json``, ``scores.jsonl`` and ``report.html`` (:mod:`vlrollout.eval.results`,
  :mod:`vlrollout.eval.report`).

Nothing is dropped: an item the loader could not read (``LOAD_ERROR``), one the task refuses
(:meth:`EvalTask.check_item`), one the predictor could not run and one the task could not score are
each counted under their reason and listed, never scored as 0. Scoring always reads every
prediction back, so a resumed run scores exactly what a single run would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrollout.datasets import LOAD_ERROR
from vlrollout.errors import OutputFolderError
from vlrollout.eval.intervals import bootstrap_interval, pass_at_k
from vlrollout.eval.prediction import Prediction, Predictor
from vlrollout.eval.tasks import EvalTask, ItemScore
from vlrollout.files import (
    TEMP_SUFFIX,
    atomic_write_json,
    check_writable_folder,
    differences,
    item_stem,
    remove_outputs,
    remove_temp_files,
)
from vlrollout.logs import get_logger
from vlrollout.processors.cache import item_key
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.messages import check_media_fields

logger = get_logger("vlrollout.eval")

PREDICTIONS = "predictions"
SETTINGS_FILE = "eval.json"
EVAL_OUTPUTS = (PREDICTIONS, "results.json", "scores.jsonl", "report.html", SETTINGS_FILE)
"""What an evaluation writes into its folder (what ``--overwrite`` removes, and nothing else)."""
NOT_SCORABLE = "not_scorable"
"""Reason of an item the task refuses before it runs (the task's words are the detail)."""
COMPLETION_COUNT = "completion_count"
"""Reason of a prediction with another number of completions than ``k`` (a server that ignores
``n``, or returned nothing): its samples cannot be averaged with the others'."""
SCORE_ERROR = "score_error"
"""Reason of a completion the task raised on while scoring (a bug or an item it did not check)."""
ITEM_KEY = "item_key"
"""Field of a prediction file: :func:`vlrollout.processors.cache.item_key` of the item it answers
(a digest of its messages and of each image and video: path, size and modification time of a
file, the bytes or pixels of an inline one), the key the prepared-prompt cache uses. A prediction
whose key is not the item's current one answers another prompt and is made again."""


@dataclass
class EvalResult:
    """What an evaluation found.

    Attributes:
        task: The task's name.
        primary: The task's headline metric.
        k: Completions per item.
        metrics: ``{name: {"value": float, "ci95": [lo, hi]}}`` over every scored item.
        per_split: ``{split: {"items": n, "metrics": {name: {"value", "ci95"}}}}``.
        scores: One :class:`ItemScore` per scored item, its values the mean over its ``k``
            completions (with ``pass@k`` when the task has a ``correct_key`` and ``k > 1``);
            ``details["samples"]`` holds each completion's own score.
        rejections: ``{"id", "reason", "detail"}`` of every item that was not scored.
        predictions: Every run item's :class:`Prediction` (completions, geometry), by id.
        redone: Ids of the items whose finished prediction in the output folder was made for
            another version of the item (its prompt or an image changed) and that ran again.
    """

    task: str
    primary: str
    k: int
    metrics: dict[str, dict[str, Any]]
    per_split: dict[str, dict[str, Any]]
    scores: list[ItemScore] = field(default_factory=list)
    rejections: list[dict[str, str]] = field(default_factory=list)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    redone: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> dict[str, int]:
        """``{reason: count}`` of the items not scored, most frequent first."""
        return dict(Counter(r["reason"] for r in self.rejections).most_common())

    @property
    def unreadable(self) -> dict[str, int]:
        """``{reason: count}`` of the completions the task scored as unreadable (no box, no
        number: ``details["reason"]``), most frequent first; they count in the metrics as 0."""
        reasons = Counter(
            str(sample.details["reason"])
            for score in self.scores
            for sample in score.details.get("samples", [score])
            if sample.details.get("reason")
        )
        return dict(reasons.most_common())

    def value(self, name: str) -> float | None:
        """The overall value of metric ``name`` (``None`` when it was not computed)."""
        entry = self.metrics.get(name)
        return None if entry is None else entry["value"]


SCORING_SETTINGS = ("box_format",)
"""Settings that change how completions are scored, not the completions: a rerun with others
rescores the predictions on disk."""


def prepare_output(output: Path, settings: Mapping[str, Any], overwrite: bool = False) -> None:
    """Make ``output`` ready for an evaluation with ``settings``: writable, and new, a resume of
    the same settings (:data:`SCORING_SETTINGS` may differ: the predictions are rescored), or
    cleared by ``overwrite`` (only the files an evaluation writes).

    Raises:
        OutputFolderError: the folder is a file or not writable, or holds predictions made with
            other settings (each difference named).
    """
    check_writable_folder(output)
    path = output / SETTINGS_FILE
    new = json.loads(json.dumps(dict(settings), default=str))
    predicted = any((output / PREDICTIONS).glob("*.json"))
    if overwrite:
        remove_outputs(output, EVAL_OUTPUTS)
    elif path.exists() and predicted:  # settings that made no prediction guard nothing
        try:
            old = json.loads(path.read_text()).get("settings", {})
        except (OSError, ValueError, AttributeError):
            old = {}
        diff = differences(
            {k: v for k, v in old.items() if k not in SCORING_SETTINGS},
            {k: v for k, v in new.items() if k not in SCORING_SETTINGS},
        )
        if diff:
            raise OutputFolderError(
                f"output folder {output} holds predictions made with other settings "
                f"({'; '.join(diff)}); use another --output folder, or --overwrite to delete them"
            )
    elif predicted and not path.exists():
        raise OutputFolderError(
            f"output folder {output} holds predictions without {SETTINGS_FILE}; use another "
            "--output folder, or --overwrite to delete them"
        )
    atomic_write_json(path, {"settings": new})


def prediction_path(output: Path, item_id: str) -> Path:
    """Where the prediction of item ``item_id`` is kept."""
    return output / PREDICTIONS / f"{item_stem(item_id)}.json"


def read_predictions(output: Path, warn: bool = True) -> dict[str, tuple[Prediction, str | None]]:
    """Every prediction file in ``output``, by the id stored inside it, with the
    :data:`ITEM_KEY` it was made for (``None`` when the file has none). An unreadable file is
    skipped, with a warning unless ``warn`` is false (a look ahead that the evaluation repeats)."""
    found: dict[str, tuple[Prediction, str | None]] = {}
    for path in sorted((output / PREDICTIONS).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            key = data.pop(ITEM_KEY, None)
            prediction = Prediction(**data)
        except (OSError, ValueError, TypeError, AttributeError):
            if warn:
                logger.warning("ignoring unreadable prediction file %s (the item runs again)", path)
            continue
        found[prediction.id] = (prediction, key if isinstance(key, str) else None)
    return found


@dataclass
class Resume:
    """What an output folder holds for a set of items.

    Attributes:
        keys: Each item's :data:`ITEM_KEY`, by id (written beside its new prediction).
        reused: The finished predictions made for the items as they are now, by id.
        redone: Ids of the items with a finished prediction made for another version of them
            (another key, or none): they run again.
    """

    keys: dict[str, str] = field(default_factory=dict)
    reused: dict[str, Prediction] = field(default_factory=dict)
    redone: list[str] = field(default_factory=list)


def resume_state(output: Path, items: Sequence[dict[str, Any]], warn: bool = True) -> Resume:
    """The predictions in ``output`` that ``items`` may reuse: finished (not rejected) and made
    for the item's current :data:`ITEM_KEY`; the ids of those that changed since. ``warn``: as
    :func:`read_predictions`."""
    on_disk = read_predictions(output, warn) if (output / PREDICTIONS).is_dir() else {}
    state = Resume(keys={item["id"]: item_key(item) for item in items})
    for item in items:
        prediction, key = on_disk.get(item["id"], (None, None))
        if prediction is None or prediction.rejection is not None:
            continue
        if key == state.keys[item["id"]]:
            state.reused[item["id"]] = prediction
        else:
            state.redone.append(item["id"])
    return state


def refusal(task: EvalTask, item: dict[str, Any]) -> dict[str, str] | None:
    """``{"id", "reason", "detail"}`` when ``item`` cannot be run or scored, else ``None``: the
    loader's placeholder for a bad row keeps its reason; the task's refusal is
    :data:`NOT_SCORABLE` with the task's words."""
    item_id = str(item.get("id"))
    if LOAD_ERROR in item:
        error = item[LOAD_ERROR]
        return {"id": item_id, "reason": str(error["reason"]), "detail": str(error["detail"])}
    split = item.get("split")
    if split is not None and (isinstance(split, bool) or not isinstance(split, (str, int))):
        detail = f"field 'split' is a {type(split).__name__}, not a split name: {split!r:.60}"
        return {"id": item_id, "reason": "bad_row", "detail": detail}
    try:  # a malformed media field is named as it is, not as the task's missing images
        check_media_fields(item, ("images", "videos"), f"item {item_id}")
    except PreprocessError as e:
        return {"id": item_id, "reason": e.reason, "detail": e.detail}
    why = task.check_item(item)
    if why is not None:
        return {"id": item_id, "reason": NOT_SCORABLE, "detail": why}
    return None


def pending_items(
    task: EvalTask, items: Sequence[dict[str, Any]], output: Path
) -> list[dict[str, Any]]:
    """The items an evaluation into ``output`` still has to run: those the task accepts without
    a finished prediction made for them as they are now (:func:`resume_state`). Empty: no model
    is needed to score them. Quiet: the evaluation reads the folder again and says what it skips."""
    runnable = [item for item in items if refusal(task, item) is None]
    reused = resume_state(output, runnable, warn=False).reused
    return [item for item in runnable if item["id"] not in reused]


async def predict_items(
    predictor: Predictor,
    items: Sequence[dict[str, Any]],
    output: Path | None,
    k: int = 1,
    concurrency: int = 4,
    progress: bool = True,
    resume: Resume | None = None,
) -> dict[str, Prediction]:
    """Predictions of ``items``, at most ``concurrency`` in flight: ``resume.reused`` as they
    are, the others run; with ``output``, each new one is written as it finishes, with its
    item's key from ``resume.keys`` (:func:`resume_state` of ``output``).

    Cancelling the task stops the items in flight (not written, so a rerun does them).
    """
    resume = resume or Resume()
    done: dict[str, Prediction] = dict(resume.reused)
    if output is not None:
        remove_temp_files(output)
        (output / PREDICTIONS).mkdir(parents=True, exist_ok=True)
        for leftover in (output / PREDICTIONS).glob(f".*{TEMP_SUFFIX}"):  # a killed run's
            leftover.unlink(missing_ok=True)
    todo = [item for item in items if item["id"] not in done]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), initial=len(done), unit="item", desc="eval")
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async def worker() -> None:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                prediction = await predictor.predict(item, k)
                prediction = dataclasses.replace(prediction, id=item["id"])
            except Exception as e:  # noqa: BLE001 - the contract says never; counted if it does
                logger.debug("predictor failed on item %s", item["id"], exc_info=True)
                detail = f"{type(e).__name__}: {e}"
                prediction = Prediction.rejected(item["id"], "predictor_error", detail)
            if output is not None:
                record = {**prediction.to_dict(), ITEM_KEY: resume.keys.get(item["id"])}
                atomic_write_json(prediction_path(output, item["id"]), record)
            done[item["id"]] = prediction
            if bar is not None:
                bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    finally:
        if bar is not None:
            bar.close()
    return done


def score_item(
    task: EvalTask, item: dict[str, Any], prediction: Prediction, family: str, k: int
) -> ItemScore | dict[str, str]:
    """The item's score over its completions, or ``{"id", "reason", "detail"}`` why it has none.

    Each completion is scored on its own; the item's values are their means, plus ``pass@k``
    (the unbiased estimator over the completions, from the task's ``correct_key``) when ``k > 1``.
    """
    item_id = item["id"]
    if prediction.rejection is not None:
        return {"id": item_id, **{k_: str(v) for k_, v in prediction.rejection.items()}}
    if len(prediction.completions) != k:
        got = len(prediction.completions)
        detail = f"item {item_id}: asked for {k} completion(s), the predictor returned {got}"
        return {"id": item_id, "reason": COMPLETION_COUNT, "detail": detail}
    samples = []
    for completion in prediction.completions:
        try:
            samples.append(task.score(item, completion, prediction.geometry, family))
        except Exception as e:  # noqa: BLE001 - counted with its reason, never a silent 0
            logger.debug("scoring item %s failed", item_id, exc_info=True)
            return {"id": item_id, "reason": SCORE_ERROR, "detail": f"{type(e).__name__}: {e}"}
    names = list(dict.fromkeys(name for s in samples for name in s.values))
    values = {
        name: statistics.fmean(s.values[name] for s in samples if name in s.values)
        for name in names
    }
    if k > 1 and task.correct_key is not None:
        correct = sum(1 for s in samples if s.values.get(task.correct_key, 0.0) >= 0.5)
        values[f"pass@{k}"] = pass_at_k(len(samples), correct, k)
    details = {**samples[0].details, "samples": samples}
    return dataclasses.replace(samples[0], values=values, details=details)


def metric_function(
    task: EvalTask, items: Mapping[str, dict[str, Any]], k: int
) -> Callable[[Sequence[ItemScore]], dict[str, float]]:
    """The task's metrics over a set of item scores: its ``aggregate`` of each completion index
    (the ``j``-th completion of every item), averaged over the ``k`` indices, plus the mean
    ``pass@k``. With ``k == 1`` this is the task's ``aggregate`` itself."""

    def metrics(scores: Sequence[ItemScore]) -> dict[str, float]:
        if not scores:
            return {}
        runs = [task.aggregate([s.details["samples"][j] for s in scores], items) for j in range(k)]
        out = {name: statistics.fmean(r[name] for r in runs if name in r) for name in runs[0]}
        key = f"pass@{k}"
        if k > 1 and all(key in s.values for s in scores):
            out[key] = statistics.fmean(s.values[key] for s in scores)
        return out

    return metrics


def with_intervals(
    scores: Sequence[ItemScore],
    metrics: Callable[[Sequence[ItemScore]], dict[str, float]],
    n: int,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """``{name: {"value", "ci95"}}``: each metric with its bootstrap interval over items (the
    same resamples for every metric: each resample's metrics are computed once). ``n == 0``
    leaves the intervals out (``None``)."""
    values = metrics(scores)
    cache: dict[tuple[int, ...], dict[str, float]] = {}

    def one(name: str) -> Callable[[Sequence[ItemScore]], float]:
        def value(sample: Sequence[ItemScore]) -> float:
            key = tuple(id(s) for s in sample)
            if key not in cache:
                cache[key] = metrics(sample)
            return cache[key].get(name, float("nan"))

        return value

    out = {}
    for name, v in values.items():
        ci = None
        if n > 0 and scores:
            lo, hi = bootstrap_interval(scores, one(name), n=n, seed=seed)
            ci = [lo, hi]
        out[name] = {"value": v, "ci95": ci}
    return out


async def aevaluate_items(
    task: EvalTask,
    predictor: Predictor,
    items: Sequence[dict[str, Any]],
    output: Path | None,
    k: int = 1,
    concurrency: int = 4,
    progress: bool = True,
    *,
    family: str,
    seed: int = 0,
    bootstrap: int = 1000,
) -> EvalResult:
    """:func:`evaluate_items` inside a running event loop."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    output = Path(output) if output is not None else None
    rejections, runnable = [], []
    for item in items:
        refused = refusal(task, item)
        if refused is None:
            runnable.append(item)
        else:
            rejections.append(refused)
    resume = None if output is None else await asyncio.to_thread(resume_state, output, runnable)
    if resume is not None and resume.redone:
        logger.info(
            "%d item(s) changed since their predictions were made: run again", len(resume.redone)
        )
    predictions = await predict_items(predictor, runnable, output, k, concurrency, progress, resume)
    scores = []
    for item in runnable:
        scored = await asyncio.to_thread(score_item, task, item, predictions[item["id"]], family, k)
        if isinstance(scored, dict):
            rejections.append(scored)
        else:
            scores.append(scored)
    by_id = {item["id"]: item for item in runnable}
    metrics = metric_function(task, by_id, k)
    overall = await asyncio.to_thread(with_intervals, scores, metrics, bootstrap, seed)
    splits = sorted({s.split for s in scores})
    per_split = {}
    for split in splits:
        subset = [s for s in scores if s.split == split]
        per_split[split] = {
            "items": len(subset),
            "metrics": overall
            if len(splits) == 1
            else await asyncio.to_thread(with_intervals, subset, metrics, bootstrap, seed),
        }
    return EvalResult(
        task=task.name,
        primary=task.primary,
        k=k,
        metrics=overall,
        per_split=per_split,
        scores=scores,
        rejections=rejections,
        predictions=predictions,
        redone=resume.redone if resume is not None else [],
    )


def evaluate_items(
    task: EvalTask,
    predictor: Predictor,
    items: Sequence[dict[str, Any]],
    output: Path | None,
    k: int = 1,
    concurrency: int = 4,
    progress: bool = True,
    *,
    family: str,
    seed: int = 0,
    bootstrap: int = 1000,
) -> EvalResult:
    """Run ``predictor`` over ``items`` and score the completions with ``task``.

    Args:
        task: What is measured (:func:`vlrollout.eval.tasks.get_task`).
        predictor: The model source (local or training engine, remote engine, OpenAI server).
        items: Items from :func:`vlrollout.datasets.load_items` (``LOAD_ERROR`` placeholders
            included: they are counted as rejected with their reason).
        output: Folder for the resumable predictions (see the module docstring), or ``None`` to
            keep them in memory only.
        k: Completions per item (greedy when 1; sampled, with ``pass@k``, when more).
        concurrency: Items in flight at once.
        progress: Show a progress bar.
        family: The model family (:mod:`vlrollout.families` name): how its boxes are read.
        seed: Seed of the bootstrap resamples.
        bootstrap: Resamples per confidence interval (0: no intervals).

    Example:
        >>> # result = evaluate_items(get_task("refcoco"), predictor, items, Path("out"),
        >>> #                         family="qwen2_vl"); result.value("ACC@0.5")
    """
    return asyncio.run(
        aevaluate_items(
            task,
            predictor,
            items,
            output,
            k,
            concurrency,
            progress,
            family=family,
            seed=seed,
            bootstrap=bootstrap,
        )
    )
