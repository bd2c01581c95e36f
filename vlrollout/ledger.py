"""Counting every episode's fate, so nothing is silently lost.

A workflow returns ``None`` to AReaL for a rejected trajectory; AReaL only sees the ``None``.
The :class:`EpisodeLedger` keeps the reason: ``submitted == accepted + rejected`` at all times, and
``vlrollout run`` prints the rejections with item ids and reasons. A batch in which nothing was
accepted is not a result: :class:`NothingAccepted` says so with the counts and the top reasons.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vlrollout.logs import get_logger

logger = get_logger("vlrollout")


class EpisodeRejected(Exception):
    """Raised inside an episode to reject it with a reason; the workflow records it and returns None.

    Defined here, beside the :class:`Rejection` it becomes, so that every step that can reject an
    episode (the workflows' steps, the reward caller in ``vlrollout.rewards``) raises the same type.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class Rejection:
    """One rejected episode.

    Attributes:
        item: The data item's label (e.g. ``"item 17"``).
        reason: Machine-readable reason, e.g. ``"image_decode"``, ``"reward_timeout"``.
        detail: What happened and, when known, how to fix it.
    """

    item: str
    reason: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class EpisodeLedger:
    """Thread-safe counts of accepted and rejected episodes, with recent rejection details.

    Args:
        keep: How many rejection records to keep (counts are always exact).

    >>> ledger = EpisodeLedger()
    >>> ledger.accept()
    >>> record = ledger.reject("item 3", "image_decode", "truncated JPEG")
    >>> ledger.summary()["rejected_by_reason"]
    {'image_decode': 1}
    """

    def __init__(self, keep: int = 10_000) -> None:
        self._lock = threading.RLock()  # cut() holds it across since() and mark()
        self.accepted = 0
        self.by_reason: Counter[str] = Counter()
        self.records: deque[Rejection] = deque(maxlen=keep)
        # Rejections already logged: the episodes of a group usually fail alike (a bad image,
        # a row without the reward's field), and one warning per item says it.
        self._logged: OrderedDict[Rejection, None] = OrderedDict()

    @property
    def rejected(self) -> int:
        return sum(self.by_reason.values())

    @property
    def submitted(self) -> int:
        return self.accepted + self.rejected

    def accept(self) -> None:
        with self._lock:
            self.accepted += 1

    def reject(
        self, item: str, reason: str, detail: str, error: BaseException | None = None
    ) -> Rejection:
        """Count one rejection; log it unless the same item was just rejected for the same
        reason and detail (counts stay exact). ``error``'s traceback (with a reward worker's, kept
        as a note) is logged at DEBUG, which ``--debug`` turns on."""
        record = Rejection(item=item, reason=reason, detail=detail)
        with self._lock:
            self.by_reason[reason] += 1
            self.records.append(record)
            repeated = record in self._logged
            self._logged[record] = None
            self._logged.move_to_end(record)
            if len(self._logged) > self.records.maxlen:
                self._logged.popitem(last=False)
        if not repeated:
            logger.warning("rejected %s: %s: %s", item, reason, detail)
        if error is not None:
            logger.debug("traceback of the rejection of %s:", item, exc_info=error)
        return record

    def summary(self) -> dict:
        with self._lock:
            return {
                "submitted": self.accepted + sum(self.by_reason.values()),
                "accepted": self.accepted,
                "rejected": sum(self.by_reason.values()),
                "rejected_by_reason": dict(self.by_reason),
                "rejections": [r.to_dict() for r in self.records],
            }

    def mark(self) -> tuple[int, dict[str, int]]:
        """The counts now (accepted, rejected by reason), to pass to :meth:`since` later."""
        with self._lock:
            return self.accepted, dict(self.by_reason)

    def cut(self, mark: tuple[int, dict[str, int]]) -> tuple[dict, tuple[int, dict[str, int]]]:
        """:meth:`since` ``mark`` and a new mark, taken together: windows cut one after another
        count every episode in exactly one of them."""
        with self._lock:
            return self.since(mark), self.mark()

    def since(self, mark: tuple[int, dict[str, int]]) -> dict:
        """What was counted after :meth:`mark` returned ``mark``, in :meth:`summary`'s shape.

        Judges one batch of episodes (a training step, an evaluation) on a ledger that lives
        longer than the batch. Counts are exact; ``rejections`` holds the batch's newest records,
        at most ``keep`` of them.

        >>> ledger = EpisodeLedger()
        >>> ledger.accept()
        >>> start = ledger.mark()
        >>> _ = ledger.reject("item 4", "engine_error", "server gone")
        >>> ledger.since(start)["rejections"]
        [{'item': 'item 4', 'reason': 'engine_error', 'detail': 'server gone'}]
        """
        accepted, by_reason = mark
        with self._lock:
            new = Counter(self.by_reason)
            new.subtract(by_reason)
            by_reason_now = {reason: n for reason, n in new.items() if n > 0}
            rejected = sum(by_reason_now.values())
            kept = min(rejected, len(self.records))
            records = list(self.records)[len(self.records) - kept :]
            return {
                "submitted": self.accepted - accepted + rejected,
                "accepted": self.accepted - accepted,
                "rejected": rejected,
                "rejected_by_reason": by_reason_now,
                "rejections": [r.to_dict() for r in records],
            }


def top_reasons(
    rejections: Iterable[Mapping[str, str]], n: int = 3
) -> list[tuple[str, int, Mapping[str, str]]]:
    """The ``n`` most frequent rejection reasons: ``(reason, count, first record)``.

    Args:
        rejections: Records with ``reason``, ``item`` and ``detail`` keys
            (:meth:`Rejection.to_dict`, or ``summary.json``'s ``rejections``).
        n: How many reasons to return; ties keep the order of first appearance.

    >>> rows = [{"item": "item a", "reason": "engine_error", "detail": "gone"}] * 2
    >>> [(r, c, e["item"]) for r, c, e in top_reasons(rows)]
    [('engine_error', 2, 'item a')]
    """
    counts: Counter[str] = Counter()
    first: dict[str, Mapping[str, str]] = {}
    for record in rejections:
        counts[record["reason"]] += 1
        first.setdefault(record["reason"], record)
    return [(reason, count, first[reason]) for reason, count in counts.most_common(n)]


class NothingAccepted(Exception):  # noqa: N818 - a state of the data, like StopIteration
    """Every episode of a batch was rejected: there is no result to report or to train on.

    Raised instead of reporting a mean computed from no episode, or of handing a trainer an
    empty batch that fails later with a message about something else. The message states the
    counts and the most frequent reasons, each with an example item, so the cause is on screen;
    ``vlrollout`` commands print it and exit with status 3.

    Args:
        what: The batch, as the message names it (``"training step 3"``).
        submitted: Episodes tried.
        rejections: Records of the rejected episodes (``reason``, ``item``, ``detail``).
        rejected: Episodes rejected; by default ``len(rejections)`` (pass it when the records
            are a bounded sample).
        hint: A last line saying where to read every rejection.
        outcome: The ledger outcome of the batch (:meth:`EpisodeLedger.since`), when known: a
            caller that can go on without the batch counts its rejections from it.

    >>> err = NothingAccepted("the run", 2, [{"item": "item a", "reason": "x", "detail": "d"}] * 2)
    >>> print(err)
    no episode of the run was accepted (2 episodes, 2 rejected)
      x: 2 (e.g. item a: d)
    """

    def __init__(
        self,
        what: str,
        submitted: int,
        rejections: Iterable[Mapping[str, str]],
        rejected: int | None = None,
        hint: str = "",
        outcome: Mapping[str, Any] | None = None,
    ) -> None:
        records = list(rejections)
        self.outcome = outcome
        self.what = what
        self.submitted = submitted
        self.rejected = len(records) if rejected is None else rejected
        self.reasons = top_reasons(records)
        lines = [
            f"no episode of {what} was accepted ({submitted} episodes, {self.rejected} rejected)"
        ]
        for reason, count, example in self.reasons:
            detail = " ".join(str(example.get("detail", "")).split())
            detail = detail if len(detail) <= 160 else detail[:157] + "..."
            lines.append(f"  {reason}: {count} (e.g. {example.get('item', '?')}: {detail})")
        unrecorded = submitted - self.rejected
        if unrecorded > 0:
            lines.append(f"  {unrecorded} episode(s) returned nothing without a recorded reason")
        if hint:
            lines.append(f"  {hint}")
        super().__init__("\n".join(lines))
