"""Held-out rollouts shown per evaluation (``vlrollout.train.samples``): the completion as the
reward read it, boxes converted to original pixels and drawn, the report's embedded images."""

from __future__ import annotations

import base64
import re

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.tiny.rewards import shapes_task_reward
from vlrollout.tiny.synthetic import generate_items
from vlrollout.train import samples

TINY = "assets/tiny-qwen2vl"
BOX = "<|box_start|>(500,500),(750,750)<|box_end|>"


@pytest.fixture(scope="module")
def items():
    return generate_items("ground", 2, seed=200) + generate_items("count", 1, seed=200)


@pytest.fixture(scope="module")
def workflow(items):
    from vlrollout.workflows import VisionRLVRWorkflow
    from vlrollout.workflows.preparation import load_processor

    processor = load_processor(TINY)
    greedy = GenerationHyperparameters(n_samples=1, greedy=True, max_new_tokens=20)
    return VisionRLVRWorkflow(shapes_task_reward(items), greedy, processor.tokenizer, processor)


def _trajectory(workflow, completion: str, reward: float) -> dict:
    """What the workflow packs for one episode: prompt ids (mask 0), generated ids ending in the
    stop token (mask 1), the reward."""
    tok = workflow.ctx.tokenizer
    generated = tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    prompt = tok("a prompt", add_special_tokens=False)["input_ids"]
    mask = [0] * len(prompt) + [1] * len(generated)
    return {
        "input_ids": torch.tensor([prompt + generated]),
        "loss_mask": torch.tensor([mask]),
        "rewards": torch.tensor([reward]),
    }


def test_collect_reads_boxes_as_the_reward_does_and_draws_them(items, workflow):
    ground, _, count = items
    assert ground["images"][0].size == (140, 105) and ground["boxes"] == [[39, 2, 67, 30]]
    episodes = [(ground, _trajectory(workflow, BOX, 0.25)), (items[1], None)]
    episodes.append((count, _trajectory(workflow, "3", 1.0)))
    reward = shapes_task_reward(items)

    first, rejected, counted = samples.collect(7, episodes, workflow, reward, count=3)

    assert (first.step, first.index, first.item_id, first.task) == (7, 0, "ground-200-0", "ground")
    assert (first.completion, first.reward) == (BOX, 0.25)  # the stop token is not text
    assert first.true_boxes == [(39.0, 2.0, 67.0, 30.0)]
    # 0..1000 of the model frame (a plain resize) is 0..140 x 0..105 of the original.
    assert first.predicted_boxes == [pytest.approx((70.0, 52.5, 105.0, 78.75))]
    image, original = first.image, ground["images"][0].convert("RGB")
    assert image.size == original.size
    assert image.getpixel((39, 16)) == samples.TRUE_COLOUR  # left edge of the label box
    assert image.getpixel((70, 65)) == samples.PREDICTED_COLOUR  # left edge of the predicted one
    assert image.getpixel((5, 100)) == original.getpixel((5, 100))  # elsewhere untouched
    assert original.getpixel((39, 16)) != samples.TRUE_COLOUR

    assert (rejected.completion, rejected.reward, rejected.image) == (None, 0.0, None)
    assert "rejected" in rejected.markdown()

    # A counting item has no grounding reward: its image as it is, no boxes.
    assert (counted.completion, counted.true_boxes, counted.predicted_boxes) == ("3", [], [])
    assert counted.image.tobytes() == count["images"][0].convert("RGB").tobytes()

    assert len(samples.collect(7, episodes, workflow, reward, count=1)) == 1


def test_grounding_reward_is_found_inside_combinations():
    from vlrollout.rewards import ByTask, CountReward, GroundingReward, WeightedSum

    ground = GroundingReward("qwen2_vl", "iou")
    mixed = ByTask({"ground": WeightedSum([(CountReward(), 1.0), (ground, 0.5)])})
    assert samples.grounding_reward(mixed, {"task": "ground"}) is ground
    assert samples.grounding_reward(mixed, {"task": "caption"}) is None
    assert samples.grounding_reward(CountReward(), {"task": "ground"}) is None


def test_a_reversed_predicted_box_is_listed_not_drawn(items, workflow):
    """The grounding reward's rule: reversed corners are refused (scored ``inverted_box``), never
    swapped, so the box is named with the reason instead of drawn."""
    reversed_box = "<|box_start|>(750,500),(500,750)<|box_end|>"
    episode = (items[0], _trajectory(workflow, reversed_box, -1.0))
    (shown,) = samples.collect(0, [episode], workflow, shapes_task_reward(items), count=1)
    problem = "box [750.0, 500.0, 500.0, 750.0]: inverted_box"
    assert (shown.predicted_boxes, shown.box_problems) == ([], [problem])
    truth_only = samples.draw(items[0]["images"][0], shown.true_boxes, [])
    assert shown.image.tobytes() == truth_only.tobytes()
    assert f"not drawn: {problem}" in shown.markdown()
    assert (
        samples.draw(truth_only, [], [(80.0, 50.0, 60.0, 70.0)]).tobytes() == truth_only.tobytes()
    )


def test_report_embeds_the_saved_rollouts(items, workflow, tmp_path):
    from vlrollout.train.report import write_report

    reward = shapes_task_reward(items)
    for step in (0, 5, 9):
        episodes = [(items[0], _trajectory(workflow, BOX, step / 10)), (items[1], None)]
        samples.save(tmp_path, samples.collect(step, episodes, workflow, reward, count=2))
    png = (tmp_path / "eval_rollouts/step_9/0.png").read_bytes()
    assert not (tmp_path / "eval_rollouts/step_9/1.png").exists()  # rejected: no image

    report = write_report(tmp_path).read_text()
    section = report[report.index("<h2>Held-out rollouts</h2>") :]
    # The first and the last evaluation: before training and now.
    assert re.findall(r"<h3>step (\d+)</h3>", section) == ["0", "9"]
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', section)
    assert len(embedded) == 2 and base64.b64decode(embedded[1]) == png
    assert "&lt;|box_start|&gt;(500,500)" in section and "reward 0.900" in section
    assert "true [39, 2, 67, 30]; predicted [70, 52, 105, 79]" in section


def test_a_video_item_is_shown_as_its_strip_of_sampled_frames(workflow, tmp_path):
    from tests.workflows.test_video_workflows import write_clip

    clip = str(write_clip(tmp_path / "clip.mp4", frames=4, size=56, fps=2))
    content = [{"type": "video"}, {"type": "text", "text": "Where does the square go?"}]
    item = {"id": "v", "messages": [{"role": "user", "content": content}], "videos": [clip]}
    (shown,) = samples.collect(3, [(item, _trajectory(workflow, "right", 1.0))], workflow, None, 1)
    prepared_clip = workflow.ctx.preprocessor.prepare(item).videos[0]
    assert shown.image is not None
    # One thumbnail per sampled frame, side by side with 2-pixel gaps, the thumbnails' height.
    widths = [t.width for t in prepared_clip.thumbnails]
    assert shown.image.size == (
        sum(widths) + 2 * (len(widths) - 1),
        prepared_clip.thumbnails[0].height,
    )
    left = shown.image.crop((0, 0, widths[0], shown.image.height))
    assert left.tobytes() == prepared_clip.thumbnails[0].convert("RGB").tobytes()
