"""report.html: the metric table at the top, every scored item with its image (true and predicted
boxes drawn), prediction and truth, worst first, and every rejected item with its reason."""

from __future__ import annotations

import base64
import io
import re
import statistics

from PIL import Image

from vlrollout.eval.report import write_report
from vlrollout.eval.runner import evaluate_items
from vlrollout.eval.tasks import ItemScore
from vlrollout.report_drawing import GT_COLOUR, episode_colour

from .test_runner import ScriptedPredictor


class BoxTask:
    """Scores the IoU-free toy metric ``hit`` = the completion's number; boxes in details."""

    name = "boxes"
    prompt = "{expression}"
    primary = "hit"
    correct_key = "hit"

    def check_item(self, item):
        return None if "boxes" in item else "no 'boxes' field"

    def score(self, item, completion, geometry, family):
        return ItemScore(
            id=item["id"],
            split="all",
            values={"hit": float(completion)},
            details={
                "prediction": completion,
                "pred_boxes": [[2, 2, 20, 20]],
                "true_boxes": item["boxes"],
                "reason": None,
            },
        )

    def aggregate(self, scores, items):
        return {"hit": statistics.fmean(s.values["hit"] for s in scores)}


def _pixels(page: str) -> list[Image.Image]:
    found = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    return [Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB") for b in found]


def test_report_shows_every_item_worst_first_and_the_rejected_ones(tmp_path):
    picture = tmp_path / "p.png"
    Image.new("RGB", (64, 48), "white").save(picture)
    items = [
        {
            "id": f"item-{i}",
            "images": [str(picture)],
            "boxes": [[30, 10, 60, 40]],
            "messages": [{"role": "user", "content": [{"type": "image"}, f"find box {i}"]}],
        }
        for i in range(3)
    ] + [{"id": "lost", "images": [str(picture)]}]
    predictor = ScriptedPredictor({"item-0": ["0.5"], "item-1": ["0.1"], "item-2": ["0.9"]})
    task = BoxTask()
    result = evaluate_items(
        task, predictor, items, tmp_path / "out", progress=False, family="qwen2_vl"
    )
    page = write_report(tmp_path / "out", result, items, correct_key="hit").read_text()

    assert page.index("<table") < page.index("item-1")  # the metric table comes first
    order = [page.index(f"<h3>item-{i}") for i in (1, 0, 2)]
    assert order == sorted(order)  # lowest hit first
    assert "lost" in page and "not_scorable" in page and "no &#x27;boxes&#x27; field" in page
    assert "[[30, 10, 60, 40]]" in page  # the truth, next to the prediction
    assert "<b>prompt</b> find box 1" in page
    assert "lowest hit first" in page

    colours = [{c for _, c in img.getcolors(1 << 16)} for img in _pixels(page)]
    assert len(colours) == 3
    assert all(GT_COLOUR in c and episode_colour(0) in c for c in colours)


class CorpusTask(BoxTask):
    """A task whose headline metric exists only over a set (as CIDEr-D): items rank by their
    own value."""

    primary = "corpus"
    correct_key = None

    def aggregate(self, scores, items):
        return {"corpus": 1.0, **super().aggregate(scores, items)}


def test_items_rank_by_their_own_value_when_the_headline_is_a_corpus_metric(tmp_path):
    items = [{"id": f"item-{i}", "boxes": [[1, 1, 5, 5]]} for i in range(3)]
    predictor = ScriptedPredictor({"item-0": ["0.5"], "item-1": ["0.9"], "item-2": ["0.1"]})
    result = evaluate_items(
        CorpusTask(), predictor, items, None, progress=False, family="qwen2_vl", bootstrap=0
    )
    page = write_report(tmp_path, result, items, pictured=2).read_text()
    assert "lowest hit first" in page
    order = [page.index(f"<h3>item-{i}") for i in (2, 0)] + [page.index("<td>item-1</td>")]
    assert order == sorted(order) and "<h3>item-1" not in page  # beyond 2: a row, no picture
    assert "1 more items, without pictures" in page
    assert "<b>corpus</b>" in page and "no image" in page
