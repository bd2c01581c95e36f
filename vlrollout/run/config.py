"""Configuration of ``vlrollout run``: a dataclass filled from a YAML file, then from flags.

The YAML uses AReaL's style: flat keys with nested ``gconfig`` and ``engine`` sections, e.g.::

    data: assets/samples/data.jsonl
    output: runs/demo
    workflow: vision   # text | vision | multi_attempt | vision_multi_attempt | vision_tool | import path
    reward: tiny_task           # a name from vlrollout.rewards' registry or an import path
    group_size: 4
    gconfig: {max_new_tokens: 24, temperature: 1.0}
    engine: {kind: local, model: assets/tiny-qwen2vl}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ENGINE_KINDS = ("local", "sglang", "vllm")
WORKFLOWS = ("text", "vision", "multi_attempt", "vision_multi_attempt", "vision_tool")


@dataclass
class EngineConfig:
    """Which engine serves the requests.

    Attributes:
        kind: ``local`` (embedded transformers engine), or ``sglang``/``vllm`` (AReaL's remote
            engine classes, pointed at running servers).
        model: Local model folder (weights, tokenizer, processor); also the tokenizer/processor
            path for remote engines.
        device: ``cpu``, ``cuda`` or ``cuda:N`` for the local engine.
        addresses: ``host:port`` of the servers for remote engines.
    """

    kind: str = "local"
    model: str = "assets/tiny-qwen2vl"
    device: str = "cpu"
    addresses: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine.kind must be one of {ENGINE_KINDS}, got {self.kind!r}")
        if self.kind != "local" and not self.addresses:
            raise ValueError(
                f"engine.kind={self.kind!r} needs engine.addresses (host:port of the servers)"
            )


@dataclass
class RunConfig:
    """Everything ``vlrollout run`` needs.

    Attributes:
        data: JSONL or parquet file of data items (image paths are relative to this file).
        output: Output folder (trajectories, summary.json, report.html).
        workflow: A built-in workflow name or an import path of a ``RolloutWorkflow`` class.
        reward: A reward name from :mod:`vlrollout.rewards` or an import path.
        preprocessor: A preprocessor name or import path (``None``: the default for the model).
        group_size: Episodes per item (a GRPO group), run with AReaL's ``GroupedRolloutWorkflow``.
        concurrency: Items in flight at once.
        limit: Only the first ``limit`` items (``None``: all).
        max_turns, turn_discount: For multi-attempt workflows (``max_turns`` also for tool use).
        tools: Tool names or import paths for ``vision_tool``.
        min_pixels, max_pixels: Resize limits for the default preprocessor.
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        fail_fast: Stop at the first rejected item instead of recording it and going on.
        seed: Seed for sampling.
        gconfig: Fields of AReaL's ``GenerationHyperparameters``.
        engine: See :class:`EngineConfig`.
    """

    data: str = "assets/samples/data.jsonl"
    output: str = "runs/demo"
    workflow: str = "vision"
    reward: str = "tiny_task"
    preprocessor: str | None = None
    group_size: int = 4
    concurrency: int = 4
    limit: int | None = None
    max_turns: int = 2
    turn_discount: float = 0.9
    tools: list[str] = field(default_factory=lambda: ["zoom_in", "rotate", "image_info"])
    min_pixels: int | None = None
    max_pixels: int | None = None
    reward_timeout_s: float = 15.0
    fail_fast: bool = False
    seed: int = 1
    gconfig: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 32})
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        if isinstance(self.engine, dict):
            self.engine = EngineConfig(**self.engine)
        for name in ("group_size", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0, got {self.limit}")
        if self.workflow not in WORKFLOWS and "." not in self.workflow:
            raise ValueError(
                f"workflow must be one of {WORKFLOWS} or an import path, got {self.workflow!r}"
            )

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> RunConfig:
        """Read a YAML file (optional), then apply ``overrides`` (``None`` values are ignored).

        Dotted override keys reach nested sections: ``{"engine.kind": "sglang"}``.
        """
        raw: dict[str, Any] = {}
        if path is not None:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: expected a mapping at the top level")
            raw = loaded
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}; known keys: {sorted(known)}")
        for key, value in overrides.items():
            if value is None:
                continue
            if "." in key:
                section, sub = key.split(".", 1)
                raw.setdefault(section, {})
                raw[section] = {**raw[section], sub: value}
            else:
                raw[key] = value
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
