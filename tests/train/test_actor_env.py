"""Building the actor leaves the process environment as it found it.

``torch.distributed`` reads its rendezvous variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) while the process group is created, and AReaL reads
``LOCAL_RANK`` while the actor is initialised; the ones a launcher did not set are filled in for
exactly that span. AReaL's actor is replaced by a stand-in that records what it saw. The one
variable set for the rest of the process is ``TORCHDYNAMO_DISABLE`` (CPU defaults, so that child
processes run AReaL's compiled helpers eagerly too).
"""

from __future__ import annotations

import os

import pytest
import torch._dynamo
from areal.api.cli_args import PPOActorConfig
from areal.api.io_struct import FinetuneSpec

from vlrollout.train import actor as actor_module

DIST = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
PERSISTS = {"TORCHDYNAMO_DISABLE"}


class _Actor:
    """Stands in for ``FSDPPPOActor``: records the rendezvous variables at each stage."""

    seen: dict[str, dict[str, str | None]] = {}

    def __init__(self, config):
        self.config = config
        self.model = None

    def create_process_group(self):
        _Actor.seen["create_process_group"] = {k: os.environ.get(k) for k in DIST}

    def initialize(self, addr, ft_spec):
        _Actor.seen["initialize"] = {k: os.environ.get(k) for k in DIST}


@pytest.fixture
def stand_in_actor(monkeypatch):
    import areal.engine.fsdp_engine

    monkeypatch.setattr(areal.engine.fsdp_engine, "FSDPPPOActor", _Actor)
    # CPU defaults switch torch.compile off for the process: undo it after the test.
    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    disabled = torch._dynamo.config.disable
    _Actor.seen.clear()
    yield
    torch._dynamo.config.disable = disabled


def _build() -> PPOActorConfig:
    cfg = PPOActorConfig(experiment_name="e", trial_name="t")
    actor_module.build_actor(
        cfg, FinetuneSpec(1, 8, 8), packing_fix=False, encode_images_once=False
    )
    return cfg


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def test_missing_rendezvous_variables_are_set_only_while_the_actor_is_built(
    monkeypatch, stand_in_actor
):
    for key in DIST:
        monkeypatch.delenv(key, raising=False)
    before = dict(os.environ)
    cfg = _build()
    for stage in ("create_process_group", "initialize"):
        seen = _Actor.seen[stage]
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["LOCAL_RANK"]) == ("0", "1", "0"), stage
        assert seen["MASTER_ADDR"] == "127.0.0.1" and int(seen["MASTER_PORT"]) > 0, stage
    assert cfg.backend == "fsdp:d1"
    assert _changed(before, dict(os.environ)) <= PERSISTS


def test_a_launchers_variables_are_used_and_kept(monkeypatch, stand_in_actor):
    launched = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2"}
    for key, value in launched.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    before = dict(os.environ)
    cfg = _build()
    assert {k: _Actor.seen["initialize"][k] for k in launched} == launched
    assert cfg.backend == "fsdp:d2"
    assert _changed(before, dict(os.environ)) <= PERSISTS
