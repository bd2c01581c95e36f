"""A GRPO step's GPU record (vlrollout.train.device): phase clocks wait for the GPU's queued
work and the step's peak device memory reaches ``metrics.jsonl``, only where CUDA is in use.
The CUDA calls are stand-ins here; ``tests/train/test_gpu_train.py`` runs them on a GPU."""

from __future__ import annotations

import pytest
import torch

from vlrollout.train import device


@pytest.fixture
def cuda_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 7 * 2**20)
    return calls


def test_a_process_using_cuda_waits_for_it_and_records_its_peak(monkeypatch, cuda_calls):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    device.reset_peak()
    device.settle()
    assert cuda_calls == ["reset", "synchronize"]
    assert device.peak() == {device.DEVICE_PEAK: 7 * 2**20}


def test_a_cpu_process_touches_no_cuda_and_records_no_device_peak(monkeypatch, cuda_calls):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    device.reset_peak()
    device.settle()
    assert cuda_calls == []
    assert device.peak() == {}
