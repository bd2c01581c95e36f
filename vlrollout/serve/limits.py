"""What the server's command line and its application agree on: the protocols spoken, the
default request-body limit and the queue's default bounds."""

from __future__ import annotations

PROTOCOLS = ("sglang", "vllm")
"""HTTP protocols ``vlrollout serve`` speaks: SGLang's and AReaL's vLLM server's."""

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted unless ``--max-body-mb`` says otherwise; larger ones get 413."""

BODY_IDLE_TIMEOUT_S = 10.0
"""Longest wait for the next byte of a request body: a client that stops sending (a stalled
upload, a connection held open on purpose) is answered 408 and gives its queue slot back, as
nginx's ``client_body_timeout`` does."""

DEFAULT_MAX_QUEUED_REQUESTS = 256
"""Generation requests queued (admitted, not yet answered) before the next gets 503."""

QUEUE_MEMORY_SHARE = 1 / 8
"""The share of the machine's memory the default ``--max-queued-mb`` lets queued requests take."""

RESIDENT_PER_QUEUED_BYTE = 16
"""Resident bytes the server may grow by per byte of queued request body, at its peak, with a
margin: ``bench/bench_serve_load.py`` measured 9.5 to 11.8 during bursts of 1,000 and 1,500
2048x1536 JPEG chat requests against the default request bound (the decoded images, the
processor's copies, the buffers of refused requests' bodies and the allocator's slack outweigh
the base64 bodies)."""
