"""``vlrollout train``'s config: AReaL's ``GRPOConfig`` plus a ``vlrollout`` section.

Parsed as AReaL's own ``load_expr_config`` parses (YAML + Hydra-style ``key=value`` overrides), so
an AReaL user recognises every key; only data, reward, the engine section (the same
:class:`~vlrollout.engine.config.EngineConfig` as ``vlrollout run``'s ``engine:``) and reporting
live under ``vlrollout:``. Paths and errors follow :mod:`vlrollout.config`.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from areal.api.cli_args import GRPOConfig, parse_cli_args, save_config, to_structured_cfg
from areal.utils import name_resolve
from areal.utils.stats_logger import StatsLogger
from huggingface_hub import HfApi, constants, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vlrollout.box_rewards import box_format_unread
from vlrollout.config import check_gconfig, check_remote_gconfig, check_room_in_context, known_keys
from vlrollout.engine.config import EngineConfig
from vlrollout.engine.sampling import GREEDY_BELOW
from vlrollout.errors import ConfigError
from vlrollout.eval.metrics.boxes import check_box_format
from vlrollout.eval.tasks import TASKS as EVAL_TASKS
from vlrollout.readers import FORMATS
from vlrollout.tiny.rewards import GROUND_METRICS
from vlrollout.train.actor_checks import check_choices, check_minibatches, check_reward_shaping
from vlrollout.train.loggers import problem as stats_logger_problem

if TYPE_CHECKING:
    from vlrollout.workflows import FrameSampling

TASKS = ("ground", "count", "caption", "mix")
"""The values of ``vlrollout.task``."""


def _train_engine() -> EngineConfig:
    return EngineConfig(model="")


@dataclass
class TrainSection:
    """What AReaL's config has no place for: data, reward, the rollout engine, evaluation and
    reporting, and the few training settings AReaL lacks.

    Each key is declared once, with its help text in ``metadata["help"]``;
    ``scripts/render_config_doc.py`` renders them into ``docs/config.md``.
    """

    output: str = field(
        default="runs/train",
        metadata={
            "help": "Folder for checkpoints, `metrics.jsonl`, `eval.jsonl` and `report.html`; a "
            "rerun into the same folder resumes from its latest checkpoint."
        },
    )
    task: str = field(
        default="ground",
        metadata={
            "help": "Synthetic shapes task (`ground`, `count`, `caption` or `mix`) used when "
            "`train_dataset.path` is empty; items come from `vlrollout.tiny.synthetic`."
        },
    )
    train_items: int = field(
        default=512, metadata={"help": "Synthetic items generated for training."}
    )
    eval_items: int = field(
        default=200, metadata={"help": "Synthetic items generated for the held-out evaluation."}
    )
    data_seed: int = field(default=100, metadata={"help": "Seed of the training items."})
    eval_seed: int = field(
        default=200,
        metadata={"help": "Seed of the evaluation items (another seed: they are held out)."},
    )
    reward: str = field(
        default="tiny_task",
        metadata={
            "help": "`tiny_task` (count: exact count; ground: `ground_metric`; caption: "
            "CIDEr-D) or a reward name or import path from `vlrollout.rewards`, resolved as "
            "`vlrollout run` resolves its `reward`."
        },
    )
    ground_metric: str = field(
        default="giou",
        metadata={
            "help": "Box reward of `tiny_task`'s grounding items in training: `iou`, or `giou` "
            "(dense: a miss still ranks by how far it is). Evaluation always reports IoU."
        },
    )
    eval_task: str | None = field(
        default=None,
        metadata={
            "help": "`null`: the held-out score is the mean reward of `vlrollout.reward`. A "
            "task of `vlrollout eval` (`refcoco`, `caption`, `count`, `mc`, `vqa`): the "
            "held-out items are scored by that evaluator (the training engine's greedy "
            "completions, the task's benchmark metrics), `eval.jsonl` records "
            "`eval/<metric>` per metric and `eval/mean` = the task's primary metric, and "
            "`vlrollout eval` on a saved checkpoint reproduces the last evaluation "
            "(docs/training.md)."
        },
    )
    box_format: str | None = field(
        default=None,
        metadata={
            "help": "How the model writes boxes, when not as its family does (a model "
            "fine-tuned on another format: the tiny grounding model writes Qwen2-VL's `qwen2_vl` "
            "boxes): the built-in box rewards (`iou`, `giou`, ...) read them so, and "
            "`eval_task` too unless `eval_box_format` says otherwise; `null`: the family's. As "
            "`vlrollout run --box-format`."
        },
    )
    eval_box_format: str | None = field(
        default=None,
        metadata={
            "help": "With `eval_task`: how the model writes boxes, when not as its family does "
            "(a model fine-tuned on another format: the tiny grounding model writes Qwen2-VL's "
            "`qwen2_vl` boxes); `null`: `box_format`, else the family's. As `vlrollout eval "
            "--box-format`."
        },
    )
    data_format: str | None = field(
        default=None,
        metadata={
            "help": "Format of `train_dataset.path` and `valid_dataset.path` (`jsonl`, "
            "`parquet`, `hf_disk`, `coco_captions`, `coco_instances`, `refcoco`, `llava`); "
            "`null`: detected from each path, as `vlrollout eval --format`."
        },
    )
    data_map: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Column mapping of both data files, `{item field: column}`, e.g. "
            "`{question: problem, answer: solution}` (`vlrollout eval --map "
            "question=problem`)."
        },
    )
    images_root: str | None = field(
        default=None,
        metadata={
            "help": "Folder of the images an annotation file names (COCO `file_name`, RefCOCO "
            "refs, LLaVA `image`; JSONL and parquet paths stay relative to their file); `null`: "
            "looked for beside the annotation file (docs/datasets.md). As `vlrollout eval "
            "--images-root`."
        },
    )
    prompt: str | None = field(
        default=None,
        metadata={
            "help": "Prompt template for data items without `messages`, item fields in braces "
            "(`Where is {expression}?`); `null`: the held-out items of `eval_task` get the "
            "task's own prompt, as `vlrollout eval` does (`--prompt`)."
        },
    )
    eval_every: int = field(
        default=5,
        metadata={
            "help": "Evaluate on the held-out items every this many steps; 0: only at "
            "the start and the end."
        },
    )
    eval_samples: int = field(
        default=0,
        metadata={
            "help": "Besides the greedy evaluation, this many sampled episodes per held-out "
            "item at the training temperature (`eval_sampled/*`: the policy's expected "
            "reward); 0 skips it."
        },
    )
    save_every: int = field(
        default=10, metadata={"help": "Checkpoint every this many steps (and at the end)."}
    )
    keep_checkpoints: int = field(
        default=2,
        metadata={
            "help": "The newest this many `checkpoints/step_N` folders are kept, older ones "
            "deleted as each new one is saved; 0 keeps every one."
        },
    )
    log_rollouts: int = field(
        default=4,
        metadata={
            "help": "Held-out rollouts shown per evaluation (the first held-out items, greedy): "
            "image with true and predicted boxes, completion and reward, in the report, "
            "`eval_rollouts.jsonl` and the `stats_logger` trackers; 0 shows none."
        },
    )
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    engine: EngineConfig = field(
        default_factory=_train_engine,
        metadata={
            "help": "Where rollouts run: the same section as `vlrollout run`'s `engine:` "
            "(below); `engine.model` stays empty, the engine rolls out the actor's weights."
        },
    )
    freeze_vision_tower: bool = field(
        default=False,
        metadata={
            "help": "Do not train the vision encoder (its projector excepted): its parameters "
            "get `requires_grad=False` before the optimizer is built."
        },
    )
    freeze_projector: bool = field(
        default=False,
        metadata={
            "help": "Do not train the projector (Qwen-VL's `merger`, LLaVA's "
            "`multi_modal_projector`, Idefics3's `connector`)."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Train only on groups whose rewards differ and top the step up with further "
            "training items (DAPO's dynamic sampling): an all-equal group has zero advantage "
            "and only dilutes the loss. On-policy (`rollout.max_head_offpolicyness=0`) and one "
            "process only."
        },
    )
    dynamic_sampling_rounds: int = field(
        default=3,
        metadata={
            "help": "With `dynamic_sampling`: rollouts per step at most, the first included; a "
            "step trains on fewer groups when they run out."
        },
    )
    dynamic_sampling_scale: bool = field(
        default=False,
        metadata={
            "help": "With `dynamic_sampling`: a step that kept `k` of its `batch_size` groups "
            "scales their advantages by `k / batch_size`, so a short batch makes a small update "
            "instead of a full-size one. Without `dynamic_sampling` it has no effect (a warning "
            "says so), so turning dynamic sampling off is one override."
        },
    )
    encode_images_once: bool = field(
        default=True,
        metadata={
            "help": "The trainer's micro-batches hold whole groups and each forward encodes a "
            "distinct image once: the same forward and gradients with a group's image encoded "
            "once instead of n times. `false` keeps AReaL's packing by length and encodes "
            "every copy."
        },
    )

    video_fps: float | None = field(
        default=None,
        metadata={
            "help": "Frames sampled per second of each video item's clip; `null`: the model "
            "family's default (its transformers video processor's)."
        },
    )
    video_max_frames: int | None = field(
        default=None,
        metadata={"help": "Most frames sampled from one video; `null`: the family's default."},
    )
    min_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Smallest pixel budget of each image (Qwen-VL, GLM-4V, LFM2-VL: the "
            "processor resizes to it); `null`: the model's processor settings. Rollout servers "
            "must resize with the same (vlrollout serve --min-pixels)."
        },
    )
    max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Largest pixel budget of each image (as min_pixels): fewer image tokens per "
            "prompt; `null`: the model's processor settings."
        },
    )
    video_min_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Smallest pixel budget of a sampled video frame (Qwen2-VL, Qwen2.5-VL), or "
            "of the whole sampled clip (Qwen3-VL); `null`: the family's default."
        },
    )
    video_max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Largest pixel budget of a sampled video frame (Qwen2-VL, Qwen2.5-VL), or "
            "of the whole sampled clip (Qwen3-VL); `null`: the family's default."
        },
    )

    def frame_sampling(self) -> FrameSampling:
        """The ``video_*`` settings as the workflows take them."""
        from vlrollout.workflows import FrameSampling

        return FrameSampling(
            self.video_fps, self.video_max_frames, self.video_min_pixels, self.video_max_pixels
        )

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):
            self.engine = EngineConfig(**{"model": "", **self.engine})
        if self.engine.model:
            raise ConfigError(
                f"vlrollout.engine.model={self.engine.model!r}: training rolls out the actor's "
                "weights; set actor.path instead and leave vlrollout.engine.model empty"
            )
        if self.task not in TASKS:
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
        pixels = ("min_pixels", "max_pixels")
        for name in (
            *pixels,
            "video_fps",
            "video_max_frames",
            "video_min_pixels",
            "video_max_pixels",
        ):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):  # NaN too
                raise ConfigError(f"vlrollout.{name} must be a positive number, got {value}")
        if self.eval_task is not None and self.eval_task not in EVAL_TASKS:
            raise ConfigError(
                f"vlrollout.eval_task must be null or one of {', '.join(EVAL_TASKS)} (the tasks "
                f"of vlrollout eval), got {self.eval_task!r}"
            )
        if self.box_format is not None and (unread := box_format_unread(self.reward)):
            raise ConfigError(f"vlrollout.box_format {unread}")
        for key in ("box_format", "eval_box_format"):
            if getattr(self, key) is not None:
                try:
                    check_box_format(getattr(self, key))
                except ValueError as e:
                    raise ConfigError(f"vlrollout.{key}: {e}") from None
        if self.data_format is not None and self.data_format not in FORMATS:
            raise ConfigError(
                f"vlrollout.data_format must be null (detected from the path) or one of "
                f"{', '.join(FORMATS)}, got {self.data_format!r}"
            )
        if self.log_rollouts < 0:
            raise ConfigError(f"vlrollout.log_rollouts must be >= 0, got {self.log_rollouts}")
        if self.keep_checkpoints < 0:
            raise ConfigError(
                f"vlrollout.keep_checkpoints must be >= 0 (0: every one), got "
                f"{self.keep_checkpoints}"
            )
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

    ``vlrollout train`` calls this before ``torchrun`` starts the training processes, so a bad
    combination is one line and exit status 2 rather than one error per process; the trainer
    calls it again, for a run started some other way. Each rule depends only on ``cfg`` and
    ``world_size``; the error names the single override that makes the run possible.

    Args:
        cfg: The loaded config.
        world_size: The number of training processes (``--nproc``, or torchrun's).

    Raises:
        ConfigError: in one line naming the keys and the override that fixes them.
    """
    check_run_length(cfg)
    check_areal_loops_unset(cfg)
    check_actor_extras(cfg)
    check_choices(cfg.actor, "actor")
    check_reward_shaping(cfg.actor)
    check_minibatches(cfg, world_size)
    batch_size = cfg.train_dataset.batch_size
    if batch_size % world_size:
        raise ConfigError(
            f"train_dataset.batch_size={batch_size} cannot be shared by {world_size} processes: "
            f"each rolls out an equal share of a step's items; use a multiple of {world_size}"
        )
    offpolicy = cfg.rollout.max_head_offpolicyness
    if offpolicy < 0:
        raise ConfigError(
            f"rollout.max_head_offpolicyness must be >= 0 (0: on-policy), got {offpolicy}"
        )
    if cfg.vlrollout.dynamic_sampling and offpolicy > 0:
        # Asynchronous steps take groups as they finish (vlrollout.train.asynchronous); topping
        # a step up with further items for groups without reward spread is built only on-policy.
        raise ConfigError(
            f"vlrollout.dynamic_sampling=true needs on-policy rollouts, got "
            f"rollout.max_head_offpolicyness={offpolicy}: add vlrollout.dynamic_sampling=false "
            "to roll out asynchronously"
        )
    if cfg.vlrollout.dynamic_sampling and world_size > 1:
        # Each top-up round is a collective rollout, so every rank would need equal rounds.
        raise ConfigError(
            f"vlrollout.dynamic_sampling=true runs in one process, got {world_size} "
            f"(--nproc {world_size}): add vlrollout.dynamic_sampling=false to train with "
            "several processes"
        )
    if cfg.rollout.consumer_batch_size < batch_size:
        # AReaL's staleness manager admits consumer_batch_size items per weight
        # version: a step of more items could never fill.
        raise ConfigError(
            f"rollout.consumer_batch_size={cfg.rollout.consumer_batch_size} is below "
            f"train_dataset.batch_size ({batch_size}): AReaL would admit too few of a step's "
            f"items for the step to fill; set rollout.consumer_batch_size={batch_size}"
        )
    if cfg.actor.ppo_n_minibatches < 1:
        raise ConfigError(
            f"actor.ppo_n_minibatches must be >= 1, got {cfg.actor.ppo_n_minibatches}"
        )
    if offpolicy > 0 and cfg.rollout.consumer_batch_size != batch_size:
        # AReaL's staleness manager counts weight versions in batches of consumer_batch_size.
        raise ConfigError(
            f"rollout.max_head_offpolicyness={offpolicy} needs rollout.consumer_batch_size "
            f"equal to train_dataset.batch_size ({batch_size}), got "
            f"{cfg.rollout.consumer_batch_size}: set rollout.consumer_batch_size={batch_size}"
        )


