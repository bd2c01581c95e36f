"""Module-level (picklable) reward functions for workflow tests; they run in AReaL's process pool."""

import time


def contains_answer(prompt, completions, prompt_ids, completion_ids, answer=None, **kw):
    """1.0 when the completion contains the item's answer."""
    return 1.0 if str(answer) in completions else 0.0


def echo_geometry_width(prompt, completions, prompt_ids, completion_ids, geometry=(), **kw):
    """The first image's original width, to prove geometry reaches rewards."""
    return float(geometry[0]["original_width"]) if geometry else -1.0


def raises(prompt, completions, prompt_ids, completion_ids, **kw):
    raise RuntimeError("reward exploded")


def sleeps(prompt, completions, prompt_ids, completion_ids, **kw):
    time.sleep(5)
    return 1.0


def sees_images(prompt, completions, prompt_ids, completion_ids, **kw):
    """-1 if raw images leaked into task data (they must not be pickled into the pool)."""
    return -1.0 if "images" in kw else 1.0


def image_pads_in_prompt(prompt, completions, prompt_ids, completion_ids, **kw):
    """How many ``<|image_pad|>`` the reward's ``prompt`` holds (one per image, by contract)."""
    return float(prompt.count("<|image_pad|>"))
