"""Rewards for the training tests, importable by path (AReaL's reward pool pickles them)."""

from __future__ import annotations


def square_words(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """Fraction of the completion's words that are "square": dense, and learnable in a few steps."""
    words = completions.replace(",", " ").split()
    return sum(w == "square" for w in words) / max(1, len(words))


def even_token_ids(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """Fraction of the completion's token ids that are even: a tiny random model's random text
    scores differently from sample to sample, so GRPO advantages (and the update) are not zero."""
    return sum(t % 2 == 0 for t in completion_ids) / max(1, len(completion_ids))
