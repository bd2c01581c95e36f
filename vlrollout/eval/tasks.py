"""Evaluation tasks: what an item needs, how one completion is scored, how a split is summarised.

A task scores each completion on its own (:meth:`EvalTask.score` -> :class:`ItemScore`) and
summarises a set of scores (:meth:`EvalTask.aggregate`). The evaluator calls ``aggregate`` once per
split with that split's scores (and once over all of them), so a task never groups by split itself.

==========  ==========================================  ===============  ===============
task        metrics (``aggregate``)                     primary          pass@k from
==========  ==========================================  ===============  ===============
refcoco     IoU, ACC@0.1/0.3/0.5/0.7/0.9, Center_ACC     ACC@0.5          ACC@0.5
caption     BLEU-1..4, ROUGE-L, CIDEr-D (over the split)  CIDEr-D          (none)
count       exact_match                                 exact_match      exact_match
mc          exact_match                                 exact_match      exact_match
vqa         exact_match (VQA accuracy)                  exact_match      exact_match
==========  ==========================================  ===============  ===============

The formulas and what they equal (lmms-eval, pycocoevalcap, the official VQA evaluation) are in
:mod:`vlrollout.eval.metrics` and ``docs/eval_metrics.md``. A completion that cannot be read (no
box, no number) scores 0 on every value, keeps its place in the denominator and says why in
``details["reason"]``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from vlrollout.eval.metrics.boxes import (
    MISSED,
    REC_METRICS,
    normalise_box,
    original_size,
    read_box,
    rec_values,
)
from vlrollout.eval.metrics.captions import bleu_from_counts, caption_metrics, caption_stats
from vlrollout.readers.fields import text_list_problem
from vlrollout.readers.prompts import TASK_PROMPTS
from vlrollout.rewards.answer import (
    ChoiceReward,
    CountReward,
    choice_text_letter,
    count_gold,
    letter_text_clash,
)
from vlrollout.rewards.grounding import label_boxes, label_frame_problem, overlaps
from vlrollout.rewards.ptb_tokenizer import ptb_tokenize
from vlrollout.rewards.text_extract import answer_region
from vlrollout.rewards.vqa_answers import vqa_accuracy


@dataclass(frozen=True)
class ItemScore:
    """One completion's (or, after the evaluator averages them, one item's) score.

    Attributes:
        id: The item's id.
        split: ``item["split"]``, or ``"all"``.
        values: Per-completion values the evaluator averages over items (``IoU``, ``ACC@0.5``,
            ``exact_match``, ...).
        details: For the report: ``prediction`` (the parsed answer, caption, or the first box as
            written, in ``frame``), ``reason`` (why the completion could not be read, else
            ``None``) and, for boxes, ``pred_boxes``/``true_boxes`` in original pixels.
    """

    id: str
    split: str
    values: dict[str, float]
    details: dict[str, Any]


@runtime_checkable
class EvalTask(Protocol):
    """A benchmark task (see the module docstring for the five shipped ones)."""

    name: str
    prompt: str
    primary: str
    correct_key: str | None

    def check_item(self, item: dict[str, Any]) -> str | None:
        """Why ``item`` cannot be scored (the missing or malformed field), else ``None``."""

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        """Score one completion of ``item``; ``geometry`` is each image's, ``family`` the
        :mod:`vlrollout.families` name of the model (how it writes boxes)."""

    def aggregate(
        self, scores: Sequence[ItemScore], items: Mapping[str, dict[str, Any]]
    ) -> dict[str, float]:
        """The task's metrics over ``scores`` (one split's, or all); ``items`` maps ids to items."""


def _split(item: Mapping[str, Any]) -> str:
    """The item's split as text (``0`` is split ``"0"``); ``"all"`` when it names none."""
    split = item.get("split")
    return "all" if split is None or split == "" else str(split)


