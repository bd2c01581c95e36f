"""Wiring ``vlrollout run``: config → checks → engine, reward, workflow → Runner → report.

Everything that can be checked without the model is checked first (:func:`prepare`), so a typo
costs no model loading. SIGINT/SIGTERM stop the run cleanly (:func:`run_items`): items in flight are
dropped, finished ones stay, and :class:`~vlrollout.errors.Interrupted` says how many.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal.api import RolloutWorkflow

from vlrollout.config import check_room_in_context, model_context
from vlrollout.datasets import LOAD_ERROR, load_items
from vlrollout.engine.checks import check_engine
from vlrollout.engine.served_settings import check_served_image_size
from vlrollout.errors import ConfigError, Interrupted, SignalExit
from vlrollout.families import context_length
from vlrollout.logs import get_logger
from vlrollout.rewards.caller import RewardCaller
from vlrollout.rewards.combine import ByTask, WeightedSum
from vlrollout.rewards.task_hints import task_reward_hint
from vlrollout.run.config import VISION_WORKFLOWS, WORKFLOWS, RunConfig
from vlrollout.run.items import BLOCKING, UNKNOWN_TASK, item_problems
from vlrollout.run.output import prepare_output
from vlrollout.stopping import until_signalled
from vlrollout.workflows.steps import resolve_callable

logger = get_logger("vlrollout.run")


def load_reward(
    name: str, items: list[dict[str, Any]], model: str | None = None, box_format: str | None = None
) -> Any:
    """A reward by registry name or import path, built from ``items`` when it is a dataset reward
    (``tiny_task``, for the synthetic sample tasks); a built-in box reward reads boxes as
    ``model``'s family writes them, or as ``box_format`` names
    (:func:`vlrollout.box_rewards.box_reward_options`).

    Raises:
        ConfigError: the name is unknown, the import path does not resolve, or a box reward's
            model family cannot be read.
    """
    from vlrollout.box_rewards import box_reward_options
    from vlrollout.rewards.registry import get_reward

    try:
        return get_reward(name, items=items, **box_reward_options(name, model, box_format))
    except (ImportError, AttributeError, ValueError, TypeError, LookupError) as e:
        raise ConfigError(f"--reward {name!r}: {str(e).splitlines()[0]}") from None


def check_reward_callable(reward: Any, name: str) -> None:
    """Build the reward's caller now (it refuses a coroutine and a reward that cannot be
    pickled into the reward pool), not after the model has loaded.

    Raises:
        ConfigError: naming the reward and why.
    """
    try:
        RewardCaller(reward)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--reward {name!r}: {str(e).splitlines()[0]}") from None


def check_reward_tasks(reward: Any, items: list[dict[str, Any]], name: str) -> None:
    """Stop before the model loads when ``reward`` routes by task (:class:`ByTask`, such as the
    default ``tiny_task``) and not one readable item has a task it scores: every episode would be
    a ``reward_error``. When some items have one, the others are rejected one by one, each with
    the same fix (:func:`~vlrollout.rewards.task_hints.task_reward_hint`).

    Raises:
        ConfigError: naming the reward, its tasks, the items' tasks and the reward to pass.
    """
    if not isinstance(reward, ByTask):
        return
    tasks = Counter(_task_name(item.get(reward.key)) for item in items if LOAD_ERROR not in item)
    if not tasks or any(reward.scores(task) for task in tasks):
        return
    counted = ", ".join(
        f"{'no ' + reward.key if task is None else task}: {n} item(s)"
        for task, n in tasks.most_common()
    )
    raise ConfigError(
        f"--reward {name!r} scores {reward.key} {', '.join(sorted(reward.rewards))} and not one "
        f"item has one of those ({counted}); {task_reward_hint(tasks.most_common(1)[0][0])}"
    )


def block_unscored_tasks(reward: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items``, each one whose task ``reward`` routes by (:class:`ByTask`) and does not score
    blocked under ``unknown_task`` with the reward's message: its group is not rolled out only
    for the reward to refuse every episode. The item keeps its fields, for the report. An item
    the run rejects for its own content first (a media field nothing reads, a reserved field) is
    left to be rejected for that: fixing the task alone would not make it run."""
    if not isinstance(reward, ByTask):
        return items
    return [
        item
        if LOAD_ERROR in item
        or reward.scores(item.get(reward.key))
        or any(reason in BLOCKING for reason, _ in item_problems(item))
        else {
            **item,
            LOAD_ERROR: {
                "reason": UNKNOWN_TASK,
                "detail": reward.no_reward_for(item.get(reward.key)),
            },
        }
        for item in items
    ]


