"""What the report shows: every image, rejections once with their count, boxes
tied to their completion, reward histograms per task and the share of all-equal GRPO groups."""

from __future__ import annotations

import base64
import io
import re

from PIL import Image

from vlrollout.charts import histogram
from vlrollout.files import atomic_write_json, item_stem
from vlrollout.geometry import ImageGeometry
from vlrollout.report_drawing import EPISODE_COLOURS, hex_colour
from vlrollout.rewards.combine import ByTask
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.run.report import write_report
from vlrollout.run.runner import summarize


def _outcome(out, item_id, episodes, rejections=()):
    atomic_write_json(
        out / "items" / f"{item_stem(item_id)}.json",
        {
            "id": item_id,
            "status": "accepted" if episodes else "rejected",
            "episodes": episodes,
            "rejections": list(rejections),
            "generated_tokens": 1,
        },
    )


def _images(page: str) -> list[Image.Image]:
    return [
        Image.open(io.BytesIO(base64.b64decode(m))).convert("RGB")
        for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    ]


def _png_b64(colour) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_every_prompt_image_is_shown_whatever_its_form(tmp_path):
    Image.new("RGB", (30, 20), (255, 255, 255)).save(tmp_path / "a.png")
    Image.new("RGB", (30, 20), (0, 0, 0)).save(tmp_path / "b.png")
    item = {
        "id": "multi",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "image"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{_png_b64((9, 9, 9))}"},
                    },
                    {"type": "image", "image": _png_b64((200, 0, 0))},
                    {"type": "text", "text": "compare"},
                ],
            }
        ],
        "images": [str(tmp_path / "a.png"), str(tmp_path / "b.png")],
    }
    out = tmp_path / "out"
    _outcome(out, "multi", [{"reward": 1.0, "turns": ["same"]}])
    page = write_report(out, [item], {}).read_text()
    assert "no image" not in page
    assert [f"image {k}" in page for k in (1, 2, 3, 4)] == [True] * 4
    assert page.count("<img") == 4


def test_each_rejection_is_listed_once_with_its_count(tmp_path):
    item = {"id": "r", "messages": "x"}
    out = tmp_path / "out"
    rejection = {"item": "item r", "reason": "image_decode", "detail": "corrupt image"}
    other = {"item": "item r", "reason": "reward_timeout", "detail": "15 s"}
    _outcome(out, "r", [], [rejection] * 4 + [other])
    page = write_report(out, [item], {}).read_text()
    assert page.count("corrupt image") == 1 and "×4" in page
    assert page.count("15 s") == 1 and "×1" in page


