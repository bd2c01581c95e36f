"""Shared fixtures: an offline tokenizer and Qwen2-VL processor built in code (no hub)."""

from __future__ import annotations

import pytest

from vlrollout.tiny.tokenizer import build_bpe_tokenizer, build_qwen2vl_processor


@pytest.fixture(scope="session")
def tokenizer():
    return build_bpe_tokenizer()


@pytest.fixture(scope="session")
def qwen2vl_processor(tokenizer):
    return build_qwen2vl_processor(tokenizer)


@pytest.fixture(autouse=True)
def _fresh_shared_workflow_state():
    """Workflows share state per configuration and process; each test starts from none."""
    from vlrollout.workflows.shared import reset_shared_state

    reset_shared_state()
    yield
    reset_shared_state()