def _prompt_needs(item: Mapping[str, Any], field: str, what: str) -> str | None:
    """A refusal when the item has neither ``field`` (a non-empty string) nor ``messages``."""
    if item.get("messages"):
        return None
    value = item.get(field)
    if isinstance(value, str) and value.strip():
        return None
    return f"missing field {field!r} ({what}) and no 'messages' to prompt with"


def _answer_missing(item: Mapping[str, Any], what: str) -> str | None:
    """A refusal when the item's ``answer`` is absent, null or a blank string (named as such,
    not as a value of the wrong kind)."""
    raw = item.get("answer")
    if raw is None:
        return f"missing field 'answer' ({what})"
    if isinstance(raw, str) and not raw.strip():
        return "field 'answer' is blank"
    return None


def _needs_images(item: Mapping[str, Any]) -> str | None:
    images = item.get("images")
    if not isinstance(images, (list, tuple)) or not images:
        return "missing field 'images' (a list with the item's image)"
    return None


def mean_values(scores: Sequence[ItemScore], names: Sequence[str]) -> dict[str, float]:
    """The mean of each value over ``scores`` (empty scores: no metrics)."""
    if not scores:
        return {}
    return {name: statistics.fmean(s.values[name] for s in scores) for name in names}


class _TaskBase:
    """What every shipped task shares: its name's default prompt and mean aggregation."""

    name = ""
    primary = "exact_match"
    correct_key: str | None = "exact_match"
    metrics: tuple[str, ...] = ("exact_match",)

    @property
    def prompt(self) -> str:
        """The default prompt template of this task (:data:`vlrollout.readers.prompts.TASK_PROMPTS`)."""
        return TASK_PROMPTS[self.name]

    def aggregate(
        self, scores: Sequence[ItemScore], items: Mapping[str, dict[str, Any]]
    ) -> dict[str, float]:
        return mean_values(scores, self.metrics)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _numbers_only(boxes: Any) -> bool:
    """Whether ``boxes`` (one box or a list of them) holds only ints and floats: a string or a
    boolean coordinate is a data error, never read as a number."""
    values = boxes if isinstance(boxes, (list, tuple)) else [boxes]
    for value in values:
        if isinstance(value, (list, tuple)):
            if not _numbers_only(value):
                return False
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
    return True


def _box_text(box: Sequence[float]) -> str:
    """A box as the model wrote it, in its frame (``details["frame"]``): ``[161, 119.5, 483, 357]``."""
    return "[" + ", ".join(f"{v:.10g}" for v in box) + "]"


def _check_true_box(item: Mapping[str, Any], box: list[float], width: float, height: float):
    """Refuse a true box no prediction can be scored against: one wholly outside the image (its
    IoU with any box on the image is 0), or one written in fractions of the image (every
    coordinate in 0-1 and not all whole: under a pixel, read as original pixels).

    Raises:
        ValueError: naming the item, the field and the box.
    """
    where = f"item {item.get('id')}: field 'boxes' box {_box_text(box)}"
    if not overlaps(box, width, height):
        raise ValueError(
            f"{where} lies outside the {width:g}x{height:g} image, so every prediction would "
            "score 0; fix the label"
        )
    if (problem := label_frame_problem(box, "original")) is not None:
        raise ValueError(f"{where} {problem} (the {width:g}x{height:g} image's original pixels)")


