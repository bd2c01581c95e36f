"""What the server's command line and its application agree on: the protocols spoken, the
default request-body limit and the queue's default bounds."""

from __future__ import annotations

PROTOCOLS = ("sglang", "vllm")
"""HTTP protocols ``vlrollout serve`` speaks: SGLang's and AReaL's vLLM server's."""

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted unless ``--max-body-mb`` says otherwise; larger ones get 413."""

DEFAULT_MAX_QUEUED_REQUESTS = 256
"""Generation requests queued (admitted, not yet answered) before the next gets 503."""

QUEUE_MEMORY_SHARE = 1 / 8
"""The share of the machine's memory the default ``--max-queued-mb`` lets queued requests take."""

RESIDENT_PER_QUEUED_BYTE = 8
"""Resident bytes a queued image request costs the server at its peak per byte of its body,
rounded up from ``bench/bench_serve_load.py`` (2048x1536 JPEGs: the decoded image, the processor's
copies and the allocator's slack outweigh the base64 body about eight to one)."""
