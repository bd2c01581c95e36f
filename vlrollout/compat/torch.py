"""What vlrollout takes from torch beyond its public API, written for torch 2.9-2.10.

- ``torch._dynamo.maybe_mark_dynamic``: the engine's compiled decode step marks its batch and
  length dimensions dynamic, so a new batch size does not recompile (``torch.compiler`` has no
  public equivalent).
- ``torch._dynamo.config.disable``: the trainer's CPU defaults run AReaL's ``torch.compile``d
  helpers eagerly in this process.
- ``Tensor._version``: the in-place version counter, by which the engine's image-feature memo
  tells that a caller wrote another picture into pixels it keeps a view of.

``torch._dynamo`` takes seconds to import, so it is imported by the functions that need it, not
with this module. Importing this module checks torch's version (:func:`vlrollout.compat.require`).
"""

from __future__ import annotations

from typing import Any

from vlrollout.compat import installed, require

LOWEST, BELOW = (2, 9), (2, 11)
require("torch", LOWEST, BELOW, installed("torch"))

__all__ = ["disable_dynamo", "maybe_mark_dynamic", "version_counter"]


def maybe_mark_dynamic(tensor: Any, dim: int) -> None:
    """Hint ``torch.compile`` that ``tensor``'s dimension ``dim`` varies between calls."""
    import torch._dynamo

    torch._dynamo.maybe_mark_dynamic(tensor, dim)


def disable_dynamo() -> None:
    """Turn ``torch.compile`` off in this process: compiled functions run eagerly."""
    import torch._dynamo

    torch._dynamo.config.disable = True


def version_counter(tensor: Any) -> int | None:
    """``tensor``'s in-place version counter; ``None`` for an inference tensor (it has none)."""
    return None if tensor.is_inference() else tensor._version
