"""What an evaluator gets back for one item, and the one method every model source implements.

A :class:`Predictor` turns an item into a :class:`Prediction`: the completions (decoded as the
workflows decode them for rewards) and each image's resize geometry from our preprocessor, so a
task reads boxes in the frame the model saw. The local or training engine
(:class:`vlrollout.eval.predict.EnginePredictor`) and any OpenAI-compatible server
(:class:`vlrollout.eval.openai_client.OpenAIPredictor`) are two predictors behind the same method.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Prediction:
    """One item's completions, or why it could not be run.

    Attributes:
        id: The item's ``id`` (its label when it has none).
        completions: The ``k`` completion texts (greedy: one), decoded as rewards see them: the
            trailing stop token dropped, other special tokens kept (boxes written with special
            tokens survive). Empty when rejected.
        geometry: ``ImageGeometry.to_dict()`` per image, in prompt order, from our preprocessor.
        rejection: ``{"reason", "detail"}`` when the item could not be run (the reason codes the
            workflows record: ``PreprocessError`` reasons, ``prompt_too_long``, ``engine_error``,
            ``http_error``, ...); ``None`` otherwise.
        prompt_tokens: Tokens in the prompt (as our preprocessor counts them).
        generated_tokens: Tokens generated over all ``k`` completions.
    """

    id: str
    completions: list[str] = field(default_factory=list)
    geometry: list[dict[str, Any]] = field(default_factory=list)
    rejection: dict[str, str] | None = None
    prompt_tokens: int = 0
    generated_tokens: int = 0

    @classmethod
    def rejected(
        cls, item_id: str, reason: str, detail: str, geometry: list[dict[str, Any]] | None = None
    ) -> Prediction:
        """A prediction for an item that could not be run (``reason``: a machine-readable code)."""
        return cls(
            id=item_id, rejection={"reason": reason, "detail": detail}, geometry=geometry or []
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the field names above)."""
        return asdict(self)


@runtime_checkable
class Predictor(Protocol):
    """A model source the evaluator can call.

    ``predict`` never raises for a bad item or a failed request: it returns a :class:`Prediction`
    whose ``rejection`` says why, so one item never ends a run. ``k == 1`` is greedy; ``k > 1``
    samples ``k`` completions.
    """

    async def predict(self, item: dict[str, Any], k: int) -> Prediction: ...