def _task_name(task: Any) -> str | None:
    return task if task is None or isinstance(task, str) else repr(task)


def build_workflow(
    cfg: RunConfig, tokenizer: Any, processor: Any, reward: Any, context: int | None = None
) -> RolloutWorkflow:
    """The workflow named by ``cfg.workflow`` (a built-in name or an import path). The
    multi-turn workflows end an episode at ``context`` tokens (the model's context length, when
    known), where the engine would refuse the next request."""
    from vlrollout import workflows

    gconfig = dataclasses.replace(cfg.gconfig)
    common = {"reward_timeout_s": cfg.reward_timeout_s}
    vision = {
        "processor": processor,
        "preprocessor": cfg.preprocessor,
        "min_pixels": cfg.min_pixels,
        "max_pixels": cfg.max_pixels,
        "frames": workflows.FrameSampling(
            cfg.video_fps, cfg.video_max_frames, cfg.video_min_pixels, cfg.video_max_pixels
        ),
    }
    limit = {"max_prompt_tokens": cfg.max_prompt_tokens}
    multi = {
        "max_turns": cfg.max_turns,
        "turn_discount": cfg.turn_discount,
        "max_total_tokens": context,
    }
    if cfg.workflow == "text":
        return workflows.RLVRWorkflow(reward, gconfig, tokenizer, **common, **limit)
    if cfg.workflow == "vision":
        return workflows.VisionRLVRWorkflow(reward, gconfig, tokenizer, **vision, **common, **limit)
    if cfg.workflow == "multi_attempt":
        return workflows.MultiAttemptWorkflow(
            reward, gconfig, tokenizer, **multi, **common, **limit
        )
    if cfg.workflow == "vision_multi_attempt":
        return workflows.VisionMultiAttemptWorkflow(
            reward, gconfig, tokenizer, **vision, **multi, **common, **limit
        )
    if cfg.workflow == "vision_tool":
        total = context
        if total is None and cfg.max_prompt_tokens is not None:
            total = cfg.max_prompt_tokens + cfg.gconfig.max_new_tokens * cfg.max_turns
        return workflows.VisionToolWorkflow(
            reward,
            gconfig,
            tokenizer,
            tools=cfg.tools,
            max_turns=cfg.max_turns,
            max_total_tokens=total,
            **vision,
            **common,
        )
    cls = resolve_callable(cfg.workflow, "workflow")
    vision_settings = {k: v for k, v in vision.items() if k != "processor"}
    settings = {**common, **limit, **multi, **vision_settings, "tools": cfg.tools}
    taken = {k: v for k, v in settings.items() if _takes(cls, k)}
    return cls(reward_fn=reward, gconfig=gconfig, tokenizer=tokenizer, processor=processor, **taken)


CLASS_SETTINGS: dict[str, tuple[str, ...]] = {
    "reward_timeout_s": ("reward_timeout_s",),
    "max_prompt_tokens": ("max_prompt_tokens",),
    "preprocessor": ("preprocessor",),
    "min_pixels": ("min_pixels",),
    "max_pixels": ("max_pixels",),
    "frames": ("video_fps", "video_max_frames", "video_min_pixels", "video_max_pixels"),
    "max_turns": ("max_turns",),
    "turn_discount": ("turn_discount",),
    "tools": ("tools",),
}
"""The run settings a workflow class named by import path gets, by the keyword its constructor
takes them under (the built-in workflows' names), and the config keys that set each."""