AREAL_LOOPS = {
    "saver": "use vlrollout.save_every and vlrollout.keep_checkpoints",
    "evaluator": "use vlrollout.eval_every",
    "recover": "rerun the same command to resume from the last checkpoint",
}
"""The sections of AReaL's own saving, evaluation and recovery loops, which ``vlrollout train``
does not run, and what does their job instead."""


def check_areal_loops_unset(cfg: TrainConfig) -> None:
    """Refuse a cadence or mode set for AReaL's saver, evaluator or recovery: ``vlrollout
    train`` writes its own checkpoints, evaluates and resumes, so the setting would change
    nothing."""
    for section, instead in AREAL_LOOPS.items():
        values = getattr(cfg, section)
        for key in ("freq_epochs", "freq_steps", "freq_secs"):
            if getattr(values, key) is not None:
                raise ConfigError(
                    f"{section}.{key}={getattr(values, key)} is for AReaL's own {section}, "
                    f"which vlrollout train does not run: {instead}"
                )
    if cfg.recover.mode != "disabled":
        raise ConfigError(
            f"recover.mode={cfg.recover.mode} is for AReaL's own recovery, which vlrollout "
            f"train does not run: {AREAL_LOOPS['recover']}"
        )


def check_actor_extras(cfg: TrainConfig) -> None:
    """Refuse a KL penalty, which needs a reference model ``vlrollout train`` does not build
    (AReaL's actor would take the reference's log-probs as 0 and reward unlikely tokens), a
    LoRA rank peft would refuse only after the model has loaded, and clipping that would train
    the wrong way (:func:`check_clipping`)."""
    check_clipping(cfg)
    if cfg.actor.kl_ctl != 0:
        raise ConfigError(
            f"actor.kl_ctl={cfg.actor.kl_ctl} needs a reference model, which vlrollout train "
            "does not build (AReaL's actor would take its log-probs as 0, a bonus for unlikely "
            "tokens): set actor.kl_ctl=0"
        )
    if cfg.actor.use_lora and cfg.actor.lora_rank < 1:
        raise ConfigError(
            f"actor.lora_rank must be >= 1 with actor.use_lora, got {cfg.actor.lora_rank}"
        )