class RefcocoTask(_TaskBase):
    """Referring-expression grounding scored as lmms-eval's ``refcoco_bbox_rec``
    (:mod:`vlrollout.eval.metrics.boxes`). Items: ``boxes`` (one ``[x1, y1, x2, y2]`` in original
    pixels), ``expression`` or ``messages``, ``images``."""

    name = "refcoco"
    primary = "ACC@0.5"
    correct_key = "ACC@0.5"
    metrics = REC_METRICS

    def check_item(self, item: dict[str, Any]) -> str | None:
        if "boxes" not in item or item["boxes"] is None:
            return "missing field 'boxes' (one [x1, y1, x2, y2] box in original pixels)"
        if not _numbers_only(item["boxes"]):
            return (
                f"field 'boxes' = {item['boxes']!r:.120} holds something other than numbers; "
                "write the box as [x1, y1, x2, y2] numbers in original pixels"
            )
        try:
            boxes = label_boxes(item["boxes"], "boxes")
        except ValueError as e:
            return str(e)
        if len(boxes) != 1:
            return f"field 'boxes' holds {len(boxes)} boxes; a referring expression has one"
        x1, y1, x2, y2 = boxes[0]
        if x2 <= x1 or y2 <= y1:
            return f"field 'boxes' box {list(boxes[0])} has no area (degenerate_box)"
        return _prompt_needs(item, "expression", "the referring expression") or _needs_images(item)

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        if not geometry:
            raise ValueError(
                f"item {item.get('id')}: no image geometry; boxes cannot be converted to "
                "original pixels (the predictor records one per image)"
            )
        true = list(label_boxes(item["boxes"], "boxes")[0])
        width, height = original_size(geometry[0])
        _check_true_box(item, true, width, height)
        reading = read_box(completion, family, geometry[0])
        details: dict[str, Any] = {
            "prediction": _box_text(reading.written) if reading.written else None,
            "frame": reading.frame.value,
            "num_boxes": reading.num_boxes,
            "true_boxes": [true],
            "pred_boxes": [list(reading.box)] if reading.box else [],
            "reason": reading.reason,
        }
        if reading.box is None:
            values = dict(MISSED)
        else:
            values = rec_values(
                normalise_box(true, width, height), normalise_box(reading.box, width, height)
            )
        return ItemScore(str(item["id"]), _split(item), values, details)


class CaptionTask(_TaskBase):
    """Captioning scored as pycocoevalcap over the split (:mod:`vlrollout.eval.metrics.captions`).

    Items: ``captions`` (the reference captions), ``images``. The per-item values (sentence
    ``BLEU-4`` and ``ROUGE-L`` as the toolkit's per-image lists) are for ranking items in the
    report; the metrics come from :meth:`aggregate` over the whole split.
    """

    name = "caption"
    primary = "CIDEr-D"
    correct_key = None

    def check_item(self, item: dict[str, Any]) -> str | None:
        captions = item.get("captions")
        if captions is None:
            return "missing field 'captions' (a non-empty list of reference caption strings)"
        if (problem := text_list_problem(captions, "caption")) is not None:
            return f"field 'captions' {problem}; fix the annotation"
        if not any(ptb_tokenize(c) for c in captions):
            return (
                f"field 'captions' = {list(captions)!r}: every reference is punctuation only, "
                "which COCO's tokenizer drops (no words to match); fix the annotation"
            )
        return _needs_images(item)

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        caption = answer_region(completion, True).strip()
        stats = caption_stats(caption, tuple(item["captions"]))  # cached for aggregate
        values = {"BLEU-4": bleu_from_counts([stats.bleu])[3], "ROUGE-L": stats.rouge_l}
        reason = None if stats.tokens else "empty_caption"
        details = {"prediction": caption, "references": list(item["captions"]), "reason": reason}
        return ItemScore(str(item["id"]), _split(item), values, details)

    def aggregate(
        self, scores: Sequence[ItemScore], items: Mapping[str, dict[str, Any]]
    ) -> dict[str, float]:
        """Corpus metrics over ``scores``: each score is one image (a resample may repeat one)."""
        predictions = [s.details["prediction"] for s in scores]
        return caption_metrics(predictions, [items[s.id]["captions"] for s in scores])


def _exact(item: dict[str, Any], value: float, pred: Any, reason: str | None) -> ItemScore:
    details = {"prediction": None if pred is None else str(pred), "reason": reason}
    return ItemScore(str(item["id"]), _split(item), {"exact_match": value}, details)