FLAGS = {"reward_timeout_s": "--reward-timeout"}
"""Config keys whose flag is not the key's own name."""


def _takes(cls: Any, keyword: str) -> bool:
    """Whether ``cls(...)`` takes ``keyword`` by name: its ``__init__`` names it, or passes its
    ``**kwargs`` on to a base whose ``__init__`` does (followed down the class hierarchy as far
    as each ``__init__`` forwards ``**kwargs``; a bare ``**kwargs`` proves nothing)."""
    for klass in getattr(cls, "__mro__", (cls,)):
        init = vars(klass).get("__init__")
        if init is None:
            continue
        if init is object.__init__:
            return False
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return False
        if keyword in params:
            return True
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return False
    return False


GIVEN = ("reward_fn", "gconfig", "tokenizer", "processor")
"""The arguments ``vlrollout run`` builds a workflow class with (by name), besides settings."""


def check_workflow_class(cfg: RunConfig, cls: Any) -> None:
    """Refuse a workflow class named by import path that is no AReaL ``RolloutWorkflow``, that
    needs an argument the run does not give, or that does not take by name a run setting the
    user set (:data:`CLASS_SETTINGS`, :func:`_takes`: the setting would be recorded as shaping
    the results and not applied).

    Raises:
        ConfigError: naming the class and what it lacks or needs.
    """
    if not (isinstance(cls, type) and issubclass(cls, RolloutWorkflow)):
        raise ConfigError(
            f"--workflow {cfg.workflow!r} is not a RolloutWorkflow subclass (areal.api); name "
            "a workflow class, or one of " + ", ".join(WORKFLOWS)
        )
    required = [
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and name not in GIVEN
        and name not in CLASS_SETTINGS
    ]
    if required:
        raise ConfigError(
            f"--workflow {cfg.workflow!r} needs {', '.join(required)}, which vlrollout run does "
            f"not give (it builds workflows with {', '.join(GIVEN)} and the run's settings); "
            "give them defaults in a subclass"
        )
    defaults = RunConfig()
    dropped = [
        key
        for keyword, keys in CLASS_SETTINGS.items()
        if not _takes(cls, keyword)
        for key in keys
        if getattr(cfg, key) != getattr(defaults, key)
    ]
    if dropped:
        named = ", ".join(
            f"{k} ({FLAGS.get(k, '--' + k.replace('_', '-'))})" if not k.startswith("video_") else k
            for k in dropped
        )
        raise ConfigError(
            f"--workflow {cfg.workflow!r} takes no {named}: its constructor names no such "
            "argument, so the setting would not apply; drop it or add the argument"
        )


def check_workflow(cfg: RunConfig) -> None:
    """Resolve import paths and tool names now, not after the model has loaded."""
    if cfg.workflow not in WORKFLOWS:
        try:
            cls = resolve_callable(cfg.workflow, "workflow")
        except Exception as e:  # noqa: BLE001 - reported as the config error it is
            raise ConfigError(f"--workflow {cfg.workflow!r}: {str(e).splitlines()[0]}") from None
        check_workflow_class(cfg, cls)
    if cfg.workflow == "vision_tool":
        from vlrollout.tools import resolve_tools

        try:
            resolve_tools(cfg.tools)
        except Exception as e:  # noqa: BLE001
            raise ConfigError(f"tools {cfg.tools}: {str(e).splitlines()[0]}") from None
    check_preprocessor_settings(cfg)


