"""What the server's command line and its application agree on: the protocols spoken and the
default request-body limit."""

from __future__ import annotations

PROTOCOLS = ("sglang", "vllm")
"""HTTP protocols ``vlrollout serve`` speaks: SGLang's and AReaL's vLLM server's."""

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted unless ``--max-body-mb`` says otherwise; larger ones get 413."""
