"""Raw media (images, videos) stay out of the reward process pool unless the reward asks for them."""

from __future__ import annotations

import asyncio

from vlrollout.rewards.caller import RewardCaller


def media_seen(prompt, completion, prompt_ids, completion_ids, **task_data) -> float:
    """1 per raw media field that reached the reward, plus 10 when the timing record did."""
    return float(("images" in task_data) + ("videos" in task_data)) + 10 * (
        "video_timing" in task_data
    )


class NeedsMedia:
    needs_images = True

    def __call__(self, prompt, completion, prompt_ids, completion_ids, **task_data) -> float:
        return media_seen(prompt, completion, prompt_ids, completion_ids, **task_data)


def _score(reward) -> float:
    caller = RewardCaller(reward, timeout_s=120, max_workers=1)
    data = {"images": [b"x" * 64], "videos": [b"y" * 64], "video_timing": [{"timestamps_s": [0.0]}]}
    return asyncio.run(caller("p", "c", [], [], data))


def test_raw_media_is_not_sent_to_the_reward_but_the_timing_is():
    assert _score(media_seen) == 10.0


def test_a_reward_that_needs_media_gets_it():
    assert _score(NeedsMedia()) == 12.0