def check_clipping(cfg: TrainConfig) -> None:
    """Refuse a negative gradient clip (``clip_grad_norm_`` would scale every gradient by a
    negative number: each update climbs the loss), PPO clip ranges that are empty or inverted
    (``eps_clip``, ``eps_clip_higher`` <= 0 clip on-policy tokens) and a dual clip ``c_clip``
    of at most 1 (AReaL asserts it is above 1, after the model has loaded)."""
    a = cfg.actor
    clip = a.optimizer.gradient_clipping if a.optimizer is not None else 1.0
    if not clip > 0:
        raise ConfigError(f"actor.optimizer.gradient_clipping must be > 0, got {clip}")
    for name in ("eps_clip", "eps_clip_higher"):
        value = getattr(a, name, None)
        if value is not None and not value > 0:
            raise ConfigError(f"actor.{name} must be > 0 (the PPO clip range), got {value}")
    c_clip = getattr(a, "c_clip", None)
    if c_clip is not None and not c_clip > 1:
        raise ConfigError(
            f"actor.c_clip must be > 1 (the dual-clip bound on negative advantages), got {c_clip}"
        )


def check_run_length(cfg: TrainConfig) -> None:
    """Refuse a batch, a length or a learning rate the trainer cannot run as given: ``0``
    steps would read as unset (the epochs decide), and a batch of 0 or a NaN rate fail only
    once the actor is built."""
    if cfg.train_dataset.batch_size < 1:
        raise ConfigError(
            f"train_dataset.batch_size must be >= 1, got {cfg.train_dataset.batch_size}"
        )
    steps = cfg.total_train_steps
    if steps is not None and steps < 1:
        raise ConfigError(
            f"total_train_steps must be >= 1 (or null: total_train_epochs decides), got {steps}"
        )
    lr = cfg.actor.optimizer.lr if cfg.actor.optimizer is not None else 0.0
    if not 0 <= lr < math.inf:
        raise ConfigError(
            f"actor.optimizer.lr must be a finite number >= 0 (0: the control run), got {lr}"
        )
    check_unread_dataset_keys(cfg)
    check_grpo_sampling(cfg)


