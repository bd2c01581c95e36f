"""Workflow classes named by import path in the run tests."""

from __future__ import annotations

from vlrollout.workflows import RLVRWorkflow


class SubclassedText(RLVRWorkflow):
    """A plain subclass: it takes every setting RLVRWorkflow takes."""


class FixedArguments:
    """A workflow constructor that takes only AReaL's four arguments."""

    def __init__(self, reward_fn, gconfig, tokenizer, processor=None):
        self.reward_fn = reward_fn
