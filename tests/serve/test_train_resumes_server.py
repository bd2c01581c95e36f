"""A trainer's rollout engine resumes the servers it connects to: a run stopped between AReaL's
``/pause_generation`` and ``/continue_generation`` (Ctrl-C during a weight update) leaves its
server paused, and the next run's requests would wait there for ever. And it asks them, before
any rollout, whether they will load its weight updates."""

from __future__ import annotations

import pytest
import requests
import torch

from tests.serve.conftest import ASSET, serving
from vlrollout.errors import ConfigError
from vlrollout.train.config import load_config
from vlrollout.train.rollout_engine import build_rollout_engine, check_servers_load_from

PAUSE = {"sglang": "/pause_generation", "vllm": "/areal_pause_generation"}


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_a_paused_server_is_resumed_when_a_run_connects(protocol, tmp_path):
    with serving(protocol, weights_root=tmp_path) as (server, _):
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


def _remote_config(protocol: str, address: str, output, *extra: str):
    return load_config(
        "examples/train_grounding.yaml",
        [
            f"vlrollout.output={output}",
            f"vlrollout.engine.kind={protocol}",
            f"vlrollout.engine.addresses=[{address}]",
            *extra,
        ],
    )


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_a_server_that_will_not_load_the_runs_weights_is_refused_at_start(protocol, tmp_path):
    root = tmp_path / "weights-root"
    with serving(protocol, weights_root=root) as (server, engine):
        elsewhere = _remote_config(protocol, server.address, tmp_path / "run")
        with pytest.raises(ConfigError) as refused:
            build_rollout_engine(elsewhere, str(ASSET), torch.float32)
        message = str(refused.value)
        assert f"the {protocol} server at {server.address}" in message, message
        assert f"cluster.fileroot ({tmp_path / 'run' / 'areal'})" in message, message
        assert f"outside the weights root {root.resolve()}" in message, message
        under = _remote_config(
            protocol, server.address, tmp_path / "run", f"cluster.fileroot={root / 'areal'}"
        )
        client, _ = build_rollout_engine(under, str(ASSET), torch.float32)
        client.destroy()
        assert engine.get_version() == 0


def test_a_server_the_check_cannot_reach_is_left_to_areals_client(tmp_path):
    """The check refuses only on a server's answer; a connection it cannot make (a proxy in the
    way, say) is not its to report."""
    cfg = _remote_config("sglang", "127.0.0.1:9", tmp_path / "run")
    check_servers_load_from(cfg)  # nothing listens there