def check_grpo_sampling(cfg: TrainConfig) -> None:
    """Refuse sampling that leaves GRPO nothing to compare, or logprobs of another distribution
    than the one sampled: a greedy or zero temperature (every episode of a group alike, every
    advantage 0), ``actor.temperature`` other than ``gconfig.temperature`` (the trainer's
    logprobs and the importance weights would be of another policy before any update; AReaL's
    configs set them equal), and a normaliser whose group is not ``gconfig.n_samples`` (the
    episodes of one item are its group)."""
    g = cfg.gconfig
    if not 0 < g.temperature < math.inf:  # the actor divides the logits by it (NaN fails too)
        raise ConfigError(
            "gconfig.temperature must be a finite number > 0 (GRPO samples its groups), got "
            f"{g.temperature:g}"
        )
    if g.temperature < GREEDY_BELOW:
        raise ConfigError(
            f"gconfig.temperature must be at least {GREEDY_BELOW:g}, got {g.temperature:g}: "
            "below it sampling is greedy (as on SGLang and vLLM) and GRPO samples its groups"
        )
    if g.top_k == 1:
        raise ConfigError(
            "gconfig.top_k=1 samples every episode of a group alike (greedy), so every "
            "advantage is 0 (GRPO samples its groups): leave gconfig.top_k unset"
        )
    if g.greedy:
        raise ConfigError(
            "gconfig.greedy=true samples every episode of a group alike, so every advantage "
            "is 0 (GRPO samples its groups): set gconfig.greedy=false"
        )
    if cfg.actor.temperature != g.temperature:
        raise ConfigError(
            f"actor.temperature={cfg.actor.temperature:g} differs from gconfig.temperature="
            f"{g.temperature:g}: the trainer's logprobs would be of another distribution than "
            "the one sampled; set actor.temperature=${gconfig.temperature}"
        )
    for name in ("reward_norm", "adv_norm"):
        norm = getattr(cfg.actor, name, None)
        grouped = norm is not None and "group" in (norm.mean_level, norm.std_level)
        if grouped and norm.group_size != g.n_samples:
            raise ConfigError(
                f"actor.{name}.group_size={norm.group_size} differs from gconfig.n_samples="
                f"{g.n_samples}: a group is the n_samples episodes of one item; set "
                f"actor.{name}.group_size=${{gconfig.n_samples}}"
            )


