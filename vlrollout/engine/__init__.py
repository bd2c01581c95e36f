"""The embedded local inference engine: AReaL's ``InferenceEngine`` on a transformers model.

Exports are resolved lazily so ``import vlrollout.engine`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LocalInferenceEngine", "PlaceholderMismatchError", "SamplingParams"]

_EXPORTS = {
    "LocalInferenceEngine": "vlrollout.engine.local",
    "PlaceholderMismatchError": "vlrollout.engine.inputs",
    "SamplingParams": "vlrollout.engine.sampling",
}

if TYPE_CHECKING:
    from vlrollout.engine.inputs import PlaceholderMismatchError
    from vlrollout.engine.local import LocalInferenceEngine
    from vlrollout.engine.sampling import SamplingParams


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'vlrollout.engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
