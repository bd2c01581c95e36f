"""Configuration of ``vlrollout run``: dataclasses loaded the way AReaL loads its configs.

AReaL's ``load_expr_config`` merges a YAML file into ``OmegaConf.structured(ConfigClass)`` and
calls ``OmegaConf.to_object``; :meth:`RunConfig.load` does the same (without Hydra's search path),
then merges the command-line flags. Unknown keys and wrongly typed values are refused by OmegaConf
and reported as :class:`~vlrollout.errors.ConfigError` naming the key and the fix. ``gconfig``
is AReaL's own ``GenerationHyperparameters``; ``engine`` is the engine section ``vlrollout train``
reads too (:class:`~vlrollout.engine.config.EngineConfig`). Relative paths, in a file or a flag,
are relative to the working folder, as in AReaL (:mod:`vlrollout.config`). ``key=value``
arguments after the flags (``gconfig.top_p=0.9``) set any field, as in AReaL's launchers.
Example file::

    data: assets/samples/data.jsonl
    output: runs/demo
    workflow: vision   # text | vision | multi_attempt | vision_multi_attempt | vision_tool | import path
    reward: tiny_task  # a name from vlrollout.rewards' registry or an import path
    group_size: 4
    seed: 1
    gconfig: {max_new_tokens: 24, temperature: 1.0}
    engine: {kind: local, model: assets/tiny-qwen2vl}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from areal.api.cli_args import GenerationHyperparameters
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vlrollout.box_rewards import box_format_unread
from vlrollout.config import check_gconfig, check_remote_gconfig, explain, read_yaml
from vlrollout.engine.config import EngineConfig
from vlrollout.errors import ConfigError
from vlrollout.eval.metrics.boxes import check_box_format
from vlrollout.readers import FORMATS

WORKFLOWS = ("text", "vision", "multi_attempt", "vision_multi_attempt", "vision_tool")
VISION_WORKFLOWS = ("vision", "vision_multi_attempt", "vision_tool")
"""The built-in workflows with a multimodal preprocessor (``--min-pixels`` and the like)."""


def _default_gconfig() -> GenerationHyperparameters:
    return GenerationHyperparameters(max_new_tokens=32)


@dataclass
class RunConfig:
    """Everything ``vlrollout run`` needs.

    Attributes:
        data: Data file or ``save_to_disk`` folder, in any format of :mod:`vlrollout.readers`
            (image paths in JSONL are relative to this file).
        data_format: One of :data:`vlrollout.readers.FORMATS` (``None``: detected from the path).
        data_map: Column mapping ``{canonical field: source column}`` for table rows.
        images_root: Folder of the images an annotation file names (COCO, RefCOCO, LLaVA;
            ``None``: the image-folder rule of ``docs/datasets.md``).
        prompt: Prompt template for items without ``messages`` (``str.format_map`` over the
            item's fields; ``None``: the template of the item's task where the format implies one).
        output: Output folder (trajectories, summary.json, report.html).
        workflow: A built-in workflow name or an import path of a ``RolloutWorkflow`` class.
        reward: A reward name from :mod:`vlrollout.rewards` or an import path.
        box_format: How the model writes boxes when not as its family does (a model fine-tuned
            on another family's boxes, e.g. ``qwen2_vl``; as ``vlrollout eval --box-format``),
            read by the built-in box and point rewards; ``None``: the family's.
        preprocessor: A preprocessor name or import path, or a mapping ``{name: ..., **options}``
            whose options go to the plug-in's factory (``None``: the default for the model).
        group_size: Episodes per item (a GRPO group), run with AReaL's ``GroupedRolloutWorkflow``.
        concurrency: Items in flight at once.
        limit: Only the first ``limit`` items (``None``: all).
        max_turns, turn_discount: For multi-attempt workflows (``max_turns`` also for tool use).
        tools: Tool names or import paths for ``vision_tool``.
        min_pixels, max_pixels: Resize limits for the default preprocessor.
        video_fps, video_max_frames: Frames sampled per second of each video, and at most per
            video, by the default preprocessor (``None``: the family's defaults).
        video_min_pixels, video_max_pixels: Pixel budget of each sampled video frame (Qwen2-VL,
            Qwen2.5-VL) or of the whole sampled clip (Qwen3-VL); ``None``: the family's defaults.
        max_prompt_tokens: Longer prompts are rejected with ``prompt_too_long`` (``None``: the
            model's context length minus ``gconfig.max_new_tokens`` when the model states one).
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        prompt_cache_bytes: Bound on the bytes of prepared prompts kept after their group is done
            (``None``: :data:`vlrollout.processors.cache.DEFAULT_CACHE_BYTES`, 1 GiB; prompts in
            use by a running group are always kept).
        fail_fast: Stop at the first rejected item instead of recording it and going on.
        seed: Seed for sampling (``None``: unseeded). With a seed the engine's deterministic
            scheduling is on unless ``engine.deterministic`` says otherwise.
        gconfig: AReaL's ``GenerationHyperparameters``.
        engine: See :class:`EngineConfig`.
    """

    data: str = "assets/samples/data.jsonl"
    data_format: str | None = None
    data_map: dict[str, str] = field(default_factory=dict)
    images_root: str | None = None
    prompt: str | None = None
    output: str = "runs/demo"
    workflow: str = "vision"
    reward: str = "tiny_task"
    box_format: str | None = None
    preprocessor: Any = None  # str | dict | None (OmegaConf structured configs have no such union)
    group_size: int = 4
    concurrency: int = 4
    limit: int | None = None
    max_turns: int = 2
    turn_discount: float = 0.9
    tools: list[str] = field(default_factory=lambda: ["zoom_in", "rotate", "image_info"])
    min_pixels: int | None = None
    max_pixels: int | None = None
    video_fps: float | None = None
    video_max_frames: int | None = None
    video_min_pixels: int | None = None
    video_max_pixels: int | None = None
    max_prompt_tokens: int | None = None
    reward_timeout_s: float = 15.0
    prompt_cache_bytes: int | None = None
    fail_fast: bool = False
    seed: int | None = None
    gconfig: GenerationHyperparameters = field(default_factory=_default_gconfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):
            self.engine = EngineConfig(**self.engine)
        if isinstance(self.gconfig, dict):
            self.gconfig = GenerationHyperparameters(**{**_gconfig_dict(), **self.gconfig})
        for name in ("group_size", "concurrency", "max_turns"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_flag(name)} must be at least 1, got {getattr(self, name)}")
        n_samples = self.gconfig.n_samples
        if n_samples not in (1, self.group_size):  # AReaL's trainer reads its group size here
            raise ConfigError(
                f"gconfig.n_samples={n_samples} is AReaL's group size; vlrollout run's is "
                f"{_flag('group_size')}, {self.group_size} here: set that"
            )
        if self.seed is not None and not 0 <= self.seed < 2**63:  # torch's generator seed
            raise ConfigError(f"{_flag('seed')} must be in [0, 2**63), got {self.seed}")
        if not str(self.output).strip():  # "" is the working folder, mixed with the user's files
            raise ConfigError(f"{_flag('output')} is empty: name a folder for the results")
        if self.limit is not None and self.limit < 1:  # it counts the items to run
            raise ConfigError(f"{_flag('limit')} must be at least 1, got {self.limit}")
        for name in ("max_prompt_tokens", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{_flag(name)} must be at least 1, got {value}")
        if None not in (self.min_pixels, self.max_pixels) and self.min_pixels > self.max_pixels:
            raise ConfigError(
                f"{_flag('min_pixels')} {self.min_pixels} exceeds {_flag('max_pixels')} "
                f"{self.max_pixels}; swap or fix them"
            )
        if self.prompt_cache_bytes is not None and self.prompt_cache_bytes < 0:
            raise ConfigError(
                f"{_flag('prompt_cache_bytes')} must be 0 or more, got {self.prompt_cache_bytes}"
            )
        # Written so that NaN fails them too (NaN passes any `x < 0` test).
        for name in ("video_fps", "video_max_frames", "video_min_pixels", "video_max_pixels"):
            value = getattr(self, name)  # set in the file or as KEY=VALUE (no flags)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value}")
        if not (math.isfinite(self.reward_timeout_s) and self.reward_timeout_s > 0):
            raise ConfigError(
                "reward_timeout_s (--reward-timeout) must be a positive finite number, got "
                f"{self.reward_timeout_s}"
            )
        if self.box_format is not None:
            try:
                check_box_format(self.box_format)
            except ValueError as e:
                raise ConfigError(f"box_format (--box-format): {e}") from None
            if unread := box_format_unread(self.reward):
                raise ConfigError(f"--box-format {unread}")
        if not 0 < self.turn_discount <= 1:
            raise ConfigError(
                f"{_flag('turn_discount')} must be in (0, 1], got {self.turn_discount}"
            )
        if self.data_format is not None and self.data_format not in FORMATS:
            raise ConfigError(
                f"data_format (--format) must be null (detected from the path) or one of "
                f"{', '.join(FORMATS)}, got {self.data_format!r}"
            )
        if self.workflow not in WORKFLOWS and "." not in self.workflow:
            raise ConfigError(
                f"workflow (--workflow) must be one of {', '.join(WORKFLOWS)} or an import path "
                f"(module.Class), got {self.workflow!r}"
            )
        if self.preprocessor is not None and not isinstance(self.preprocessor, str):
            spec = self.preprocessor
            if not (isinstance(spec, Mapping) and isinstance(spec.get("name"), str)):
                raise ConfigError(
                    "preprocessor must be a name, an import path or a mapping "
                    f"{{name: ..., option: value}}, got {spec!r}"
                )
            self.preprocessor = dict(spec)
        check_gconfig(self.gconfig, flags=True)
        check_remote_gconfig(self.gconfig, self.engine.kind)

    @property
    def deterministic(self) -> bool:
        """Whether the engine schedules deterministically (on by default when seeded)."""
        if self.engine.deterministic is not None:
            return self.engine.deterministic
        return self.seed is not None

    @classmethod
    def load(
        cls, path: str | Path | None = None, dotlist: Sequence[str] = (), **overrides: Any
    ) -> RunConfig:
        """Read a YAML file (optional), then apply ``dotlist`` (AReaL/Hydra-style ``key=value``
        strings, values parsed as YAML), then ``overrides`` (``None`` values are ignored).

        Dotted override keys reach nested sections: ``{"engine.kind": "sglang"}``.

        Raises:
            ConfigError: the file is missing or not YAML, or a key or value is not valid.
        """
        raw: dict[str, Any] = {}
        if path is not None:
            raw = read_yaml(Path(path))
        nested: dict[str, Any] = {}
        for key, value in overrides.items():
            if value is None:
                continue
            *parents, leaf = key.split(".")
            node = nested
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        where = f" in {path}" if path is not None else ""
        try:
            merged = OmegaConf.merge(OmegaConf.structured(cls), raw)
        except OmegaConfBaseException as e:
            raise explain(e, cls, where) from None
        for entry in dotlist:
            if "=" not in entry:
                raise ConfigError(
                    f"setting {entry!r} must be KEY=VALUE, e.g. gconfig.top_p=0.9 "
                    "(a config file goes after --config)"
                )
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(dotlist)), nested)
            return OmegaConf.to_object(merged)  # type: ignore[return-value]
        except OmegaConfBaseException as e:
            raise explain(e, cls, "") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _flag(name: str) -> str:
    """``group_size (--group-size)``: the key as it appears in a file and on the command line."""
    return f"{name} (--{name.replace('_', '-')})"


def _gconfig_dict() -> dict[str, Any]:
    return dataclasses.asdict(_default_gconfig())