def check_unread_dataset_keys(cfg: TrainConfig) -> None:
    """Refuse AReaL's data keys that ``vlrollout train`` does not read when a config sets them
    away from what it does anyway: every epoch is a seeded shuffle of the training items in
    whole batches (:func:`vlrollout.train.data.batch_items`), and no item is filtered by length."""
    data = cfg.train_dataset
    unread = []
    if not data.shuffle:
        unread.append("train_dataset.shuffle=false")
    if not data.drop_last:
        unread.append("train_dataset.drop_last=false")
    for section in ("train_dataset", "valid_dataset"):
        length = getattr(getattr(cfg, section, None), "max_length", None)
        if length is not None:
            unread.append(f"{section}.max_length={length}")
    if unread:
        raise ConfigError(
            f"{', '.join(unread)} is not read by vlrollout train: each epoch is a seeded shuffle "
            "of the training items in whole batches, and no item is filtered by length; remove "
            "the key"
        )


def rule_warnings(cfg: TrainConfig) -> list[str]:
    """Lines to log once at the start of a run for settings that run but do less than they say.

    ``vlrollout.dynamic_sampling_scale`` scales the steps of dynamic sampling; it is not refused
    without ``vlrollout.dynamic_sampling``, so a recipe that sets both (the counting recipe) is
    made asynchronous or multi-process by the one override ``vlrollout.dynamic_sampling=false``.
    """
    vl = cfg.vlrollout
    if vl.dynamic_sampling_scale and not vl.dynamic_sampling:
        return [
            "vlrollout.dynamic_sampling_scale=true has no effect with "
            "vlrollout.dynamic_sampling=false: every step trains its whole batch"
        ]
    return []


