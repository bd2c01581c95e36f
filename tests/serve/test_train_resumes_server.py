"""A trainer's rollout engine resumes the servers it connects to: a run stopped between AReaL's
``/pause_generation`` and ``/continue_generation`` (Ctrl-C during a weight update) leaves its
server paused, and the next run's requests would wait there for ever."""

from __future__ import annotations

import pytest
import requests
import torch

from tests.serve.conftest import ASSET, serving
from vlrollout.train.config import load_config
from vlrollout.train.rollout_engine import build_rollout_engine

PAUSE = {"sglang": "/pause_generation", "vllm": "/areal_pause_generation"}


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_a_paused_server_is_resumed_when_a_run_connects(protocol, tmp_path):
    with serving(protocol) as (server, _):
        requests.post(f"{server.url}{PAUSE[protocol]}", json={}, timeout=10).raise_for_status()
        assert requests.get(f"{server.url}/health", timeout=10).json()["paused"]
        cfg = load_config(
            "examples/train_grounding.yaml",
            [
                f"vlrollout.output={tmp_path}",
                f"vlrollout.engine.kind={protocol}",
                f"vlrollout.engine.addresses=[{server.address}]",
            ],
        )
        engine, _ = build_rollout_engine(cfg, str(ASSET), torch.float32)
        try:
            assert not requests.get(f"{server.url}/health", timeout=10).json()["paused"]
        finally:
            engine.destroy()
