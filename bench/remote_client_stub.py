"""A zero-latency engine that reads a request the way AReaL's remote SGLang / vLLM clients do.

AReaL's ``RemoteSGLangEngine`` and ``RemotevLLMEngine`` (``areal.infra.remote_inf_engine``) start
``agenerate`` with ``req.copy()`` (which reads ``image_data`` and ``vision_msg_vllm``), build the
HTTP body with their backend's ``build_generation_request`` (SGLang: ``image_data`` as is; vLLM:
each ``image_url`` of ``vision_msg_vllm`` rewritten as a ``data:`` URL from ``image_data``), and
post it with aiohttp's ``json=payload`` (``json.dumps``). This stub runs exactly that client-side
work, with AReaL's own backend classes, then answers from a script instead of a server, and puts
the request's images in the response's ``input_images`` as AReaL's engine does. A workflow that
encodes engine images only when an engine reads them pays for the encoding here, as it would in
production; :class:`vlrollout.testing.scripted_engine.ScriptedEngine` alone never reads them.
"""

from __future__ import annotations

import json
from typing import Literal

from areal.api import ModelRequest, ModelResponse
from areal.engine.sglang_remote import SGLangBackend
from areal.engine.vllm_remote import VLLMBackend

from vlrollout.testing.scripted_engine import Script, ScriptedEngine

Protocol = Literal["sglang", "vllm"]


class RemoteClientStub(ScriptedEngine):
    """A :class:`ScriptedEngine` that first builds and serialises the HTTP request body AReaL's
    remote client for ``protocol`` would send.

    Attributes:
        payloads: Every request body sent, as ``(endpoint, payload)`` (cleared with
            ``requests``: call :meth:`clear`).
    """

    reads_multi_modal_input = False
    """Sends ``image_data``/``vision_msg_vllm``, as AReaL's remote clients do."""

    def __init__(self, protocol: Protocol, script: Script) -> None:
        super().__init__(script)
        if protocol not in ("sglang", "vllm"):
            raise ValueError(f"protocol must be 'sglang' or 'vllm', got {protocol!r}")
        self.protocol = protocol
        self.backend = SGLangBackend() if protocol == "sglang" else VLLMBackend()
        self.payloads: list[tuple[str, dict]] = []
        self.body_bytes = 0

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        req = req.copy()  # RemoteInfEngine.agenerate's first step
        http_req = self.backend.build_generation_request(req, with_lora=False, version=0)
        self.body_bytes = len(json.dumps(http_req.payload).encode())  # aiohttp's json=payload
        self.payloads.append((http_req.endpoint, http_req.payload))
        resp = await super().agenerate(req)
        resp.input_images = req.image_data
        return resp

    def clear(self) -> None:
        self.requests.clear()
        self.payloads.clear()