def load_config(path: str, overrides: list[str] | None = None) -> TrainConfig:
    """Parse ``path`` the way AReaL's ``load_expr_config`` does, and check its settings.

    Nothing is written: :func:`start_areal_files` does the rest of ``load_expr_config`` once
    the run's checks have passed, so a refused run leaves no files behind.

    Raises:
        ConfigError: a missing file, an unknown key or a bad value, in one
            line naming it (``vlrollout train`` prints it and exits 2).
    """
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
        parsed, _ = parse_cli_args(["--config", path, *(overrides or [])])
        cfg = OmegaConf.to_object(to_structured_cfg(parsed, config_cls=TrainConfig))
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise _explain_override(e, path, overrides or []) from e
    check_gconfig(cfg.gconfig)
    check_remote_gconfig(cfg.gconfig, cfg.vlrollout.engine.kind)
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
    check_room_in_context(cfg.gconfig.max_new_tokens, cfg.actor.path)
    check_vision_settings(cfg.vlrollout, cfg.actor.path)
    return cfg


def start_areal_files(cfg: TrainConfig, main: bool) -> None:
    """The rest of AReaL's ``load_expr_config``, for a run that passed its checks: AReaL's
    name_resolve pointed at ``cluster.name_resolve`` (the key the weight update waits on) and,
    on the main process, the resolved config written where AReaL writes it (under
    ``cluster.fileroot``).

    Raises:
        ConfigError: a folder that cannot be created, naming it.
    """
    try:
        name_resolve.reconfigure(cfg.cluster.name_resolve)
        if main:
            save_config(cfg, StatsLogger.get_log_path(cfg.stats_logger))
    except OSError as e:
        raise ConfigError(
            f"cannot create {e.filename}: {e.strerror} (the run's files go under "
            "vlrollout.output and cluster.fileroot, which must be folders you can write to)"
        ) from None


