"""``vlrollout train``'s config: AReaL's ``GRPOConfig`` plus a ``vlrollout`` section.

Loaded with AReaL's own ``load_expr_config`` (YAML + Hydra-style ``key=value`` overrides), so an
AReaL user recognises every key; only data, reward, the engine section (the same
:class:`~vlrollout.engine.config.EngineConfig` as ``vlrollout run``'s ``engine:``) and reporting
live under ``vlrollout:``. Paths and errors follow :mod:`vlrollout.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from areal.api.cli_args import GRPOConfig

from vlrollout.engine.config import EngineConfig
from vlrollout.errors import ConfigError

GROUND_METRICS = ("iou", "giou", "acc", "centre", "iou_centre")
"""The values of ``vlrollout.ground_metric``."""


def _train_engine() -> EngineConfig:
    return EngineConfig(model="")


@dataclass
class TrainSection:
    """What AReaL's config has no place for.

    Attributes:
        output: Folder for checkpoints, ``metrics.jsonl``, ``eval.jsonl`` and ``report.html``.
        task: Synthetic shapes task (``ground``, ``count``, ``caption`` or ``mix``) used when
            ``train_dataset.path`` is empty; items come from :mod:`vlrollout.tiny.synthetic`.
        train_items, eval_items: Items generated for training and for the held-out evaluation.
        data_seed, eval_seed: Seeds of the two item sets (different, so evaluation is held out).
        reward: ``tiny_task`` (count → exact, ground → ``ground_metric``, caption → CIDEr-D) or a
            reward name / import path from :mod:`vlrollout.rewards`.
        ground_metric: Box reward used in training for ``tiny_task``, one of
            :data:`GROUND_METRICS` (:class:`~vlrollout.rewards.grounding.GroundingReward`'s
            single-box metrics): ``iou``; ``giou`` (dense, but its miss penalty shrinks as the
            box grows); ``acc`` (1 for IoU >= 0.5, VLM-R1's accuracy reward); ``centre`` (1 minus
            the centre distance over the image diagonal, blind to size); ``iou_centre`` (the mean
            of ``iou`` and ``centre``). Evaluation always reports IoU.
        eval_every: Evaluate (held-out) every this many steps; 0 only at start and end.
        eval_samples: Besides the greedy evaluation, this many sampled episodes per held-out item
            at the training temperature (``eval_sampled/*``: the policy's expected reward);
            0 skips it.
        log_rollouts: Held-out rollouts shown per evaluation (the first items of the held-out
            set, greedy): image with true and predicted boxes, completion and reward, in the
            report, ``eval_rollouts.jsonl`` and the ``stats_logger`` trackers
            (:mod:`vlrollout.train.samples`); 0 shows none.
        save_every: Checkpoint every this many steps (and at the end).
        progress: Show a progress bar.
        engine: Where rollouts run (:class:`~vlrollout.engine.config.EngineConfig`): ``kind:
            local`` (the embedded engine in this process) or ``sglang``/``vllm`` (AReaL's own
            remote engine, talking to servers at ``engine.addresses``, e.g. ``vlrollout serve`` in
            another process, the way AReaL deployments split inference from training; weights
            reach them through AReaL's disk update over HTTP). ``engine.model`` stays empty: the
            engine rolls out the actor's weights (``actor.path``). ``engine.deterministic``
            (local engine): each completion depends only on ``seed`` and its request, so a rerun
            rolls out the same episodes; unset means off.
        freeze_vision_tower: Do not train the vision encoder (its projector excepted): its
            parameters get ``requires_grad=False`` before the optimizer is built
            (:mod:`vlrollout.train.freezing`; AReaL's config has no such key).
        freeze_projector: Do not train the projector (Qwen-VL's ``merger``, LLaVA's
            ``multi_modal_projector``, Idefics3's ``connector``).
        dynamic_sampling: Train only on groups whose rewards differ and top the step up with
            further training items (DAPO's dynamic sampling,
            :func:`~vlrollout.train.dynamic_sampling.rollout_with_spread`): an all-equal group has
            zero advantage and only dilutes the loss. On-policy and one process only.
        dynamic_sampling_rounds: Rollouts per step at most with ``dynamic_sampling``, the first
            included; a step trains on fewer groups when they run out.
        dynamic_sampling_scale: With ``dynamic_sampling``, a step that kept ``k`` of its
            ``batch_size`` groups scales their advantages by ``k / batch_size``
            (:func:`~vlrollout.train.dynamic_sampling.scale_short_batch`): each group weighs as
            in a full batch, so a short batch makes a small update instead of a full-size one.
        train_groups: Groups trained per step; 0 trains every group of the step's
            ``train_dataset.batch_size`` items. ``N`` below the batch size trains the ``N`` groups
            whose rewards spread widest and leaves the others out
            (:func:`~vlrollout.train.dynamic_sampling.widest_spread`): with a dense reward, the
            update goes where the samples disagree most. With several processes each keeps the
            same share ``N / batch_size`` of the groups it holds
            (:func:`~vlrollout.train.dynamic_sampling.groups_to_keep`). Not together with
            ``dynamic_sampling``.
        encode_images_once: The trainer's micro-batches hold whole groups
            (:mod:`vlrollout.train.grouping`) and each of their forwards encodes a distinct image
            once (:mod:`vlrollout.image_sharing`; the local engine's prefill always does): the
            same forward and gradients with a group's image encoded once instead of n times.
            ``false`` keeps AReaL's packing by length and encodes every copy (the reference
            ``bench/bench_update_rows.py`` measures against).
    """

    output: str = "runs/train"
    task: str = "ground"
    train_items: int = 512
    eval_items: int = 200
    data_seed: int = 100
    eval_seed: int = 200
    reward: str = "tiny_task"
    ground_metric: str = "giou"
    eval_every: int = 5
    eval_samples: int = 0
    save_every: int = 10
    log_rollouts: int = 4
    progress: bool = True
    engine: EngineConfig = field(default_factory=_train_engine)
    freeze_vision_tower: bool = False
    freeze_projector: bool = False
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 3
    dynamic_sampling_scale: bool = False
    train_groups: int = 0
    encode_images_once: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):
            self.engine = EngineConfig(**{"model": "", **self.engine})
        if self.engine.model:
            raise ConfigError(
                f"vlrollout.engine.model={self.engine.model!r}: training rolls out the actor's "
                "weights; set actor.path instead and leave vlrollout.engine.model empty"
            )
        if self.task not in ("ground", "count", "caption", "mix"):
            raise ConfigError(
                f"vlrollout.task must be ground, count, caption or mix, got {self.task!r}"
            )
        if self.ground_metric not in GROUND_METRICS:
            raise ConfigError(
                f"vlrollout.ground_metric must be one of {', '.join(GROUND_METRICS)}, got "
                f"{self.ground_metric!r}"
            )
        for name in ("train_items", "eval_items"):
            if getattr(self, name) < 1:
                raise ConfigError(f"vlrollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.dynamic_sampling_rounds < 1:
            raise ConfigError(
                f"vlrollout.dynamic_sampling_rounds must be >= 1 (the step's own rollout "
                f"included), got {self.dynamic_sampling_rounds}"
            )
        if self.dynamic_sampling_scale and not self.dynamic_sampling:
            raise ConfigError(
                "vlrollout.dynamic_sampling_scale=true scales the steps of dynamic sampling: set "
                "vlrollout.dynamic_sampling=true too, or leave it false"
            )
        if self.train_groups < 0:
            raise ConfigError(
                f"vlrollout.train_groups must be >= 0 (0: every group), got {self.train_groups}"
            )
        if self.train_groups and self.dynamic_sampling:
            raise ConfigError(
                f"vlrollout.train_groups={self.train_groups} and vlrollout.dynamic_sampling=true "
                "both choose the groups a step trains on: set one of them (dynamic sampling: add "
                "vlrollout.train_groups=0)"
            )
        if self.log_rollouts < 0:
            raise ConfigError(f"vlrollout.log_rollouts must be >= 0, got {self.log_rollouts}")
        if self.eval_every < 0 or self.save_every < 1 or self.eval_samples < 0:
            raise ConfigError(
                f"vlrollout.eval_every and eval_samples must be >= 0 and save_every >= 1, got "
                f"{self.eval_every}, {self.eval_samples} and {self.save_every}"
            )


@dataclass
class TrainConfig(GRPOConfig):
    """AReaL's ``GRPOConfig`` with :class:`TrainSection` under ``vlrollout``."""

    vlrollout: TrainSection = field(default_factory=TrainSection)


def check_rules(cfg: TrainConfig, world_size: int) -> None:
    """Refuse settings that cannot run together, before any process is started.

    Args:
        cfg: The loaded config.
        world_size: The number of training processes (``--nproc``).

    Raises:
        ConfigError: one line naming the keys and the override that fixes them.
    """
    batch_size = cfg.train_dataset.batch_size
    if batch_size % world_size:
        raise ConfigError(
            f"train_dataset.batch_size={batch_size} cannot be shared by {world_size} processes: "
            f"each rolls out an equal share of a step's items; use a multiple of {world_size}"
        )


def load_config(path: str, overrides: list[str] | None = None) -> TrainConfig:
    """Load ``path`` the way AReaL does (``areal.api.cli_args.load_expr_config``).

    This also points AReaL's name_resolve at ``cluster.name_resolve`` (the key the weight
    update waits on) and writes the resolved config under ``cluster.fileroot``.

    Raises:
        ConfigError: a missing file, an unknown key or a bad value, in one
            line naming it (``vlrollout train`` prints it and exits 2).
    """
    from areal.api.cli_args import load_expr_config
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vlrollout.config import check_gconfig
    from vlrollout.train.loggers import problem as stats_logger_problem

    if not Path(path).is_file():
        raise ConfigError(f"config file {path} does not exist; pass --config PATH to a YAML file")
    for entry in overrides or []:  # hydra would answer with a lexer error naming neither
        if entry.startswith("-"):
            raise ConfigError(
                f"unknown flag {entry!r}: vlrollout train takes --config and KEY=VALUE settings "
                "(AReaL's syntax, e.g. seed=1)"
            )
        if "=" not in entry and not entry.startswith("~"):  # ~KEY deletes a key in hydra
            raise ConfigError(f"setting {entry!r} must be KEY=VALUE, e.g. seed=1")
    try:
        cfg, _ = load_expr_config(["--config", path, *(overrides or [])], TrainConfig)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise _explain_override(e, path) from e
    check_gconfig(cfg.gconfig)
    if stats_logger_problem(cfg.stats_logger):
        raise ConfigError(stats_logger_problem(cfg.stats_logger))
    if cfg.gconfig.n_samples < 2:
        raise ConfigError(
            f"gconfig.n_samples is the GRPO group size and must be >= 2, got "
            f"{cfg.gconfig.n_samples}"
        )
    problem = _model_path_problem(cfg.actor.path, Path(path))
    if problem:
        raise ConfigError(problem)
    return cfg


def _model_path_problem(model: str, config: Path) -> str | None:
    """Why a relative ``actor.path`` will not load, when it is no folder under the working
    directory but is one beside the config (the examples name the repository's assets, relative
    to its root). Without this, transformers takes the path for a hub id and ends, after its
    retries, in a network error that names neither the path nor the folder it was looked for in.
    A path found nowhere near the config may be a hub id: ``None``, as for any path that exists."""
    relative = Path(model)
    if relative.is_absolute() or relative.exists():
        return None
    folder = config.resolve().parent
    for base in (folder, folder.parent):
        if (base / relative).is_dir():
            return (
                f"actor.path {model} is not a folder under the working directory {Path.cwd()}; "
                f"it is one under {base}: run from there or pass actor.path={base / relative}"
            )
    return None


def _explain_override(e: Exception, path: str) -> Exception:
    """One line for a failed load. AReaL's loader overrides only keys the YAML sets, and hydra
    says "Could not override 'KEY'" both for a typo and for a real key the file leaves out (with
    a hint to append that is wrong for a typo): tell the two apart with the config's fields."""
    import difflib
    import re

    from vlrollout.config import known_keys

    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "is not a subclass of EngineConfig" in first:
        return ConfigError(
            f"{path}: vlrollout.engine is a section (the same as vlrollout run's engine:): "
            "set vlrollout.engine.kind=local|sglang|vllm and vlrollout.engine.addresses=[...]"
        )
    match = re.match(r"Could not override '([\w.]+)'", first)
    if not match:
        return ConfigError(f"{path}: {first}")
    key = match.group(1)
    parent, _, leaf = key.rpartition(".")
    known = known_keys(TrainConfig, parent)
    if leaf in known:
        return ConfigError(
            f"{path} does not set {key}, and AReaL's loader overrides only keys the file sets: "
            f"pass +{key}=VALUE"
        )
    close = difflib.get_close_matches(leaf, known, n=1)
    hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else ""
    return ConfigError(f"{path}: unknown key {key!r}{hint}")
