"""Counting every episode's fate, so nothing is silently lost.

A workflow returns ``None`` to AReaL for a rejected trajectory; AReaL only sees the ``None``.
The :class:`EpisodeLedger` keeps the reason: ``submitted == accepted + rejected`` at all times, and
``vlrollout run`` prints the rejections with item ids and reasons.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from dataclasses import asdict, dataclass

from vlrollout.logs import get_logger

logger = get_logger("vlrollout")


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
        self._lock = threading.Lock()
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
