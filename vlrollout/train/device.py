"""What a GRPO step's record says about the GPU: phase times that hold the GPU's queued work,
and the step's peak device memory. Nothing where the process never used CUDA (the CPU)."""

from __future__ import annotations

import torch

DEVICE_PEAK = "memory/peak_device"
"""The ``metrics.jsonl`` key of a step's peak GPU memory in bytes."""


def settle() -> None:
    """Wait for the work queued on the GPU: CUDA runs asynchronously, so a phase's clock stopped
    before it would hand the phase's tail to the next phase's time."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def reset_peak() -> None:
    """Start a step's peak memory from what the current CUDA device holds now."""
    if torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak() -> dict[str, int]:
    """``{DEVICE_PEAK: bytes}``: the most memory the current CUDA device (the actor's) held
    since :func:`reset_peak`, in this process; ``{}`` without CUDA."""
    if not torch.cuda.is_initialized():
        return {}
    return {DEVICE_PEAK: int(torch.cuda.max_memory_allocated())}
