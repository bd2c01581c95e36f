"""Which built-in reward scores each task the readers and the eval tasks name: the fix an error
suggests when a reward has no route for an item's task. Its own module, so the task-routed reward
(:mod:`~vlrollout.rewards.combine`) and the registry that builds it can both name the fix."""

from __future__ import annotations

from typing import Any

TASK_REWARDS: dict[str, str] = {
    "refcoco": "iou",
    "ground": "iou",
    "caption": "cider_d",
    "count": "count",
    "mc": "choice",
}
"""A built-in reward that scores each task the readers and the eval tasks name (the fix an
error suggests when a reward has no route for an item's task)."""


def task_reward_hint(task: Any) -> str:
    """The reward to pass for items of ``task``, as an error's fix.

    >>> task_reward_hint("refcoco")
    "pass a reward that scores task 'refcoco': --reward iou"
    """
    if isinstance(task, str) and task in TASK_REWARDS:
        return f"pass a reward that scores task {task!r}: --reward {TASK_REWARDS[task]}"
    examples = ", ".join(f"{name} ({t})" for t, name in TASK_REWARDS.items() if t != "ground")
    what = "items without a task" if task is None else f"task {task!r}"
    return f"pass a reward that scores {what} with --reward NAME, e.g. {examples}, math"