class CountTask(_TaskBase):
    """Counting: exact match of the count read from the answer (digits, ``[n]``, number words:
    :func:`vlrollout.rewards.answer.read_count`). Items: ``answer`` (an integer or a string
    holding one), ``question`` or ``messages``."""

    name = "count"

    @staticmethod
    def _gold(raw: Any) -> int | None:
        """The true count as the count reward reads it (:func:`~vlrollout.rewards.answer.
        count_gold`), ``None`` when it is not one."""
        try:
            return count_gold(raw)
        except ValueError:
            return None

    def check_item(self, item: dict[str, Any]) -> str | None:
        raw = item.get("answer")
        if missing := _answer_missing(item, "the true count"):
            return missing
        if self._gold(raw) is None:
            return (
                f"field 'answer' = {raw!r} is not one count (a whole number, 0 or more, or a "
                "string with one)"
            )
        return _prompt_needs(item, "question", "the question")

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        gold = self._gold(item["answer"])
        result = CountReward().score("", completion, [], [], answer=gold)
        return _exact(item, result.value, result.details.get("pred"), result.reason)


def _answer_text(value: Any) -> str | None:
    """One human answer as text: a string (blank ones too: the official VQA evaluation keeps a
    blank answer among the ten, where it matches no prediction), a number as a table column of
    numeric answers holds it (``2`` and ``2.0`` are ``"2"``, ``2.5`` is ``"2.5"``), or VQAv2's
    ``{"answer", "answer_confidence", "answer_id"}`` struct (its ``answer``, as lmms-eval reads
    it); ``None`` for anything else."""
    if isinstance(value, dict) and "answer" in value:
        value = value["answer"]
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return value if isinstance(value, str) else None


