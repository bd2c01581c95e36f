"""The GRPO loop of ``vlrollout train``, wired from AReaL's own pieces.

Per step, in the order of AReaL's ``PPOTrainer.train``: the batch → ``compute_logp`` (only when
the config asks for a proximal policy) → ``compute_advantages`` → ``ppo_update`` +
``step_lr_scheduler`` → ``update_weights`` (disk; the engine waits for the trainer's name_resolve
key) → ``set_version`` on both sides. Nothing of the algorithm is ours; this module adds data,
rewards, held-out evaluation, checkpoints and metrics.

The batch: with ``rollout.max_head_offpolicyness = 0`` (on-policy), ``actor.rollout_batch`` of the
step's items (AReaL's ``WorkflowExecutor`` running our vision workflow on the engine,
``gconfig.n_samples`` episodes per item), the trainer idle meanwhile; with k > 0, AReaL's
``actor.prepare_batch``, whose episodes keep running while the trainer updates, at most k weight
versions behind it (:mod:`vlrollout.train.asynchronous`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from vlrollout.logs import get_logger
from vlrollout.train.config import TrainConfig
from vlrollout.train.ranks import ADVANTAGE_KEYS, Ranks, SharedRollout, stats_view

logger = get_logger(__name__)


# ----------------------------------------------------------------------------- data and rewards
def load_data(cfg: TrainConfig) -> tuple[list[dict], list[dict]]:
    """Training items and held-out items: a data file, or the synthetic task's generator."""
    from vlrollout.tiny.synthetic import generate_items

    vl = cfg.vlrollout
    if cfg.train_dataset.path:
        from vlrollout.datasets import LOAD_ERROR, load_items

        def readable(path: str) -> list[dict]:
            """The file's items; lines that are not items are skipped with a warning each."""
            items = load_items(path)
            for item in items:
                if LOAD_ERROR in item:
                    logger.warning("%s %s skipped: %s", path, item["id"], item[LOAD_ERROR])
            return [item for item in items if LOAD_ERROR not in item]

        train = readable(cfg.train_dataset.path)
        valid = (
            readable(cfg.valid_dataset.path)
            if cfg.valid_dataset is not None and cfg.valid_dataset.path
            else generate_items(vl.task, vl.eval_items, vl.eval_seed)
        )
        return train, valid
    return (
        generate_items(vl.task, vl.train_items, vl.data_seed),
        generate_items(vl.task, vl.eval_items, vl.eval_seed),
    )


