"""A scripted ``InferenceEngine`` that returns known tokens: for tests, benchmarks and load checks.

It records every request, so tests can check what an engine would have received (token ids,
images, ``metadata["multi_modal_input"]``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence

from areal.api import InferenceEngine, ModelRequest, ModelResponse

Script = Callable[[ModelRequest], Sequence[int]] | Sequence[Sequence[int]]


class ScriptedEngine(InferenceEngine):
    """Answers each request with scripted tokens and deterministic logprobs.

    Args:
        script: Either a list of token lists (answered in order, cycling) or a function from the
            request to the output tokens.
        stop_token_ids: A response ending in one of these has ``stop_reason="stop"``, else
            ``"length"``.
        latency_s: ``(low, high)`` seconds of random sleep per request (0 for a zero-latency engine).
        seed: Seed for the latency draws.

    The logprob of output token ``i`` is ``-0.01 * (i + 1)``, so packing tests can check that
    logprobs land on the right positions.
    """

    reads_multi_modal_input = True
    """Never reads ``image_data`` (as vlrollout's local engine, when the tensors are there)."""

    def __init__(
        self,
        script: Script,
        stop_token_ids: Sequence[int] = (),
        latency_s: tuple[float, float] = (0.0, 0.0),
        seed: int = 0,
    ) -> None:
        self.script = script
        self.stop_token_ids = set(stop_token_ids)
        self.latency_s = latency_s
        self._rng = random.Random(seed)
        self._version = 0
        self._calls = 0
        self.requests: list[ModelRequest] = []

    @property
    def initialized(self) -> bool:
        return True

    def set_version(self, version: int) -> None:
        self._version = version

    def get_version(self) -> int:
        return self._version

    def _next_tokens(self, req: ModelRequest) -> list[int]:
        if callable(self.script):
            return list(self.script(req))
        tokens = self.script[self._calls % len(self.script)]
        return list(tokens)

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        start = time.perf_counter()
        self.requests.append(req)
        tokens = self._next_tokens(req)
        self._calls += 1
        low, high = self.latency_s
        if high > 0:
            await asyncio.sleep(self._rng.uniform(low, high))
        stop = bool(tokens) and tokens[-1] in self.stop_token_ids
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=tokens,
            output_logprobs=[-0.01 * (i + 1) for i in range(len(tokens))],
            output_versions=[self._version] * len(tokens),
            stop_reason="stop" if stop else "length",
            tokenizer=req.tokenizer,
            processor=req.processor,
            latency=time.perf_counter() - start,
        )
