"""Everything a ``vlrollout train`` run is set up with before its first step.

:func:`start_session` does it in the order the run needs: settings checked, items loaded, the
reward's pool workers started (before any model is loaded, so that they share none of its memory:
:meth:`~vlrollout.rewards.executor.RewardPool.start`), the checkpoint to resume from found, AReaL's
actor built, the records after that checkpoint
dropped, the rollout engine built and connected, the workflows made, the trainer's one-time
set-up done (:mod:`vlrollout.train.warmup`: what the first update would pay for once)
and the checkpoint's state restored, asynchronous rollouts started (``rollout.max_head_offpolicyness > 0``) and the experiment trackers opened.
The :class:`Session` it returns is what :mod:`vlrollout.train.step` and
:mod:`vlrollout.train.loop` read.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import FinetuneSpec
from areal.utils.data import tensor_container_to

from vlrollout.compat.areal import training_device
from vlrollout.datasets import LOAD_ERROR
from vlrollout.errors import ConfigError, OutputFolderError
from vlrollout.eval.predict import EnginePredictor
from vlrollout.eval.tasks import get_task
from vlrollout.families import family_name_at
from vlrollout.files import check_writable_folder
from vlrollout.jsonl import read_jsonl, write_jsonl
from vlrollout.logs import get_logger
from vlrollout.rewards.caller import start_reward_workers
from vlrollout.train import asynchronous, checkpoint, dynamic_sampling, samples
from vlrollout.train.actor import build_actor
from vlrollout.train.asynchronous import AsyncRollouts, keep_all
from vlrollout.train.checkpoint import Checkpoint
from vlrollout.train.config import TrainConfig, check_rules, rule_warnings, start_areal_files
from vlrollout.train.data import check_batch_fits, load_data
from vlrollout.train.evaluation import (
    EVAL_FILE,
    HeldOut,
    TaskEvaluation,
    held_out_concurrency,
)
from vlrollout.train.loggers import TrainLoggers
from vlrollout.train.lora import check_resume, load_adapter
from vlrollout.train.ranks import Ranks, SharedRollout
from vlrollout.train.rewards import build_rewards
from vlrollout.train.rollout_engine import build_rollout_engine, connect, send_starting_weights
from vlrollout.train.settings import check_settings
from vlrollout.train.support import check_trainable
from vlrollout.train.warmup import warm_up, warm_up_batch
from vlrollout.workflows import VisionRLVRWorkflow

logger = get_logger(__name__)

METRICS_FILE = "metrics.jsonl"


@dataclass
class Session:
    """A run set up to take its steps.

    Attributes:
        cfg: The run's config.
        ranks: This process's place in the run.
        out: The output folder (``vlrollout.output``).
        train_items: The training items (all of them, on every rank).
        start: Steps completed before this run (the checkpoint resumed from; 0 for a new run).
        total: The step to stop after (``total_train_steps`` or the epochs' steps).
        actor: AReaL's ``FSDPPPOActor``, connected to the engine.
        engine: This rank's inference engine.
        meta: AReaL's ``WeightUpdateMeta`` for the disk weight update.
        workflow: The training workflow (``gconfig.n_samples`` episodes are a group).
        source: What on-policy steps call ``rollout_batch`` on: :class:`OneProcessRollout`, or
            with several processes :class:`~vlrollout.train.ranks.SharedRollout`.
        rollouts: Asynchronous rollouts (``None``: on-policy, each step rolls out its items).
        held_out: The held-out evaluation.
        loggers: The experiment trackers of ``stats_logger``.
        last_batch_at: When the previous step's batch arrived (asynchronous generation time).
        setup_s: Seconds of the trainer's one-time set-up (:func:`~vlrollout.train.warmup.
            warm_up`), reported with this run's first step as ``time/setup``, then ``None``.
    """

    cfg: TrainConfig
    ranks: Ranks
    out: Path
    train_items: list[dict]
    start: int
    total: int
    actor: Any
    engine: Any
    meta: Any
    workflow: Any
    source: Any
    rollouts: AsyncRollouts | None
    held_out: HeldOut
    loggers: TrainLoggers
    last_batch_at: float | None = None
    setup_s: float | None = None

    @property
    def metrics_path(self) -> Path:
        """``metrics.jsonl``: one record per training step, written by rank 0."""
        return self.out / METRICS_FILE

    @property
    def local(self) -> bool:
        """The engine is embedded in this process (each rank loads new weights itself)."""
        return self.cfg.vlrollout.engine.kind == "local"

    def close(self) -> None:
        """Close the trackers, the engine and the actor."""
        self.loggers.close()
        self.engine.destroy()
        self.actor.destroy()


def start_session(cfg: TrainConfig) -> Session:
    """Set up the run ``cfg`` describes, resuming from the latest checkpoint in its output.

    Raises:
        ConfigError: Settings that cannot run together, or a checkpoint saved by another
            number of processes or with another ``actor.use_lora``.
    """
    check_trainable(cfg.actor.path)
    vl = cfg.vlrollout
    ranks = Ranks.from_env()
    check_rules(cfg, ranks.world)
    out = output_folder(cfg)
    torch.manual_seed(cfg.seed)
    train_items, eval_items = load_data(cfg)
    check_batch_fits(cfg, train_items)
    readable = [item for item in eval_items if LOAD_ERROR not in item]  # eval_task keeps the rest
    reward, eval_reward = run_rewards(cfg, train_items, readable)
    start_reward_workers(reward)  # forked while the process holds no model (RewardPool.start)
    bs = cfg.train_dataset.batch_size
    ft_spec = FinetuneSpec(
        total_train_epochs=cfg.total_train_epochs,
        dataset_size=len(train_items),
        train_batch_size=bs,
    )
    prepare_rollout_config(cfg, ranks)  # before the engine is built from cfg.rollout
    ckpt = resume_point(cfg, out, ranks)
    start_areal_files(cfg, ranks.main)  # the last refusal is behind: the run starts
    start = ckpt.step if ckpt is not None else 0
    model_path = str(ckpt.path) if ckpt is not None else cfg.actor.path
    actor = build_actor(
        cfg.actor,
        ft_spec,
        freeze_vision_tower=vl.freeze_vision_tower,
        freeze_projector=vl.freeze_projector,
        encode_images_once=vl.encode_images_once,
    )
    if ranks.main:
        drop_records_after(out, start)
    engine, processor = build_rollout_engine(
        cfg, model_path, getattr(torch, cfg.actor.dtype), ranks
    )
    meta = connect(cfg, actor, engine, ranks, start)
    workflow, held_out = build_workflows(cfg, processor, reward, eval_reward, engine, eval_items)
    setup_s = warm_up_actor(cfg, actor, workflow, train_items, ranks)
    if ckpt is not None:  # after the warm-up, which leaves a new optimizer's state
        restore(actor, ckpt, cfg.actor.use_lora)
        restore_sampling(engine, ckpt, ranks)
    if vl.engine.kind != "local":
        send_starting_weights(cfg, actor, engine, meta, ranks, start)
    rollouts = start_rollouts(cfg, actor, engine, workflow, train_items, ranks, ckpt)
    # Several processes: shares with unequal numbers of accepted groups must not end the run.
    if ranks.world == 1:
        source: Any = OneProcessRollout(engine, packing_algorithm(cfg))
    else:
        source = SharedRollout(engine, ranks, packing_algorithm(cfg))
    return Session(
        cfg=cfg,
        ranks=ranks,
        out=out,
        train_items=train_items,
        start=start,
        total=cfg.total_train_steps or ft_spec.total_train_steps,
        actor=actor,
        engine=engine,
        meta=meta,
        workflow=workflow,
        source=source,
        rollouts=rollouts,
        held_out=held_out,
        loggers=TrainLoggers.open(cfg, ft_spec, resume_step=start),
        setup_s=setup_s,
    )


def warm_up_actor(
    cfg: TrainConfig, actor: Any, workflow: Any, train_items: list[dict], ranks: Ranks
) -> float:
    """:func:`~vlrollout.train.warmup.warm_up` on a batch shaped like one step's share of this
    rank (the first training items, the same on every rank); returns its seconds, the batch's
    preparation included."""
    start = time.perf_counter()
    batch = warm_up_batch(
        workflow.ctx.preprocessor,
        train_items,
        groups=max(cfg.train_dataset.batch_size // ranks.world, 1),
        group_size=cfg.gconfig.n_samples,
        new_tokens=cfg.gconfig.max_new_tokens,
    )
    warm_up(actor, batch, encode_images_once=cfg.vlrollout.encode_images_once)
    return time.perf_counter() - start


@dataclass
class OneProcessRollout:
    """``rollout_batch`` for a run of one process: the engine's own, then the groups kept as
    AReaL's ``actor.rollout_batch`` keeps them (:func:`~vlrollout.train.asynchronous.keep_all`:
    the same groups in the same order, without AReaL's per-tensor collectives, which cost about
    half a second per step of 8 groups here while the trainer waits).

    Attributes:
        engine: The run's inference engine.
        packing: AReaL's allocation (``actor.mb_spec.packing_algorithm``).
    """

    engine: Any
    packing: str = "ffd"

    def rollout_batch(
        self, data: list[dict[str, Any]], workflow: Any, group_size: int = 1
    ) -> list[dict[str, Any]]:
        """The accepted groups of ``data``'s items, on the training device."""
        groups = self.engine.rollout_batch(data, workflow=workflow, group_size=group_size)
        return keep_all(tensor_container_to(groups, training_device()), self.packing)


def prepare_rollout_config(cfg: TrainConfig, ranks: Ranks) -> None:
    """Log what the settings do less of than they say (:func:`~vlrollout.train.config.
    rule_warnings`, :func:`~vlrollout.train.asynchronous.config_warnings`; once, by rank 0),
    and let dynamic sampling's top-up rounds through the engine's admission limit
    (:func:`~vlrollout.train.dynamic_sampling.admit_top_up_rounds`)."""
    if ranks.main:
        for line in rule_warnings(cfg) + asynchronous.config_warnings(cfg):
            logger.warning("%s", line)
    vl = cfg.vlrollout
    if vl.dynamic_sampling:
        batch_size = cfg.train_dataset.batch_size
        dynamic_sampling.admit_top_up_rounds(cfg.rollout, batch_size, vl.dynamic_sampling_rounds)


def output_folder(cfg: TrainConfig) -> Path:
    """The run's output folder, created and writable, holding this run's settings (a folder
    with a checkpoint must hold the same ones: :func:`~vlrollout.train.settings.check_settings`).

    Raises:
        ConfigError: the folder cannot be written, or it holds a run with other settings.
    """
    out = writable_output(cfg)
    check_settings(out, cfg, resuming=checkpoint.latest(out) is not None)
    return out


def writable_output(cfg: TrainConfig) -> Path:
    """``vlrollout.output``, created, once a file can be written in it.

    Raises:
        ConfigError: a parent is a file, or the folder is not writable.
    """
    out = Path(cfg.vlrollout.output)
    try:
        check_writable_folder(out, option="vlrollout.output")
    except OutputFolderError as e:
        raise ConfigError(f"vlrollout.output {out}: {str(e).split(': ', 1)[-1]}") from None
    return out


def run_rewards(cfg: TrainConfig, train: list[dict], held_out: list[dict]) -> tuple[Any, Any]:
    """``(training reward, evaluation reward)`` of ``vlrollout.reward`` (:func:`build_rewards`).

    Raises:
        ConfigError: the reward cannot be built (unknown name, import path that does not
            resolve, a box reward on a family without a convention), in one line.
    """
    vl = cfg.vlrollout
    try:
        return build_rewards(
            vl.reward, vl.ground_metric, train, held_out, cfg.actor.path, vl.box_format
        )
    except (ImportError, AttributeError, ValueError, TypeError, LookupError) as e:
        raise ConfigError(f"vlrollout.reward {vl.reward!r}: {str(e).splitlines()[0]}") from None


def check_resumable(cfg: TrainConfig, out: Path, world: int) -> Checkpoint | None:
    """The latest checkpoint in ``out`` if this run (``world`` processes) can resume from it,
    ``None`` for a new run; the launcher calls it before any process starts.

    Raises:
        ConfigError: The checkpoint was saved by another number of processes, or with another
            ``actor.use_lora``.
    """
    ckpt = checkpoint.latest(out)
    if ckpt is not None:
        check_resume(ckpt.path, cfg.actor.use_lora)
        checkpoint.check_world_size(ckpt, world)
    return ckpt


def resume_point(cfg: TrainConfig, out: Path, ranks: Ranks) -> Checkpoint | None:
    """The latest checkpoint in ``out``, checked against this run, or ``None`` for a new run.
    Without LoRA the actor is then built from it (``cfg.actor.path`` is pointed at it); with
    LoRA from the frozen base, and the saved adapter is loaded after (:func:`restore`).

    Raises:
        ConfigError: The checkpoint was saved by another number of processes, or with another
            ``actor.use_lora``.
    """
    ckpt = check_resumable(cfg, out, ranks.world)
    if ckpt is None:
        return None
    if not cfg.actor.use_lora:
        cfg.actor.path = str(ckpt.path)
    logger.info("resuming from %s (step %d)", ckpt.path, ckpt.step)
    return ckpt


def restore(actor: Any, ckpt: Checkpoint, use_lora: bool) -> None:
    """The checkpoint's LoRA adapter (with ``use_lora``) and optimizer state into ``actor``."""
    if use_lora:
        load_adapter(actor, ckpt.path)
    checkpoint.load_optimizer(actor, ckpt)


def restore_sampling(engine: Any, ckpt: Checkpoint, ranks: Ranks) -> None:
    """This rank's deterministic draw counts from ``ckpt`` into a deterministic local engine, so
    an item that comes round again after the resume is drawn as in the uninterrupted run. A
    checkpoint saved without them (an earlier version, or a batching engine) resumes with a
    warning that such items are drawn afresh."""
    if not getattr(engine, "deterministic", False):
        return
    saved = ckpt.state.get(checkpoint.SAMPLING)
    if not saved:
        logger.warning(
            "%s holds no deterministic draw counts: items that come round again are drawn as "
            "their first occurrence, so this run departs from an uninterrupted one there",
            ckpt.path,
        )
        return
    engine.load_sampling_state(saved[ranks.rank])


def drop_records_after(out: Path, step: int) -> None:
    """Drop the records of steps after ``step`` (the checkpoint resumed from) from the run's
    ``metrics.jsonl``, ``eval.jsonl`` and shown rollouts: a resumed run writes them again."""
    for name in (METRICS_FILE, EVAL_FILE, samples.ROLLOUTS_FILE):
        path = out / name
        write_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= step])


def build_workflows(
    cfg: TrainConfig,
    processor: Any,
    reward: Any,
    eval_reward: Any,
    engine: Any,
    eval_items: list[dict],
) -> tuple[Any, HeldOut]:
    """The training workflow (one sample per episode; AReaL runs ``n_samples`` episodes per
    item) and the held-out evaluation: its greedy and sampled workflows and, with
    ``vlrollout.eval_task``, the evaluator of ``vlrollout eval`` on the same engine, prompts built
    as the workflows build them (same processor, frame sampling and ``gconfig`` lengths)."""
    tokenizer = processor.tokenizer
    one = dataclasses.replace(cfg.gconfig, n_samples=1)
    greedy = GenerationHyperparameters(
        n_samples=1, greedy=True, max_new_tokens=cfg.gconfig.max_new_tokens
    )
    vl = cfg.vlrollout
    budget = {
        "min_pixels": vl.min_pixels,
        "max_pixels": vl.max_pixels,
        "frames": vl.frame_sampling(),
    }
    task = None
    if vl.eval_task is not None:
        predictor = EnginePredictor(engine, tokenizer, processor, gconfig=cfg.gconfig, **budget)
        concurrency = held_out_concurrency(
            vl.engine.kind, bool(vl.engine.deterministic), len(eval_items)
        )
        family = vl.eval_box_format or vl.box_format or family_name_at(cfg.actor.path)
        task = TaskEvaluation(get_task(vl.eval_task), predictor, family, concurrency)
    held_out = HeldOut(
        engine=engine,
        greedy=VisionRLVRWorkflow(eval_reward, greedy, tokenizer, processor, **budget),
        sampled=VisionRLVRWorkflow(eval_reward, one, tokenizer, processor, **budget),
        items=eval_items,
        reward=eval_reward,
        sampled_repeats=vl.eval_samples,
        shown=vl.log_rollouts,
        out=Path(vl.output),
        task=task,
    )
    return VisionRLVRWorkflow(reward, one, tokenizer, processor, **budget), held_out


def start_rollouts(
    cfg: TrainConfig,
    actor: Any,
    engine: Any,
    workflow: Any,
    train_items: list[dict],
    ranks: Ranks,
    ckpt: Checkpoint | None,
) -> AsyncRollouts | None:
    """Asynchronous rollouts of this rank's share of the items, resumed from the checkpoint's
    loader position; ``None`` on-policy (``rollout.max_head_offpolicyness = 0``)."""
    offpolicy = cfg.rollout.max_head_offpolicyness
    if offpolicy == 0:
        return None
    saved = ckpt.state.get("rollouts") if ckpt is not None else None  # one entry per rank
    rollouts = asynchronous.start(
        actor,
        engine,
        workflow,
        ranks.share(train_items),
        batch_size=cfg.train_dataset.batch_size // ranks.world,
        group_size=cfg.gconfig.n_samples,
        ahead=offpolicy,
        seed=cfg.seed,
        start_step=ckpt.step if ckpt is not None else 0,
        state=saved[ranks.rank] if saved else None,
        packing=packing_algorithm(cfg),
    )
    logger.info(
        "asynchronous rollouts, at most %d weight version%s behind",
        offpolicy,
        "" if offpolicy == 1 else "s",
    )
    return rollouts


def packing_algorithm(cfg: TrainConfig) -> str:
    """AReaL's allocation of trajectories to ranks (``actor.mb_spec.packing_algorithm``)."""
    return getattr(cfg.actor.mb_spec, "packing_algorithm", None) or "ffd"