def batch_items(items: list[dict], step: int, batch_size: int, seed: int) -> list[dict]:
    """Items of ``step``: a fresh seeded permutation per epoch, so a resumed run sees the same."""
    per_epoch = max(1, len(items) // batch_size)
    epoch, i = divmod(step, per_epoch)
    order = list(range(len(items)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return [items[j] for j in order[i * batch_size : (i + 1) * batch_size]]


# ----------------------------------------------------------------------------- statistics
def rollout_stats(batch: list[dict[str, torch.Tensor]], rollout_s: float) -> dict[str, float]:
    """Reward mean/std, fraction of groups whose rewards are all equal, generated tokens/s."""
    rewards = [float(r) for g in batch for r in g["rewards"].flatten()]
    equal = [bool((g["rewards"] == g["rewards"].flatten()[0]).all()) for g in batch]
    tokens = sum(int(g["loss_mask"].sum()) for g in batch)
    return {
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards),
        "frac_all_equal_groups": sum(equal) / len(equal),
        "n_trajectories": len(rewards),
        "gen_tokens": tokens,
        "tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
    }


def pick(stats: dict[str, float], name: str) -> float | None:
    """The AReaL stat ending in ``name`` or ``name/avg`` (its scope prefixes vary)."""
    for key in sorted(stats):
        if key.endswith(f"/{name}/avg") or key.endswith(f"/{name}") or key == name:
            return stats[key]
    return None


def evaluate(
    engine: Any,
    workflow: Any,
    items: list[dict],
    prefix: str = "eval",
    repeats: int = 1,
    step: int | None = None,
    episodes_out: list[tuple[dict, dict | None]] | None = None,
) -> dict[str, float]:
    """Held-out evaluation straight on the engine (outside AReaL's staleness budget): the mean
    reward per task over ``repeats`` episodes per item. ``episodes_out``, when given, gets each
    ``(item, trajectory or None for a rejected episode)`` in item order (for the shown rollouts,
    :mod:`vlrollout.train.samples`).

    A rejected episode scores 0 and stays in the denominator, so rejections never raise the
    mean; ``{prefix}/n`` (episodes) and ``{prefix}/rejected`` say how many of the episodes
    behind it were rejected (:func:`eval_line` prints both).

    Raises:
        NothingAccepted: Every episode was rejected: a mean of zeros would measure nothing.
            ``step`` is named in the message.
    """
    from vlrollout.ledger import NothingAccepted

    episodes = [it for it in items for _ in range(repeats)]
    ledger = getattr(workflow, "ledger", None)
    mark = ledger.mark() if ledger is not None else None

    async def run():
        return await asyncio.gather(*(workflow.arun_episode(engine, it) for it in episodes))

    trajs = asyncio.run(run())
    if episodes_out is not None:
        episodes_out.extend(zip(episodes, trajs, strict=True))
    if all(t is None for t in trajs):
        outcome = ledger.since(mark) if ledger is not None else {"rejected": 0, "rejections": []}
        at = f" at step {step}" if step is not None else ""
        raise NothingAccepted(
            f"the held-out evaluation {prefix!r}{at}",
            len(episodes),
            outcome["rejections"],
            rejected=outcome["rejected"],
            hint="no score is reported from no episode; each rejection is logged above",
        )
    by_task: dict[str, list[float]] = {}
    for it, t in zip(episodes, trajs, strict=True):
        score = float(t["rewards"].flatten()[0]) if t is not None else 0.0
        by_task.setdefault(it.get("task", "all"), []).append(score)
    out = {f"{prefix}/{k}": statistics.fmean(v) for k, v in by_task.items()}
    out[f"{prefix}/mean"] = statistics.fmean(s for v in by_task.values() for s in v)
    out[f"{prefix}/n"] = len(episodes)
    out[f"{prefix}/rejected"] = sum(t is None for t in trajs)
    return out


def eval_line(record: dict[str, Any], prefix: str = "eval") -> str:
    """The mean of one evaluation with its denominator and rejections, for the log.

    >>> eval_line({"eval/mean": 0.5, "eval/n": 8, "eval/rejected": 2})
    'eval 0.5000 over 8 episodes (2 rejected, scored 0)'
    """
    n, rejected = record[f"{prefix}/n"], record[f"{prefix}/rejected"]
    line = f"{prefix} {record[f'{prefix}/mean']:.4f} over {n} episodes"
    return line + (f" ({rejected} rejected, scored 0)" if rejected else "")


# ----------------------------------------------------------------------------- the engine
def build_rollout_engine(
    cfg: TrainConfig, model_path: str, dtype: torch.dtype, ranks: Ranks | None = None
) -> tuple[Any, Any]:
    """``(engine, processor)`` for ``vlrollout.engine``: the embedded engine, or AReaL's own
    remote engine connected to ``engine.addresses`` (SGLang or AReaL's vLLM protocol, e.g.
    ``vlrollout serve``).

    Either way the actor's ``update_weights`` reaches it through AReaL's disk path: the engine (or
    AReaL's client, for a server) waits for the trainer's name_resolve key before loading.

    With several processes (``ranks``) each builds its own client or embedded engine, told the
    data-parallel size as AReaL's are (its executor admits its share of the concurrency and of
    the batch). An embedded engine samples with ``seed + rank``, so ranks do not draw the same
    random numbers; in deterministic mode the seed is shared, since each completion is a function
    of the seed and its request: the same items give the same episodes on whichever rank.
    """
    ranks = ranks or Ranks()
    section = cfg.vlrollout.engine
    if section.kind == "local":
        from vlrollout.engine.local import LocalInferenceEngine

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
    from vlrollout.engine.factory import remote_engine
    from vlrollout.workflows.episode import load_processor

    engine = remote_engine(
        section.kind,
        cfg.rollout,
        experiment_name=cfg.experiment_name,
        trial_name=cfg.trial_name,
        tokenizer_path=model_path,
    )
    engine.initialize(addr=list(section.addresses), train_data_parallel_size=ranks.world)
    return engine, load_processor(model_path)


def rank_device(device: str, ranks: Ranks) -> str:
    """The device of this rank's embedded engine: ``cuda`` means this rank's own GPU
    (``LOCAL_RANK``, as torchrun numbers them) when there are several processes.

    >>> [rank_device(d, Ranks(1, 2)) for d in ("cuda", "cuda:3", "cpu")]
    ['cuda:1', 'cuda:3', 'cpu']
    """
    import os

    if device == "cuda" and ranks.world > 1:
        return f"cuda:{os.environ.get('LOCAL_RANK', ranks.rank)}"
    return device


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


# ----------------------------------------------------------------------------- the loop
def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run GRPO as configured; returns the last step's record. Resumes from ``output``.

    Under ``torchrun`` every process runs this (:mod:`vlrollout.train.ranks`): each rolls out
    its share of a step's items, and rank 0 evaluates and writes the files.
    """
    from areal.api.cli_args import GenerationHyperparameters
    from areal.api.io_struct import FinetuneSpec, WeightUpdateMeta
    from areal.utils import name_resolve, names
    from tqdm import tqdm

    from vlrollout.jsonl import append_jsonl, read_jsonl, write_jsonl
    from vlrollout.train import (
        asynchronous,
        checkpoint,
        diagnostics,
        dynamic_sampling,
        grouping,
        samples,
    )
    from vlrollout.train.actor import build_actor
    from vlrollout.train.batch import compute_advantages, rollout_step
    from vlrollout.train.loggers import TrainLoggers
    from vlrollout.train.report import write_report
    from vlrollout.train.rewards import build_rewards
    from vlrollout.train.support import check_trainable
    from vlrollout.workflows import VisionRLVRWorkflow

    check_trainable(cfg.actor.path)
    vl = cfg.vlrollout
    ranks = Ranks.from_env()
    out = Path(vl.output)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    train_items, eval_items = load_data(cfg)
    reward, eval_reward = build_rewards(vl.reward, vl.ground_metric, train_items, eval_items)
    bs = cfg.train_dataset.batch_size
    check_world(bs, ranks)
    ft_spec = FinetuneSpec(
        total_train_epochs=cfg.total_train_epochs,
        dataset_size=len(train_items),
        train_batch_size=bs,
    )
    total = cfg.total_train_steps or ft_spec.total_train_steps
    offpolicy = cfg.rollout.max_head_offpolicyness
    if vl.dynamic_sampling:  # before the engine is built: its admission limit rises
        dynamic_sampling.configure(
            cfg.rollout, offpolicy, ranks.world, bs, vl.dynamic_sampling_rounds
        )
    if vl.train_groups >= bs:
        logger.warning(
            "vlrollout.train_groups=%d is not below train_dataset.batch_size=%d: every group "
            "of a step is trained",
            vl.train_groups,
            bs,
        )
    if offpolicy > 0:
        for line in asynchronous.check_config(cfg):
            logger.warning("%s", line)

    ckpt = checkpoint.latest(out)
    start = 0
    model_path = cfg.actor.path
    if ckpt is not None:
        from vlrollout.train.lora import check_resume

        check_resume(ckpt.path, cfg.actor.use_lora)
        checkpoint.check_world_size(ckpt, ranks.world)
        start, model_path = ckpt.step, str(ckpt.path)
        if not cfg.actor.use_lora:  # LoRA: the frozen base, then the saved adapter
            cfg.actor.path = model_path
        logger.warning("resuming from %s (step %d)", ckpt.path, start)
    actor = build_actor(
        cfg.actor,
        ft_spec,
        freeze_vision_tower=vl.freeze_vision_tower,
        freeze_projector=vl.freeze_projector,
        encode_images_once=vl.encode_images_once,
    )
    if ckpt is not None:
        if cfg.actor.use_lora:
            from vlrollout.train.lora import load_adapter

            load_adapter(actor, ckpt.path)
        checkpoint.load_optimizer(actor, ckpt)
    metrics_path, eval_path = out / "metrics.jsonl", out / "eval.jsonl"
    rollouts_path = out / samples.ROLLOUTS_FILE
    if ranks.main:
        for path in (metrics_path, eval_path, rollouts_path):  # drop records after the checkpoint
            kept = [r for r in read_jsonl(path) if r["step"] <= start]
            write_jsonl(path, kept)

    engine, processor = build_rollout_engine(
        cfg, model_path, getattr(torch, cfg.actor.dtype), ranks
    )
    local = cfg.vlrollout.engine.kind == "local"
    meta = WeightUpdateMeta.from_disk(
        cfg.experiment_name,
        cfg.trial_name,
        cfg.cluster.fileroot,
        # Rank 0's engine would remove the folder before the other ranks' engines read it.
        clear_checkpoint_after_load=not (local and ranks.world > 1),
    )
    if ranks.main:
        # Keys of a run that crashed between a weight update and its checkpoint would make
        # AReaL's name_resolve.add (no replace) fail on resume: start this run's keys afresh.
        name_resolve.clear_subtree(
            names.update_weights_from_disk(cfg.experiment_name, cfg.trial_name, "")
        )
    ranks.barrier()
    actor.connect_engine(engine, meta)
    actor.set_version(start)
    engine.set_version(start)

    one = dataclasses.replace(cfg.gconfig, n_samples=1)
    workflow = VisionRLVRWorkflow(reward, one, processor.tokenizer, processor)
    greedy = GenerationHyperparameters(
        n_samples=1, greedy=True, max_new_tokens=cfg.gconfig.max_new_tokens
    )
    eval_workflow = VisionRLVRWorkflow(eval_reward, greedy, processor.tokenizer, processor)
    sampled_workflow = VisionRLVRWorkflow(eval_reward, one, processor.tokenizer, processor)
    rollouts = None  # on-policy: each step's rollout_batch
    if offpolicy > 0:
        saved = ckpt.state.get("rollouts") if ckpt is not None else None  # one entry per rank
        rollouts = asynchronous.start(
            actor,
            engine,
            workflow,
            ranks.share(train_items),
            batch_size=bs // ranks.world,
            group_size=cfg.gconfig.n_samples,
            seed=cfg.seed,
            start_step=start,
            state=saved[ranks.rank] if saved else None,
        )
        logger.warning("asynchronous rollouts, at most %d weight versions behind", offpolicy)
    # Several processes: shares with unequal numbers of accepted groups must not end the run.
    source = actor if ranks.world == 1 else SharedRollout(engine, ranks, packing_algorithm(cfg))
    last_batch_at: float | None = None
    true_area = diagnostics.true_area_fraction(train_items)  # None unless grounding

    def run_eval(step: int) -> None:
        t = time.perf_counter()
        episodes: list[tuple[dict, dict | None]] = []
        rec = {
            "step": step,
            **evaluate(engine, eval_workflow, eval_items, step=step, episodes_out=episodes),
        }
        prefixes = ["eval"]
        if vl.eval_samples:
            rec.update(
                evaluate(
                    engine, sampled_workflow, eval_items, "eval_sampled", vl.eval_samples, step
                )
            )
            prefixes.append("eval_sampled")
        rec["eval/seconds"] = time.perf_counter() - t
        append_jsonl(eval_path, rec)
        shown = samples.collect(step, episodes, eval_workflow, eval_reward, vl.log_rollouts)
        samples.save(out, shown)
        loggers.add(rec)
        loggers.rollouts(step, shown)
        lines = "; ".join(eval_line(rec, p) for p in prefixes)
        logger.warning("held-out eval at step %d: %s", step, lines)

    record: dict[str, Any] = {}
    loggers = TrainLoggers.open(cfg, ft_spec)
    try:
        if ranks.main and start == 0 and not read_jsonl(eval_path):
            run_eval(0)
            loggers.commit()
        bar = tqdm(
            range(start, total),
            initial=start,
            total=total,
            disable=not (vl.progress and ranks.main),
        )
        for step in bar:
            t0 = time.perf_counter()
            dynamic: dict[str, float] = {}  # dynamic sampling's counts, when on
            if rollouts is None:
                data = ranks.share(batch_items(train_items, step, bs, cfg.seed))
                if vl.dynamic_sampling:
                    batch, outcome, dynamic = dynamic_sampling.rollout_step_with_spread(
                        actor,
                        workflow,
                        data,
                        train_items,
                        group_size=cfg.gconfig.n_samples,
                        seed=cfg.seed,
                        step=step,
                        max_rounds=vl.dynamic_sampling_rounds,
                    )
                else:
                    batch, outcome = rollout_step(
                        source, workflow, data, cfg.gconfig.n_samples, step + 1
                    )
            else:
                batch, outcome = rollouts.next_batch(step + 1)
            if vl.train_groups:  # the config refuses it with dynamic_sampling
                batch, dynamic = dynamic_sampling.train_widest(
                    batch, vl.train_groups, bs, ranks.gather
                )
            arrived = time.perf_counter()
            t_rollout = arrived - t0  # the trainer's wait
            # Asynchronous: the batch was generated over the whole time since the previous one.
            t_generated = t_rollout if rollouts is None else arrived - (last_batch_at or t0)
            last_batch_at = arrived
            # Each rank holds its share of the redistributed batch; the metrics describe all.
            whole = ranks.gather(stats_view(batch))
            stale = asynchronous.staleness(whole, actor.get_version())
            if stale["staleness_max"] > offpolicy:
                logger.warning(
                    "step %d trains tokens %d weight versions old (max_head_offpolicyness=%d): "
                    "AReaL bounds when episodes start, and later ones finished first",
                    step + 1,
                    stale["staleness_max"],
                    offpolicy,
                )

            t = time.perf_counter()
            if cfg.actor.should_compute_prox_logp():
                with grouping.whole_groups(actor, batch, vl.encode_images_once):
                    logps = actor.compute_logp(batch)
                for traj, lp in zip(batch, logps, strict=True):
                    traj["prox_logp"] = lp
            t_logp = time.perf_counter() - t

            t = time.perf_counter()
            adv = compute_advantages(actor, batch)
            if vl.dynamic_sampling_scale:  # the config refuses it without dynamic_sampling
                adv, scale = dynamic_sampling.scale_short_batch(
                    adv, int(dynamic["dynamic/kept"]), bs
                )
                dynamic["dynamic/scale"] = scale
            with grouping.whole_groups(actor, batch, vl.encode_images_once):
                actor.ppo_update(adv)
            actor.step_lr_scheduler()
            t_update = time.perf_counter() - t

            t = time.perf_counter()
            engine.pause()
            update_engine_weights(actor, engine, meta.with_version(step + 1), ranks, local)
            actor.set_version(step + 1)
            engine.set_version(step + 1)
            engine.resume()
            t_sync = time.perf_counter() - t

            areal_stats = actor.export_stats()  # reduced over the ranks by AReaL
            whole_adv = ranks.gather(stats_view(adv, ADVANTAGE_KEYS))
            rejected = ranks.total({"rejected": outcome["rejected"]})["rejected"]
            record = {
                "step": step + 1,
                **rollout_stats(whole, t_generated),
                "rejected": rejected,
                **dynamic,
                **stale,
                # PPO's approximate KL of the updated policy from the one that sampled (AReaL's
                # approx_kl): the size of the step, not a KL to a reference model.
                "ppo_approx_kl": pick(areal_stats, "approx_kl"),
                "entropy": pick(areal_stats, "entropy"),
                "clip_ratio": pick(areal_stats, "clip_ratio"),
                "grad_norm": pick(areal_stats, "grad_norm"),
                "actor_loss": pick(areal_stats, "actor_loss"),
                "lr": pick(areal_stats, "lr"),
                "time/rollout": t_rollout,
                "time/logp": t_logp,
                "time/update": t_update,
                "time/weight_sync": t_sync,
                "time/step": time.perf_counter() - t0,
                **diagnostics.batch_diagnostics(whole, whole_adv, processor.tokenizer, true_area),
                "areal": areal_stats,
            }
            if ranks.world > 1:
                record["world_size"] = ranks.world
            done = step + 1
            if ranks.main:
                append_jsonl(metrics_path, record)
                loggers.add(record)
                bar.set_postfix(
                    reward=f"{record['reward_mean']:.3f}", s=f"{record['time/step']:.1f}"
                )
                if vl.eval_every and done % vl.eval_every == 0 or done == total:
                    run_eval(done)
                loggers.commit()
            if done % vl.save_every == 0 or done == total:
                # Every rank's loader position: each resumes its own share of the items.
                state = (
                    {"rollouts": ranks.gather([rollouts.state()])} if rollouts is not None else None
                )
                checkpoint.save(actor, out, done, state=state, main=ranks.main)
            if ranks.main:
                write_report(out, cfg)
            ranks.barrier()  # the other ranks wait here while rank 0 evaluates
            del batch, adv
    finally:
        loggers.close()
        engine.destroy()
        actor.destroy()
    if ranks.main:
        write_report(out, cfg)
    return record


def packing_algorithm(cfg: TrainConfig) -> str:
    """AReaL's allocation of trajectories to ranks (``actor.mb_spec.packing_algorithm``)."""
    return getattr(cfg.actor.mb_spec, "packing_algorithm", None) or "ffd"


def check_world(batch_size: int, ranks: Ranks) -> None:
    """Refuse a batch that the processes cannot share equally.

    Raises:
        ConfigError: ``train_dataset.batch_size`` is not a multiple of the number of processes.
    """
    from vlrollout.errors import ConfigError

    if batch_size % ranks.world:
        raise ConfigError(
            f"train_dataset.batch_size={batch_size} cannot be shared by {ranks.world} processes: "
            f"each rolls out an equal share of a step's items; use a multiple of {ranks.world}"
        )