def _is_digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits (``"2"``), as AI2D writes an index; ``"²"`` is not."""
    text = text.strip()
    return text.isascii() and text.isdigit()


class ChoiceTask(_TaskBase):
    """Multiple choice, scored by :class:`vlrollout.rewards.answer.ChoiceReward`: the letter the
    answer gives (``B``, ``(B)``, ``the answer is B``), else the one choice whose text it gives
    (:func:`~vlrollout.rewards.vqa_answers.match_choice_text`). Items: ``choices``, ``answer``
    (a letter, a 0-based index or a choice's text), ``question`` or ``messages``."""

    name = "mc"

    def check_item(self, item: dict[str, Any]) -> str | None:
        choices = item.get("choices")
        if choices is None:
            return "missing field 'choices' (a list of 2 to 26 option texts)"
        if not isinstance(choices, (list, tuple)):
            kind = type(choices).__name__
            return f"field 'choices' is a {kind}; give a list of 2 to 26 option texts"
        if not 2 <= len(choices) <= 26:
            return f"field 'choices' has {len(choices)} options; give 2 to 26 option texts"
        first: dict[str, int] = {}
        for k, raw in enumerate(choices, 1):
            choice = str(raw)
            if raw is None or not choice.strip():
                return f"field 'choices': option {chr(ord('A') + k - 1)} is {raw!r}; fix the item"
            if choice in first:
                return (
                    f"field 'choices': choices {first[choice]} and {k} are both {choice!r}, so an "
                    "answer naming it could not be told apart; fix the item"
                )
            first[choice] = k
        if clash := self._index_text_clash(item):
            return clash
        if missing := _answer_missing(item, "the right choice"):
            return missing
        if self._gold(item) is None:
            return (
                f"field 'answer' = {item.get('answer')!r} is not a choice: a letter A-"
                f"{chr(ord('A') + len(choices) - 1)}, a 0-based index or one of the choices"
            )
        return _prompt_needs(item, "question", "the question")

    @staticmethod
    def _gold(item: dict[str, Any]) -> str | None:
        """The gold letter: ``answer`` as a letter, a 0-based index (an int, or a digit string
        as AI2D stores it), else a choice's text."""
        raw, choices = item.get("answer"), list(item["choices"])
        if isinstance(raw, str) and _is_digits(raw):
            raw = int(raw) if int(raw) < len(choices) else raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            return chr(ord("A") + raw) if 0 <= raw < len(choices) else None
        if not isinstance(raw, str):
            return None
        letter = raw.strip().strip("().").upper()
        if len(letter) == 1 and 0 <= ord(letter) - ord("A") < len(choices):
            return letter
        return choice_text_letter(raw, choices)

    @staticmethod
    def _index_text_clash(item: dict[str, Any]) -> str | None:
        """Why a digit-string or one-letter ``answer`` cannot name the gold: it is the 0-based
        index (the letter) of one choice and the text of another."""
        raw, choices = item.get("answer"), list(item["choices"])
        letter = raw.strip().strip("().").upper() if isinstance(raw, str) else ""
        if len(letter) == 1 and 0 <= ord(letter) - ord("A") < len(choices):
            if other := letter_text_clash(raw, letter, choices):
                return (
                    f"field 'answer' = {raw!r} is both the letter of choice {letter} and the "
                    f"text of choice {other}; give the gold as a 0-based index"
                )
            return None
        if not (isinstance(raw, str) and _is_digits(raw) and int(raw) < len(choices)):
            return None
        by_index = chr(ord("A") + int(raw))
        by_text = choice_text_letter(raw, choices)
        if by_text is None or by_text == by_index:
            return None
        return (
            f"field 'answer' = {raw!r} is both the 0-based index of choice {by_index} and the "
            f"text of choice {by_text}; give the gold as a letter"
        )

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        gold = self._gold(item)
        result = ChoiceReward().score("", completion, [], [], answer=gold, choices=item["choices"])
        return _exact(item, result.value, result.details.get("pred"), result.reason)


class VqaTask(_TaskBase):
    """Short answers: VQA accuracy against VQA's ten human answers, else exact match against any
    answer given (one, or a list of accepted answers), both after the official normalisation
    (:mod:`vlrollout.rewards.vqa_answers`). Items: ``answer``, ``question`` or ``messages``."""

    name = "vqa"

    @staticmethod
    def _gold(raw: Any) -> str | list[str] | None:
        """The human answer(s) as text (:func:`_answer_text`); ``None`` when one is not an
        answer, or none has text."""
        if not isinstance(raw, (list, tuple)):
            answer = _answer_text(raw)
            return answer if answer and answer.strip() else None
        answers = [_answer_text(a) for a in raw]
        if not answers or None in answers or not any(a.strip() for a in answers):
            return None
        return answers

    def check_item(self, item: dict[str, Any]) -> str | None:
        raw = item.get("answer")
        if self._gold(raw) is not None:
            return _prompt_needs(item, "question", "the question")
        if missing := _answer_missing(item, "the reference answers"):
            return missing
        if not isinstance(raw, (list, tuple)) or not raw:
            return f"field 'answer' = {raw!r:.120} is not an answer string or a list of them"
        bad = next((k for k, a in enumerate(raw) if _answer_text(a) is None), None)
        if bad is None:
            return f"field 'answer': all {len(raw)} answers are blank"
        return (
            f"field 'answer': answer {bad + 1} of {len(raw)} is {raw[bad]!r:.80}, not an answer "
            "string; fix or drop it"
        )

    def score(
        self, item: dict[str, Any], completion: str, geometry: list[dict], family: str
    ) -> ItemScore:
        answer = answer_region(completion, True).strip()
        if not answer:  # a blank human answer is no match for a missing one
            return _exact(item, 0.0, answer, "empty_answer")
        return _exact(item, vqa_accuracy(answer, self._gold(item["answer"])), answer, None)


TASKS: dict[str, EvalTask] = {
    task.name: task for task in (RefcocoTask(), CaptionTask(), CountTask(), ChoiceTask(), VqaTask())
}
"""The shipped tasks by name."""


def get_task(name: str) -> EvalTask:
    """The task called ``name``; ``ValueError`` naming the known tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown eval task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[name]