def check_preprocessor_settings(cfg: RunConfig) -> None:
    """Build the workflow's preprocessor on the model's processor alone (no model) when the run
    names one or sets its pixel or frame budgets: an unknown name, an import path that does not
    resolve, a plug-in that breaks the contract or a budget the processor refuses (below its own
    minimum) is a usage error before the model loads."""
    from vlrollout.processors.errors import PreprocessorContractError
    from vlrollout.workflows import FrameSampling
    from vlrollout.workflows.preparation import vision_settings_problem

    video = (cfg.video_fps, cfg.video_max_frames, cfg.video_min_pixels, cfg.video_max_pixels)
    settings = (cfg.preprocessor, cfg.min_pixels, cfg.max_pixels, *video)
    if cfg.workflow not in VISION_WORKFLOWS or all(s is None for s in settings):
        return
    try:
        problem = vision_settings_problem(
            cfg.engine.model,
            cfg.preprocessor,
            cfg.min_pixels,
            cfg.max_pixels,
            FrameSampling(*video),
            "--min-pixels/--max-pixels",
        )
    except (LookupError, ImportError, AttributeError, PreprocessorContractError) as e:
        name = (
            cfg.preprocessor.get("name") if isinstance(cfg.preprocessor, dict) else cfg.preprocessor
        )
        raise ConfigError(f"--preprocessor {name!r}: {str(e).splitlines()[0]}") from None
    if problem:
        raise ConfigError(problem)


@dataclass
class Prepared:
    """What :func:`prepare` checked and loaded: the items and the reward."""

    items: list[dict[str, Any]]
    reward: Any


def prepare(cfg: RunConfig, overwrite: bool = False) -> Prepared:
    """Every check that needs no model: data, output folder, engine, workflow, reward (and that
    it scores the items' tasks: :func:`check_reward_tasks`).

    Raises:
        UsageError: (or a subclass) naming the bad value and the fix.
    """
    items = load_items(
        cfg.data,
        limit=cfg.limit,
        fmt=cfg.data_format,
        mapping=dict(cfg.data_map) or None,
        images_root=cfg.images_root,
        prompt=cfg.prompt,
    )
    check_engine(cfg.engine)
    if note := unseeded_server_note(cfg):
        logger.warning("%s", note)
    check_room(cfg)
    check_workflow(cfg)
    check_text_workflow(cfg, items)
    reward = load_reward(cfg.reward, items, cfg.engine.model, cfg.box_format)
    check_reward_callable(reward, cfg.reward)
    check_reward_tasks(reward, items, cfg.reward)
    items = block_unscored_tasks(reward, items)
    extra = {**reward_fingerprint(reward), **weights_fingerprint(cfg.engine.model)}
    prepare_output(Path(cfg.output), cfg, overwrite=overwrite, extra=extra)
    return Prepared(items, reward)


def unseeded_server_note(cfg: RunConfig) -> str | None:
    """Why ``--seed`` does not make a run on servers reproducible (``None`` on the local engine
    or without a seed): AReaL's SGLang and vLLM clients send no per-request seed."""
    if cfg.seed is None or cfg.engine.kind == "local":
        return None
    return (
        f"--seed {cfg.seed} seeds the local engine only: AReaL's {cfg.engine.kind} client sends "
        "no seed, so this run's samples are the server's (a vlrollout serve --deterministic "
        "server repeats a run only from a fresh start, as it counts the prompts it has answered)"
    )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SAMPLES, SAMPLE_BYTES = 16, 1 << 16
"""Each weight file is fingerprinted by its size and 16 evenly spaced 64 KiB samples of its
bytes: a retrained checkpoint differs nearly everywhere, and reading all of a large model would
cost seconds at every start."""


