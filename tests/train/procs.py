"""The environment for a trainer subprocess started by a test."""

from __future__ import annotations

import os

DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
"""Set in this process by a session actor (``vlrollout.train.actor``); inherited, they would make
the child's rendezvous collide with ours (EADDRINUSE)."""


def subprocess_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without this process's torch.distributed variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(extra)
    return env
