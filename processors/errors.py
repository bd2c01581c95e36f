"""The error types of the processors: :class:`PreprocessError` for bad data items (so callers can
reject an item without catching bugs) and :class:`PreprocessorContractError` for a plug-in that
broke its contract."""

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


CONTRACT = (
    "factory(processor, *, chat_template_kwargs, min_pixels, max_pixels, **options) returning an "
    "object with prepare(data) -> PreparedPrompt, .processor and .tokenizer"
)


class PreprocessorContractError(TypeError):
    """A preprocessor plug-in broke its contract (see :mod:`vlrollout.processors.contract`)."""

    def __init__(self, plugin: str, promise: str) -> None:
        self.plugin = plugin
        self.promise = promise
        super().__init__(f"preprocessor plug-in {plugin!r}: {promise} (contract: {CONTRACT})")