def check_served_budget(cfg: TrainConfig) -> None:
    """Refuse to start rollouts on servers that resize images to another size than the run
    (``vlrollout serve`` says its size in ``/health``; other servers are not compared)."""
    from vlrollout.engine.served_settings import check_served_image_size
    from vlrollout.workflows.preparation import build_vision_preprocessor

    vl = cfg.vlrollout
    if vl.engine.kind == "local" or not Path(cfg.actor.path, "config.json").is_file():
        return
    _, pre = build_vision_preprocessor(
        cfg.actor.path,
        None,
        min_pixels=vl.min_pixels,
        max_pixels=vl.max_pixels,
        frames=vl.frame_sampling(),
    )
    check_served_image_size(vl.engine.addresses, pre)


def check_vision_settings(vl: TrainSection, model: str) -> None:
    """The image budget and the video settings, checked against the model's processor before
    any process starts (a fixed-size family takes no pixel budget; a family without video takes
    no video settings)."""
    from vlrollout.workflows.preparation import vision_settings_problem

    frames = vl.frame_sampling()
    if vl.min_pixels is None and vl.max_pixels is None and not frames.options():
        return
    if not Path(model, "config.json").is_file():
        return  # not a local folder: transformers says so when the run loads it
    keys = "vlrollout.min_pixels/max_pixels"
    problem = vision_settings_problem(model, None, vl.min_pixels, vl.max_pixels, frames, keys)
    if problem:
        raise ConfigError(problem)


def _model_path_problem(model: str, config: Path) -> str | None:
    """Why a relative ``actor.path`` will not load, when it is no folder under the working
    directory but is one beside the config (the examples name the repository's assets, relative
    to its root). Without this, transformers takes the path for a hub id and ends, after its
    retries, in a network error that names neither the path nor the folder it was looked for in.
    A path found nowhere near the config may be a hub id, which :func:`_hub_problem` checks;
    an absolute path or one starting with ``./`` or ``../`` that does not exist is a problem."""
    relative = Path(model)
    if relative.exists():
        return None
    if relative.is_absolute() or model.startswith(("./", "../")):  # a path, never a hub id
        return f"actor.path {model} does not exist; pass the folder of a saved model"
    folder = config.resolve().parent
    for base in (folder, folder.parent):
        if (base / relative).is_dir():
            return (
                f"actor.path {model} is not a folder under the working directory {Path.cwd()}; "
                f"it is one under {base}: run from there or pass actor.path={base / relative}"
            )
    return _hub_problem(model)


def _hub_problem(model: str) -> str | None:
    """Why ``model``, no folder here, will not load as a hub id: the hub's cache lacks it and
    the hub is offline, unreachable, or has no model of that name. One question to the hub
    instead of transformers' retries, which end in an error naming neither the value nor the
    folder it was looked for in. ``None`` when it may load (cached, found, or the hub answered
    something else, such as a gated model, which the load reports)."""
    here = f"actor.path {model} is no folder under {Path.cwd()}"
    try:
        if try_to_load_from_cache(model, "config.json") is not None:
            return None
    except HFValidationError:
        return f"{here}, nor a hub id; pass the folder of a saved model"
    if constants.HF_HUB_OFFLINE:
        return f"{here} and not in the hub's cache, with HF_HUB_OFFLINE set; pass a saved model"
    try:
        if HfApi().file_exists(model, "config.json"):
            return None
    except HfHubHTTPError:  # the hub answered (gated, auth): the load reports it
        return None
    except (httpx.HTTPError, OSError) as e:
        return f"{here}, and cannot reach the Hugging Face hub to fetch it ({e}); pass a folder"
    return f"{here}, and the hub has no model of that name; pass the folder of a saved model"


