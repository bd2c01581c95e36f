"""The one error type for bad data items, so callers can reject an item without catching bugs."""

from __future__ import annotations


class PreprocessError(ValueError):
    """A data item cannot be prepared.

    Attributes:
        item: Which item (its id, or a description such as ``"image 2"``).
        reason: A short machine-readable reason (``"image_decode"``, ``"placeholder_mismatch"``, ...).
        detail: A human-readable explanation, including how to fix it when known.
    """

    def __init__(self, item: str, reason: str, detail: str) -> None:
        self.item = item
        self.reason = reason
        self.detail = detail
        super().__init__(f"{item}: {reason}: {detail}")
