"""A resumed run continues the learning-rate schedule where the checkpoint left it.

AReaL saves the optimizer state but not its scheduler's: rebuilt from the config, the schedule
would start over at step 0, and a linear or cosine decay (or a warm-up) would repeat.
"""

from __future__ import annotations

import torch
from areal.engine.fsdp_utils import get_cosine_schedule_with_warmup

from tests.train.test_checkpoint_crash import _Actor
from vlrollout.train import checkpoint


class _ScheduledActor(_Actor):
    """The stand-in actor with a real optimizer and AReaL's cosine schedule with warm-up."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.weight = torch.nn.Parameter(torch.zeros(2))
        self.optimizer = torch.optim.AdamW([self.weight], lr=1e-3)
        self.lr_scheduler = get_cosine_schedule_with_warmup(self.optimizer, 2, 10)

    def train_step(self) -> float:
        """One update and the scheduler step after it; the learning rate it used."""
        lr = self.optimizer.param_groups[0]["lr"]
        self.weight.grad = torch.ones(2)
        self.optimizer.step()
        self.lr_scheduler.step()
        return lr


def test_a_resumed_schedule_continues_where_the_checkpoint_left_it(tmp_path):
    whole = _ScheduledActor(0)
    expected = [whole.train_step() for _ in range(6)]

    first = _ScheduledActor(0)
    used = [first.train_step() for _ in range(3)]
    checkpoint.save(first, tmp_path, 3)

    resumed = _ScheduledActor(3)
    resumed.optimizer.load_state_dict(first.optimizer.state_dict())  # AReaL's optimizer shard
    checkpoint.restore_scheduler(resumed, checkpoint.latest(tmp_path))
    assert resumed.lr_scheduler.get_last_lr() == first.lr_scheduler.get_last_lr()
    used += [resumed.train_step() for _ in range(3)]
    assert used == expected