def weights_fingerprint(model: str) -> dict[str, str]:
    """A digest of the weight files in the model folder (names, sizes, sampled bytes): a
    checkpoint saved again into the same folder is another policy, whose results must not be
    mixed with the old ones (``engine.model`` names the folder only). Copying or touching the
    files changes nothing."""
    folder = Path(model).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return {}
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with path.open("rb") as f:
            for k in range(SAMPLES):
                f.seek(k * max(size - SAMPLE_BYTES, 0) // (SAMPLES - 1))
                digest.update(f.read(SAMPLE_BYTES))
    return {"engine.model_weights": digest.hexdigest()[:16]}


def reward_fingerprint(reward: Any) -> dict[str, str]:
    """What a resumed run must share with the results it resumes beyond its settings: the
    CIDEr-D corpus of a caption reward built from the items loaded (another ``--limit``, or more
    lines in the data file, changes its weights and so every score)."""
    found: dict[str, str] = {}
    for part in _reward_parts(reward):
        cider = getattr(part, "cider", None)
        if cider is not None:
            found["reward.cider_d_corpus"] = cider.fingerprint
    return found


def _reward_parts(reward: Any) -> list[Any]:
    """``reward`` and the rewards inside it (a :class:`ByTask`'s routes, a
    :class:`WeightedSum`'s terms)."""
    inner = list(reward.rewards.values()) if isinstance(reward, ByTask) else []
    inner += [term for term, _ in reward.terms] if isinstance(reward, WeightedSum) else []
    return [reward, *(p for r in inner for p in _reward_parts(r))]


VISION_TWIN = {"text": "vision", "multi_attempt": "vision_multi_attempt"}
"""The vision workflow that runs what each text workflow runs, on items with images."""


def check_text_workflow(cfg: RunConfig, items: list[dict[str, Any]]) -> None:
    """Refuse a text-only workflow on items that hold images or videos, before the model loads
    (each would be rejected as ``images_unsupported``).

    Raises:
        ConfigError: naming how many items hold media and the workflow to use.
    """
    if cfg.workflow not in VISION_TWIN:
        return
    with_media = sum(1 for item in items if _holds_media(item))
    if with_media:
        raise ConfigError(
            f"{with_media} of {len(items)} items hold images or videos, which --workflow "
            f"{cfg.workflow} does not read; use --workflow {VISION_TWIN[cfg.workflow]}"
        )


def _holds_media(item: dict[str, Any]) -> bool:
    if item.get("images") or item.get("videos"):
        return True
    messages = item.get("messages")
    parts = [
        part
        for message in (messages if isinstance(messages, list) else [])
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
    ]
    return any(isinstance(p, dict) and p.get("type") in MEDIA_PART_TYPES for p in parts)


MEDIA_PART_TYPES = ("image", "image_url", "video", "video_url")


def check_room(cfg: RunConfig) -> None:
    """:func:`~vlrollout.config.check_room_in_context` for the run's model."""
    check_room_in_context(cfg.gconfig.max_new_tokens, cfg.engine.model, "--max-new-tokens")


def apply_process_settings(cfg: RunConfig) -> None:
    """Settings that hold for the whole process: the prepared-prompt cache's byte bound."""
    from vlrollout.processors.cache import DEFAULT_CACHE_BYTES, set_default_cache_bytes

    set_default_cache_bytes(
        DEFAULT_CACHE_BYTES if cfg.prompt_cache_bytes is None else cfg.prompt_cache_bytes
    )


def _engine_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """``deterministic=`` and ``compile_decode=`` for the local engine (remote servers choose
    their own scheduling and kernels)."""
    if cfg.engine.kind != "local":
        return {}
    return {"deterministic": cfg.deterministic, "compile_decode": cfg.engine.compile}


async def run_items(runner: Any, items: list[dict[str, Any]], progress: bool) -> dict[str, Any]:
    """``runner.run(items)``; SIGINT or SIGTERM cancels it and raises :class:`Interrupted`."""
    from vlrollout.files import read_outcomes

    try:
        return await until_signalled(runner.run(items, progress=progress))
    except SignalExit as e:
        done = read_outcomes(Path(runner.output))
        ids = {item["id"] for item in items}
        raise Interrupted(
            e.signum, len(ids & done.keys()), len(items), str(runner.output)
        ) from None


def run_from_config(
    cfg: RunConfig, progress: bool = True, overwrite: bool = False
) -> dict[str, Any]:
    """Run ``cfg`` end to end; returns the summary. Writes the report next to the summary."""
    from vlrollout.engine.factory import make_engine
    from vlrollout.files import atomic_write_json
    from vlrollout.run.report import write_report
    from vlrollout.run.runner import Runner

    prepared = prepare(cfg, overwrite=overwrite)
    apply_process_settings(cfg)
    items = prepared.items
    seed = cfg.seed if cfg.seed is not None else 0
    engine = make_engine(
        cfg.engine, seed=seed, max_concurrent_rollouts=cfg.concurrency, **_engine_kwargs(cfg)
    )
    processor = None
    try:
        processor = getattr(engine, "processor", None)
        tokenizer = getattr(engine, "tokenizer", None)
        if tokenizer is None:
            from transformers import AutoProcessor, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(cfg.engine.model, local_files_only=True)
            processor = AutoProcessor.from_pretrained(cfg.engine.model, local_files_only=True)
        context = context_length(getattr(getattr(engine, "model", None), "config", None))
        if context is None and cfg.engine.kind != "local":  # the served model's own folder
            context = model_context(cfg.engine.model)
        if cfg.max_prompt_tokens is None and context is not None:
            room = context - cfg.gconfig.max_new_tokens
            cfg = dataclasses.replace(cfg, max_prompt_tokens=max(1, room))
        workflow = build_workflow(cfg, tokenizer, processor, prepared.reward, context)
        if cfg.engine.kind != "local":
            pre = getattr(getattr(workflow, "ctx", None), "preprocessor", None)
            check_served_image_size(cfg.engine.addresses, pre)
        runner = Runner(
            workflow,
            engine,
            tokenizer,
            cfg.output,
            group_size=cfg.group_size,
            concurrency=cfg.concurrency,
            fail_fast=cfg.fail_fast,
        )
        try:
            summary = asyncio.run(run_items(runner, items, progress))
        except Interrupted:
            write_report(
                Path(cfg.output),
                items,
                _partial_summary(cfg, items, runner.elapsed_s(), engine_summary(cfg, engine)),
                reward=prepared.reward,
                prepare=_prepare(workflow),
                processor=processor,
                video_sampling=_video_sampling(workflow),
            )
            raise
    finally:
        engine.destroy()
    summary["engine"] = engine_summary(cfg, engine)
    summary["config"] = cfg.to_dict()
    atomic_write_json(Path(cfg.output) / "summary.json", summary)
    write_report(
        Path(cfg.output),
        items,
        summary,
        reward=prepared.reward,
        prepare=_prepare(workflow),
        processor=processor,
        video_sampling=_video_sampling(workflow),
    )
    return summary


def engine_summary(cfg: RunConfig, engine: Any) -> dict[str, Any]:
    """What generated the run: the local engine's model class, dtype and device, or a remote
    engine's protocol and addresses."""
    named = {"kind": cfg.engine.kind, "model": cfg.engine.model}
    model = getattr(engine, "model", None)
    if model is None:
        return {**named, "addresses": list(cfg.engine.addresses)}
    weights = next(model.parameters())
    return {
        **named,
        "class": type(model).__name__,
        "dtype": str(weights.dtype).removeprefix("torch."),
        "device": str(weights.device),
    }


def _prepare(workflow: Any) -> Any:
    """The workflow's preparation of an item (for the geometry the report converts boxes with),
    ``None`` for a workflow without a preprocessor."""
    ctx = getattr(workflow, "ctx", None)
    if getattr(ctx, "preprocessor", None) is None:
        return None
    return lambda item: asyncio.run(ctx.prepare(item))


def _video_sampling(workflow: Any) -> Any:
    """The frame sampling of the workflow's preprocessor (``None`` for a custom workflow or one
    without video), for the report's strips of families whose tensors it cannot turn back."""
    pre = getattr(getattr(workflow, "ctx", None), "preprocessor", None)
    return getattr(pre, "video_sampling", None)


def _partial_summary(
    cfg: RunConfig, items: list[dict[str, Any]], wall_s: float, engine: dict[str, Any]
) -> dict[str, Any]:
    from vlrollout.files import atomic_write_json
    from vlrollout.run.runner import summarize

    summary = summarize(Path(cfg.output), items, wall_s=wall_s)
    summary["interrupted"] = True
    summary["engine"] = engine
    summary["config"] = cfg.to_dict()
    atomic_write_json(Path(cfg.output) / "summary.json", summary)
    return summary
