"""Rewards that read the images themselves (CLIPScore) get them in prompt order, aligned with
``geometry``: images given inside message parts included."""

from __future__ import annotations

from vlrollout.processors.base import PreparedPrompt
from vlrollout.workflows.steps import reward_task_data

PROMPT = PreparedPrompt(input_ids=[1], prompt_text="x")


def test_an_inline_image_part_is_among_the_reward_images_in_prompt_order():
    data = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": "green.png"},
                    {"type": "image"},
                    {"type": "text", "text": "Describe."},
                ],
            }
        ],
        "images": ["blue.png"],
    }
    assert reward_task_data(data, PROMPT)["images"] == ["green.png", "blue.png"]
    only_inline = {"messages": data["messages"][:1], "images": ["blue.png"]}
    assert reward_task_data(only_inline, PROMPT)["images"] == ["green.png", "blue.png"]
    inline = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}]
    assert reward_task_data({"messages": inline}, PROMPT)["images"] == ["a.png"]


def test_items_whose_images_are_all_listed_keep_their_field():
    data = {"messages": "<image>x", "images": ["a.png"], "answer": 3}
    assert reward_task_data(data, PROMPT) is data
