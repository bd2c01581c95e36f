"""Deterministic scheduling: a completion that depends on the request and the seed, not on load.

Serving engines batch whatever arrives together, so with one shared random generator the tokens a
request gets depend on which other requests were in flight: two seeded runs started side by
side would write different files. In deterministic mode the engine removes both sources:

- **Sampling.** Each request draws from its own ``torch.Generator`` seeded from the engine seed
  and a stable key of the request: a digest of its content (prompt ids, images as the engine
  reads them, sampling settings) and how many earlier requests had the same digest. The request
  id is not used: our workflows and AReaL draw it from ``uuid4``. The n episodes of a GRPO group
  share a prompt, so they get keys ``(digest, 0) .. (digest, n-1)`` and stay distinct samples.
- **Arithmetic.** Sequences run one at a time, so no left padding or batch shape can change a
  floating-point result (batched matmuls and attention are not bit-identical to batch 1). The
  n requests of a group still prefill their prompt once: each after the first starts from a
  copy of the previous prefill (:mod:`~vlrollout.engine.prefill_memo`), the same numbers.

The occurrence index is taken synchronously when ``agenerate`` is called, so twins keep their
order as long as the caller issues them in a fixed order (``asyncio.gather`` does).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any

import torch


def _update(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            h.update(f"K{k}".encode())
            _update(h, value[k])
    elif isinstance(value, list | tuple):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _update(h, v)
    else:
        h.update(f"V{value!r}".encode())


def request_digest(req: Any) -> str:
    """A digest of what determines a request's completion: prompt, images, sampling settings.

    The images are keyed as the engine reads them: the tensors of ``multi_modal_input`` when the
    request carries them, else ``image_data``. A workflow's request then never encodes its
    images only to be hashed, and two encodings of the same pixels share a key.

    >>> from areal.api.io_struct import ModelRequest
    >>> a, b = ModelRequest(input_ids=[1, 2]), ModelRequest(input_ids=[1, 2])
    >>> request_digest(a) == request_digest(b), request_digest(a) == request_digest(ModelRequest(input_ids=[2, 1]))
    (True, False)
    """
    h = hashlib.blake2b(digest_size=16)
    _update(h, [int(t) for t in req.input_ids])
    tensors = (req.metadata or {}).get("multi_modal_input")
    _update(h, tensors if tensors else list(req.image_data or []))
    g = req.gconfig
    _update(
        h,
        [g.max_new_tokens, g.min_new_tokens, g.greedy, g.temperature, g.top_p, g.top_k,
         list(g.stop_token_ids or []), list(g.stop or []), g.frequency_penalty, g.ignore_eos],
    )  # fmt: skip
    return h.hexdigest()


class RequestKeys:
    """Counts requests per digest and turns ``(seed, digest, occurrence)`` into a sampling seed."""

    def __init__(self) -> None:
        self._seen: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def seed_for(self, seed: int, req: Any) -> int:
        """The seed of ``req``'s own generator (63 bits).

        >>> from areal.api.io_struct import ModelRequest
        >>> keys = RequestKeys()
        >>> a, b = (keys.seed_for(0, ModelRequest(input_ids=[1])) for _ in range(2))
        >>> a != b, a == RequestKeys().seed_for(0, ModelRequest(input_ids=[1]))
        (True, True)
        """
        digest = request_digest(req)
        with self._lock:
            k = self._seen[digest]
            self._seen[digest] += 1
        raw = hashlib.blake2b(f"{seed}:{digest}:{k}".encode(), digest_size=8).digest()
        return int.from_bytes(raw, "little") & (2**63 - 1)

    def state_dict(self) -> dict[str, int]:
        """How many requests each digest has had (JSON-serialisable), for a checkpoint: a
        process that loads it draws a prompt's next request as its next occurrence, not its
        first."""
        with self._lock:
            return dict(self._seen)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from :meth:`state_dict`'s counts (replacing this process's own).

        >>> keys = RequestKeys()
        >>> from areal.api.io_struct import ModelRequest
        >>> first = keys.seed_for(0, ModelRequest(input_ids=[1]))
        >>> second = keys.seed_for(0, ModelRequest(input_ids=[1]))
        >>> again = RequestKeys()
        >>> again.load_state_dict({request_digest(ModelRequest(input_ids=[1])): 1})
        >>> again.seed_for(0, ModelRequest(input_ids=[1])) == second
        True
        """
        with self._lock:
            self._seen = collections.Counter({str(k): int(v) for k, v in state.items()})


def dispatch_input_device(device_map: dict[str, Any]) -> torch.device:
    """Where inputs go for a model dispatched by accelerate: its first module's device.

    CPU- and disk-offloaded modules execute on the CPU.

    >>> dispatch_input_device({"model.embed": 0, "lm_head": "cpu"}), dispatch_input_device({"a": "disk"})
    (device(type='cuda', index=0), device(type='cpu'))
    """
    first = next(iter(device_map.values()))
    if isinstance(first, int):
        return torch.device("cuda", first)
    return torch.device("cpu" if first == "disk" else first)
