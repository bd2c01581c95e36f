"""One prepared prompt for the requests of it in flight (a GRPO group's episodes).

The episodes of a group send one prompt n times: the same ``input_ids`` and the same
``multi_modal_input`` object. :class:`InFlightInputs` runs ``prepare_inputs`` for the first and
hands its result to the others while any of them is in flight, so the group's later requests
cost microseconds each and an idle worker sees them arrive together, to prefill them in one
batch (a slow submitter would split the group). Nothing is kept once the last of them is done:
a prompt's pixels are the caller's again (77 MB of float32 patch rows at 4,096 Qwen2-VL image
tokens, and on the engine's device when ``prepare_inputs`` moved them there).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from vlrollout.engine.inputs import PreparedInputs, prepare_inputs


@dataclass
class _Entry:
    """A prepared prompt, the ``multi_modal_input`` it came from (kept alive with its tensors,
    so their ids, part of the key, are not reused meanwhile) and the requests using it."""

    mm: Any
    values: tuple
    inputs: PreparedInputs
    users: int = 0


class InFlightInputs:
    """``prepare_inputs`` once per prompt among the requests in flight (module docstring).

    Safe to call from several threads. Every :meth:`acquire` is paired with a :meth:`release`
    of its key once the request is done.
    """

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, args: tuple) -> tuple[Hashable | None, PreparedInputs]:
        """``(key, prepare_inputs(*args))``, the inputs shared with the requests in flight that
        have the same ``input_ids`` and ``multi_modal_input`` object as ``args[0]``; the key is
        ``None`` for a request without ``multi_modal_input`` (prepared on its own)."""
        req = args[0]
        mm = (req.metadata or {}).get("multi_modal_input")
        if mm is None:
            return None, prepare_inputs(*args)
        values = tuple(mm.values()) if isinstance(mm, dict) else (mm,)
        key = (id(mm), tuple(map(id, values)), tuple(req.input_ids))
        with self._lock:
            entry = self._entries.get(key)  # ids of objects an entry keeps alive: unique
            if entry is None:
                entry = self._entries[key] = _Entry(mm, values, prepare_inputs(*args))
            entry.users += 1
            return key, entry.inputs

    def release(self, key: Hashable | None) -> None:
        """The request that acquired ``key`` is done: the entry goes with its last user."""
        if key is None:
            return
        with self._lock:
            entry = self._entries[key]
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]