def test_predicted_boxes_have_their_completions_colour(tmp_path):
    Image.new("RGB", (100, 100), (255, 255, 255)).save(tmp_path / "w.png")
    item = {"id": "g", "messages": "<image>where", "images": [str(tmp_path / "w.png")]}
    out = tmp_path / "out"
    episodes = [
        {"reward": 0.1, "turns": ["<|box_start|>(100,100),(400,400)<|box_end|>"]},
        {"reward": 0.2, "turns": ["<|box_start|>(600,600),(900,900)<|box_end|>"]},
    ]
    _outcome(out, "g", episodes)
    page = write_report(out, [item], {}, reward=GroundingReward("qwen2_vl", "iou")).read_text()
    (picture,) = _images(page)
    colours = {c for _, c in picture.getcolors(maxcolors=100000)}
    assert EPISODE_COLOURS[0] in colours and EPISODE_COLOURS[1] in colours
    # The first episode's box lies in the top-left quarter, the second's in the bottom-right.
    w, h = picture.size
    tl = picture.crop((0, 0, w // 2, h // 2)).getcolors(maxcolors=100000)
    br = picture.crop((w // 2, h // 2, w, h)).getcolors(maxcolors=100000)
    assert EPISODE_COLOURS[0] in {c for _, c in tl} and EPISODE_COLOURS[0] not in {c for _, c in br}
    assert EPISODE_COLOURS[1] in {c for _, c in br} and EPISODE_COLOURS[1] not in {c for _, c in tl}
    for i in (0, 1):  # the table row of each completion carries the same colour
        assert f"background:{hex_colour(EPISODE_COLOURS[i])}'></span>{i}</td>" in page


def test_overview_has_histograms_per_task_and_the_all_equal_group_share(tmp_path):
    out = tmp_path / "out"
    items = [
        {"id": "a", "task": "count", "messages": "x"},
        {"id": "b", "task": "count", "messages": "x"},
        {"id": "c", "task": "ground", "messages": "x"},
    ]
    _outcome(out, "a", [{"reward": 1.0, "turns": ["1"]}, {"reward": 1.0, "turns": ["1"]}])
    _outcome(out, "b", [{"reward": 0.0, "turns": ["1"]}, {"reward": 1.0, "turns": ["2"]}])
    _outcome(out, "c", [{"reward": 0.0, "turns": ["1"]}, {"reward": 0.0, "turns": ["1"]}])
    summary = summarize(out, items, 0.0)
    assert summary["groups"] == {"groups": 3, "all_equal": 2, "fraction_all_equal": 2 / 3}
    page = write_report(out, items, summary).read_text()
    assert "2/3 GRPO groups (67%) have all-equal rewards" in page
    assert page.count('class="hist"') == 2  # one per task
    assert histogram([1.0, 1.0, 0.0, 1.0], bins=4) == (0.0, 1.0, [1, 0, 0, 3])
    assert histogram([0.0, 10.0], bins=2) == (0.0, 10.0, [1, 1])  # CIDEr-D's range


def test_boxes_are_read_as_the_reward_reads_them_in_the_frame_the_model_saw(tmp_path):
    """A Qwen2.5-VL reward reads JSON boxes in pixels of the resized image: the report draws
    them through the same parser and the item's prepared geometry (a 400 x 200 image seen at
    200 x 100), not as Qwen2-VL text in the original's pixels."""
    Image.new("RGB", (400, 200), (255, 255, 255)).save(tmp_path / "w.png")
    item = {
        "id": "g",
        "task": "ground",
        "messages": "<image>where",
        "images": [str(tmp_path / "w.png")],
    }
    out = tmp_path / "out"
    _outcome(out, "g", [{"reward": 0.5, "turns": ['{"bbox_2d": [50, 25, 100, 75]}']}])

    class Prepared:
        geometry = [ImageGeometry.resized(400, 200, 200, 100)]

    reward = ByTask({"ground": GroundingReward("qwen2_5_vl", "iou")})
    page = write_report(out, [item], {}, reward=reward, prepare=lambda _: Prepared()).read_text()
    (picture,) = _images(page)
    scale = picture.size[0] / 400
    # drawn at [100, 50, 200, 150] of the original: its right edge, not the model-frame box's
    inside = picture.getpixel((round(200 * scale) - 1, round(100 * scale)))
    outside = picture.getpixel((round(100 * scale) - 1, round(50 * scale)))
    assert inside == EPISODE_COLOURS[0] and outside == (255, 255, 255)
    assert "boxes not drawn" not in page


def test_items_past_the_pictured_ones_are_rows_so_a_large_run_gives_a_page_a_browser_opens(
    tmp_path,
):
    Image.new("RGB", (30, 20), (40, 90, 200)).save(tmp_path / "a.png")
    out = tmp_path / "out"
    items = []
    for k in range(5):
        items.append(
            {"id": f"i{k}", "task": "count", "messages": "x", "images": [str(tmp_path / "a.png")]}
        )
        rejection = {"item": f"item i{k}", "reason": "reward_error", "detail": "bad"}
        _outcome(out, f"i{k}", [{"reward": 0.25 * k, "turns": [f"answer {k}"]}], [rejection])
    page = write_report(out, items, {}, pictured=2).read_text()
    assert page.count("<img") == 2 and "answer 1" in page and "answer 2" not in page
    assert "3 more items, without pictures" in page
    rows = re.findall(r"<tr><td>(i\d)</td><td>count</td><td>1 of 2</td><td>([\d.]+)</td>", page)
    assert rows == [("i2", "0.500"), ("i3", "0.750"), ("i4", "1.000")]
    assert page.count("reward_error ×1") == 3  # each unpictured item's rejections, counted
