"""The prepared-prompt cache's byte bound is settable from ``vlrollout run`` (flag and config)."""

from __future__ import annotations

import pytest

from vlrollout.cli import run_config_from_flags
from vlrollout.errors import ConfigError
from vlrollout.processors import cache
from vlrollout.run.config import RunConfig
from vlrollout.run.main import apply_process_settings


def _cfg(*flags: str) -> RunConfig:
    return run_config_from_flags(flags)


@pytest.fixture
def restore_default():
    before = cache.default_cache_bytes()
    yield
    cache.set_default_cache_bytes(before)


def test_flag_sets_the_process_wide_bound(restore_default):
    cfg = _cfg("--prompt-cache-bytes", "12345")
    assert cfg.prompt_cache_bytes == 12345
    apply_process_settings(cfg)
    assert cache.default_cache_bytes() == 12345
    assert cache.PreparedPromptCache(lambda d: d).max_bytes == 12345


def test_default_leaves_the_documented_bound(restore_default):
    apply_process_settings(_cfg())
    assert cache.default_cache_bytes() == cache.DEFAULT_CACHE_BYTES


def test_negative_is_a_config_error():
    with pytest.raises(ConfigError, match="prompt_cache_bytes"):
        _cfg("--prompt-cache-bytes", "-1")
