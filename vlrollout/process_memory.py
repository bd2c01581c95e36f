"""This process's resident memory, for the records that watch it over a long run (``vlrollout
serve``'s ``/health``, ``vlrollout train``'s ``metrics.jsonl``)."""

from __future__ import annotations

import os


def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
