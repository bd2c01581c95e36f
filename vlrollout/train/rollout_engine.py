"""The inference engine a ``vlrollout train`` run rolls out on, and how new weights reach it.

``vlrollout.engine.kind`` chooses the embedded engine (``local``) or AReaL's own remote engine
connected to ``engine.addresses`` (SGLang or AReaL's vLLM protocol, e.g. ``vlrollout serve``).
Either way the actor's ``update_weights`` reaches it through AReaL's disk path: the engine (or
AReaL's client, for a server) waits for the trainer's name_resolve key before loading.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import torch
from areal.api.io_struct import WeightUpdateMeta
from areal.utils import name_resolve, names

from vlrollout.engine.checks import WEIGHTS_CHECK
from vlrollout.engine.factory import remote_engine
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.errors import ConfigError
from vlrollout.train.config import TrainConfig
from vlrollout.train.ranks import Ranks
from vlrollout.workflows.preparation import load_processor


def build_rollout_engine(
    cfg: TrainConfig, model_path: str, dtype: torch.dtype, ranks: Ranks | None = None
) -> tuple[Any, Any]:
    """``(engine, processor)`` for ``vlrollout.engine``: the embedded engine, or AReaL's own
    remote engine connected to ``engine.addresses`` (and its servers resumed, should an earlier
    run have stopped while they were paused for a weight update).

    With several processes (``ranks``) each builds its own client or embedded engine, told the
    data-parallel size as AReaL's are (its executor admits its share of the concurrency and of
    the batch). An embedded engine samples with ``seed + rank``, so ranks do not draw the same
    random numbers; in deterministic mode the seed is shared, since each completion is a function
    of the seed and its request: the same items give the same episodes on whichever rank.
    """
    ranks = ranks or Ranks()
    section = cfg.vlrollout.engine
    if section.kind == "local":
        engine = LocalInferenceEngine.from_pretrained(
            model_path,
            dtype=dtype,
            device=rank_device(section.device, ranks),
            seed=cfg.seed if section.deterministic else cfg.seed + ranks.rank,
            deterministic=bool(section.deterministic),
            compile_decode=section.compile,
            max_batch_size=section.max_batch_size,
        )
        engine.initialize(config=cfg.rollout, train_data_parallel_size=ranks.world)
        return engine, engine.processor
    engine = remote_engine(
        section.kind,
        cfg.rollout,
        experiment_name=cfg.experiment_name,
        trial_name=cfg.trial_name,
        tokenizer_path=model_path,
    )
    engine.initialize(addr=list(section.addresses), train_data_parallel_size=ranks.world)
    # A run stopped inside AReaL's weight update (after /pause_generation, before
    # /continue_generation) leaves its servers paused: this run's requests would wait for ever.
    engine.continue_generation()
    check_servers_load_from(cfg)
    return engine, load_processor(model_path)


def weight_update_folder(cfg: TrainConfig) -> str:
    """Where AReaL's disk weight update saves the actor for the engine (under
    ``cluster.fileroot``; each version in a ``weight_update_v<N>`` folder beside this one)."""
    meta = WeightUpdateMeta.from_disk(cfg.experiment_name, cfg.trial_name, cfg.cluster.fileroot)
    return meta.path


def check_servers_load_from(cfg: TrainConfig) -> None:
    """Ask each server whether it will load this run's weight updates, before any rollout.

    ``vlrollout serve`` loads only from under its ``--weights-root`` and answers
    :data:`~vlrollout.engine.checks.WEIGHTS_CHECK`; a server without that route (SGLang, vLLM)
    is not asked. Otherwise the first update would fail after a step's rollouts, inside AReaL's
    client, with the server's reason lost.

    Raises:
        ConfigError: a server refuses; the message names it, ``cluster.fileroot`` and its reason.
    """
    folder, kind = weight_update_folder(cfg), cfg.vlrollout.engine.kind
    for address in cfg.vlrollout.engine.addresses:
        request = urllib.request.Request(
            f"http://{address}{WEIGHTS_CHECK}",
            data=json.dumps({"model_path": folder}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as e:
            if e.code != 403:
                continue  # not vlrollout serve, or its control routes are off
            raise ConfigError(
                f"the {kind} server at {address} will not load weight updates from "
                f"cluster.fileroot ({cfg.cluster.fileroot}): {_error_message(e)}. Set "
                "cluster.fileroot under the server's weights root, or restart the server with "
                "--weights-root at or above it"
            ) from None
        except OSError:
            continue  # unreachable this way (a proxy, say): AReaL's client reports real outages


def _error_message(error: urllib.error.HTTPError) -> str:
    """The ``error.message`` of an OpenAI-shaped error body, else the HTTP reason."""
    try:
        return json.loads(error.read())["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {error.code} {error.reason}"


def rank_device(device: str, ranks: Ranks) -> str:
    """The device of this rank's embedded engine: ``cuda`` means this rank's own GPU
    (``LOCAL_RANK``, as torchrun numbers them) when there are several processes.

    >>> [rank_device(d, Ranks(1, 2)) for d in ("cuda", "cuda:3", "cpu")]
    ['cuda:1', 'cuda:3', 'cpu']
    """
    if device == "cuda" and ranks.world > 1:
        return f"cuda:{os.environ.get('LOCAL_RANK', ranks.rank)}"
    return device


def send_starting_weights(
    cfg: TrainConfig, actor: Any, engine: Any, meta: Any, ranks: Ranks, version: int
) -> None:
    """Send the servers this run's weights, as ``version``, before its first rollout: a server
    keeps the weights it last loaded (an earlier run's, or this run's later steps' before a
    resume), and rollouts from them would train as on-policy.

    AReaL names a disk update's name_resolve key after the actor's version, which the first
    step's update has too: the key is cleared again, as :func:`connect` clears a crashed run's.
    """
    sync_weights(actor, engine, meta, ranks, False, version)
    if ranks.main:
        name_resolve.clear_subtree(
            names.update_weights_from_disk(cfg.experiment_name, cfg.trial_name, "")
        )
    ranks.barrier()


def connect(cfg: TrainConfig, actor: Any, engine: Any, ranks: Ranks, version: int) -> Any:
    """Connect ``actor`` to ``engine`` for disk weight updates, both at weight ``version``;
    returns AReaL's ``WeightUpdateMeta`` (:func:`update_engine_weights` takes it).

    Rank 0 first clears the name_resolve keys of this experiment's weight updates: keys of a run
    that crashed between a weight update and its checkpoint would make AReaL's
    ``name_resolve.add`` (no replace) fail on resume.
    """
    several_local = cfg.vlrollout.engine.kind == "local" and ranks.world > 1
    meta = WeightUpdateMeta.from_disk(
        cfg.experiment_name,
        cfg.trial_name,
        cfg.cluster.fileroot,
        # Rank 0's engine would remove the folder before the other ranks' engines read it.
        clear_checkpoint_after_load=not several_local,
    )
    if ranks.main:
        name_resolve.clear_subtree(
            names.update_weights_from_disk(cfg.experiment_name, cfg.trial_name, "")
        )
    ranks.barrier()
    actor.connect_engine(engine, meta)
    actor.set_version(version)
    engine.set_version(version)
    return meta


def update_engine_weights(actor: Any, engine: Any, meta: Any, ranks: Ranks, local: bool) -> None:
    """AReaL's weight update, then the same weights into this rank's own embedded engine.

    AReaL's ``update_weights`` (disk) tells only rank 0's engine to load: with servers that is
    every server, since rank 0's client reaches them all. An embedded engine lives in its rank's
    process, so on the other ranks it loads the same files here, once ``update_weights`` has
    returned: it ends with a barrier after rank 0's engine loaded them, so they are complete.
    """
    actor.update_weights(meta)
    if local and not ranks.main:
        engine.pause_generation()
        try:
            engine.load_weights_from_disk(meta).result()
        finally:
            engine.continue_generation()


def sync_weights(
    actor: Any, engine: Any, meta: Any, ranks: Ranks, local: bool, version: int
) -> None:
    """Pause the engine, send it the actor's weights as ``version``, and resume it: AReaL's
    ``PPOTrainer`` order (``engine.pause`` stops new episodes; those in flight carry on with the
    new weights, each token keeping the version that sampled it)."""
    engine.pause()
    update_engine_weights(actor, engine, meta.with_version(version), ranks, local)
    actor.set_version(version)
    engine.set_version(version)
    engine.resume()
