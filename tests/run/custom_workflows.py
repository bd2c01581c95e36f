"""Workflow classes named by import path in the run tests."""

from __future__ import annotations

from areal.api import RolloutWorkflow

from vlrollout.workflows import RLVRWorkflow, VisionToolWorkflow

LAMBDA_REWARD = lambda *args, **kwargs: 1.0  # noqa: E731 - a reward that cannot be pickled


class SubclassedText(RLVRWorkflow):
    """A plain subclass: it takes every setting RLVRWorkflow takes."""


class FixedArguments(RolloutWorkflow):
    """A workflow constructor that takes only AReaL's four arguments."""

    def __init__(self, reward_fn, gconfig, tokenizer, processor=None):
        self.reward_fn = reward_fn

    async def arun_episode(self, engine, data):
        return None


class NeedsThinking(RolloutWorkflow):
    """Like AReaL's own VisionRLVRWorkflow: a required argument the run does not give."""

    def __init__(self, reward_fn, gconfig, tokenizer, processor, enable_thinking):
        self.reward_fn = reward_fn

    async def arun_episode(self, engine, data):
        return None


class ForwardingTool(VisionToolWorkflow):
    """A subclass that passes every keyword on to the tool workflow."""

    def __init__(self, reward_fn, gconfig, tokenizer, processor=None, **kwargs):
        super().__init__(reward_fn, gconfig, tokenizer, processor, **kwargs)
