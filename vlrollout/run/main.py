"""Wiring ``vlrollout run``: config → tokenizer, processor, engine, reward, workflow → Runner."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from areal.api import RolloutWorkflow
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.run.config import RunConfig
from vlrollout.run.datasets import load_items
from vlrollout.workflows.steps import resolve_callable


def tiny_task_reward(items: list[dict[str, Any]]) -> Any:
    """The reward of the synthetic shapes tasks: count → exact count, ground → IoU of the
    Qwen2-VL box (0–1000) against the original-pixel label, caption → CIDEr-D.

    CIDEr-D's document frequencies come from the captions of ``items`` (the references), computed
    once, so a caption's score does not depend on which other captions share its batch.
    """
    from vlrollout.rewards import ByTask
    from vlrollout.rewards.answer import CountReward
    from vlrollout.rewards.caption import CaptionReward
    from vlrollout.rewards.grounding import GroundingReward

    references = [item["captions"] for item in items if item.get("captions")]
    rewards: dict[str, Any] = {
        "count": CountReward(),
        "ground": GroundingReward("qwen2_vl", "iou"),
    }
    if references:
        rewards["caption"] = CaptionReward("cider_d", corpus=references)
    return ByTask(rewards)


def load_reward(name: str, items: list[dict[str, Any]]) -> Any:
    """A reward by registry name or import path; ``tiny_task`` for the synthetic sample tasks."""
    from vlrollout.rewards.registry import get_reward

    if name == "tiny_task":
        return tiny_task_reward(items)
    return get_reward(name)


def build_workflow(cfg: RunConfig, tokenizer: Any, processor: Any, reward: Any) -> RolloutWorkflow:
    """The workflow named by ``cfg.workflow`` (a built-in name or an import path)."""
    from vlrollout import workflows

    gconfig = GenerationHyperparameters(**cfg.gconfig)
    common = {"reward_timeout_s": cfg.reward_timeout_s}
    vision = {
        "processor": processor,
        "preprocessor": cfg.preprocessor,
        "min_pixels": cfg.min_pixels,
        "max_pixels": cfg.max_pixels,
    }
    multi = {"max_turns": cfg.max_turns, "turn_discount": cfg.turn_discount}
    if cfg.workflow == "text":
        return workflows.RLVRWorkflow(reward, gconfig, tokenizer, **common)
    if cfg.workflow == "vision":
        return workflows.VisionRLVRWorkflow(reward, gconfig, tokenizer, **vision, **common)
    if cfg.workflow == "multi_attempt":
        return workflows.MultiAttemptWorkflow(reward, gconfig, tokenizer, **multi, **common)
    if cfg.workflow == "vision_multi_attempt":
        return workflows.VisionMultiAttemptWorkflow(
            reward, gconfig, tokenizer, **vision, **multi, **common
        )
    if cfg.workflow == "vision_tool":
        return workflows.VisionToolWorkflow(
            reward, gconfig, tokenizer, tools=cfg.tools, max_turns=cfg.max_turns, **vision, **common
        )
    cls = resolve_callable(cfg.workflow, "workflow")
    return cls(reward_fn=reward, gconfig=gconfig, tokenizer=tokenizer, processor=processor)


def run_from_config(cfg: RunConfig, progress: bool = True) -> dict[str, Any]:
    """Run ``cfg`` end to end; returns the summary. Writes the report next to the summary."""
    from vlrollout.engine.factory import make_engine
    from vlrollout.run.report import write_report
    from vlrollout.run.runner import Runner, atomic_write_json

    items = load_items(cfg.data, limit=cfg.limit)
    engine = make_engine(cfg.engine, seed=cfg.seed, max_concurrent_rollouts=cfg.concurrency)
    try:
        processor = getattr(engine, "processor", None)
        tokenizer = getattr(engine, "tokenizer", None)
        if tokenizer is None:
            from transformers import AutoProcessor, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(cfg.engine.model, local_files_only=True)
            processor = AutoProcessor.from_pretrained(cfg.engine.model, local_files_only=True)
        reward = load_reward(cfg.reward, items)
        workflow = build_workflow(cfg, tokenizer, processor, reward)
        runner = Runner(
            workflow,
            engine,
            tokenizer,
            cfg.output,
            group_size=cfg.group_size,
            concurrency=cfg.concurrency,
            fail_fast=cfg.fail_fast,
        )
        summary = asyncio.run(runner.run(items, progress=progress))
    finally:
        engine.destroy()
    summary["config"] = cfg.to_dict()
    atomic_write_json(Path(cfg.output) / "summary.json", summary)
    write_report(Path(cfg.output), items, summary, processor=processor)
    return summary
