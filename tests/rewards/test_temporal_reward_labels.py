"""Label fields of the temporal reward: what is a segment and what is a clip's length."""

from __future__ import annotations

import pytest

from vlrollout.rewards.temporal import TemporalIoUReward


@pytest.mark.parametrize("segments", [[True, 3], [[0, "2"]]], ids=["bool", "text"])
def test_a_label_end_that_is_not_a_number_is_refused(segments):
    """``True`` read as 1.0 scored against a segment the annotation never gave."""
    with pytest.raises(ValueError, match=r"task_data\['segments'\]"):
        TemporalIoUReward().score("p", "from 2 to 3", [], [], segments=segments)


@pytest.mark.parametrize("duration", [float("nan"), float("inf"), -1.0, True])
def test_a_clip_length_that_is_no_length_is_refused(duration):
    """A NaN length was read as unknown, skipping the check that a label starts in the clip."""
    with pytest.raises(ValueError, match="duration_s"):
        TemporalIoUReward().score("p", "from 2 to 3", [], [], segments=[2, 3], duration_s=duration)