HELD_OUT_KEYS = ("vlrollout.eval_path", "vlrollout.valid_path", "vlrollout.eval_data")
"""Keys a user may try for the held-out file, which is AReaL's own ``valid_dataset.path``."""


def held_out_hint(key: str) -> str:
    """How to set the held-out file when ``key`` could not be set: a guessed name of ours, or
    ``valid_dataset.path`` in a config without a ``valid_dataset`` section (hydra cannot set a
    key under a section the file leaves out, and AReaL's section needs its ``type``).

    >>> print(held_out_hint("vlrollout.eval_path").split(":")[0])
    the held-out file is AReaL's valid_dataset.path, not vlrollout.eval_path
    """
    fix = "pass +valid_dataset.type=rl +valid_dataset.path=FILE"
    if key == "valid_dataset.path":
        return f"the config has no valid_dataset section to set {key} in: {fix}"
    return (
        f"the held-out file is AReaL's valid_dataset.path, not {key}: {fix} (or "
        "valid_dataset.path=FILE when the config has a valid_dataset section)"
    )


def _origin(key: str, path: str, overrides: list[str]) -> str:
    """Where ``key`` was set: ``setting KEY=VALUE`` for a command-line override, else the file."""
    for entry in overrides:
        name, _, value = entry.lstrip("+~").partition("=")
        if name == key:
            return f"setting {name}={value}"
    return path


def _explain_override(e: Exception, path: str, overrides: list[str]) -> Exception:
    """One line for a failed load, naming the command-line setting or the file at fault.
    AReaL's loader overrides only keys the YAML sets, and hydra says "Could not override 'KEY'"
    both for a typo and for a real key the file leaves out (with a hint to append that is wrong
    for a typo): tell the two apart with the config's fields."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "is not a subclass of EngineConfig" in first:
        return ConfigError(
            f"{path}: vlrollout.engine is a section (the same as vlrollout run's engine:): "
            "set vlrollout.engine.kind=local|sglang|vllm and vlrollout.engine.addresses=[...]"
        )
    full_key = getattr(e, "full_key", None)
    if isinstance(e, OmegaConfBaseException) and full_key:  # a value of the wrong type
        return ConfigError(f"{_origin(full_key, path, overrides)}: {full_key}: {first}")
    group = re.match(r"group_size must be a positive integer.*, got (\S+)", first)
    if group:  # AReaL's NormConfig, whose group_size the recipes take from gconfig.n_samples
        return ConfigError(
            "actor.reward_norm.group_size (gconfig.n_samples in the recipes: the GRPO group "
            f"size) must be >= 2, got {group.group(1)}"
        )
    match = re.match(r"Could not override '([\w.]+)'", first)
    if not match:
        return ConfigError(f"{path}: {first}")
    key = match.group(1)
    origin = _origin(key, path, overrides)
    if key in HELD_OUT_KEYS or key == "valid_dataset.path":
        return ConfigError(f"{origin}: {held_out_hint(key)}")
    parent, _, leaf = key.rpartition(".")
    if parent in AREAL_LOOPS:
        return ConfigError(
            f"{origin}: {key} is for AReaL's own {parent}, which vlrollout train does not "
            f"run: {AREAL_LOOPS[parent]}"
        )
    known = known_keys(TrainConfig, parent)
    if leaf in known:
        return ConfigError(
            f"{path} does not set {key}, and AReaL's loader overrides only keys the file sets: "
            f"pass +{key}=VALUE"
        )
    close = difflib.get_close_matches(leaf, known, n=1)
    hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else ""
    return ConfigError(f"{origin}: unknown key {key!r}{hint}")
