"""The tiny tasks' reward (``tiny_task``) and its CIDEr-D corpus."""

from __future__ import annotations

from vlrollout.tiny import rewards


def test_captions_that_weigh_no_ngram_give_no_caption_reward(monkeypatch):
    """One image's references (copies of one item) would score every caption 0: the caption
    route is left out, with a warning, so caption episodes are rejected rather than zeroed."""
    warnings: list[str] = []
    monkeypatch.setattr(rewards.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    copies = [{"task": "caption", "captions": ["a red square"]}] * 3
    assert "caption" not in rewards.shapes_task_reward(copies).rewards
    assert len(warnings) == 1 and "weigh no n-gram" in warnings[0]
    two = [{"captions": ["a red square"]}, {"captions": ["two blue circles"]}]
    assert "caption" in rewards.shapes_task_reward(two).rewards
