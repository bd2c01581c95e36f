"""Rewards for the training tests, importable by path (AReaL's reward pool pickles them)."""

from __future__ import annotations


def square_words(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """Fraction of the completion's words that are "square": dense, and learnable in a few steps."""
    words = completions.replace(",", " ").split()
    return sum(w == "square" for w in words) / max(1, len(words))
