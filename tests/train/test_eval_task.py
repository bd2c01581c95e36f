"""The held-out evaluation with ``vlrollout.eval_task``: the task's metrics in ``eval.jsonl``, its
primary metric as ``eval/mean``, rejections counted, the shown rollouts, the log line and the
report's labels (on a stand-in predictor whose boxes are written by hand)."""

from __future__ import annotations

import logging

import pytest
from PIL import Image

from vlrollout.datasets import LOAD_ERROR
from vlrollout.eval.prediction import Prediction
from vlrollout.eval.tasks import get_task
from vlrollout.geometry import ImageGeometry
from vlrollout.jsonl import read_jsonl
from vlrollout.ledger import NothingAccepted
from vlrollout.train.evaluation import HeldOut, TaskEvaluation, logger
from vlrollout.train.loggers import TrainLoggers
from vlrollout.train.report import write_report

TRUE_BOX = [10, 10, 50, 50]  # original pixels of a 100 x 100 image
HIT = "<|box_start|>(100,100),(500,500)<|box_end|>"  # Qwen2-VL's 0-1000 frame: the true box
PART = "<|box_start|>(100,100),(500,200)<|box_end|>"  # its top quarter: IoU 0.25, centre in
MISS = "<|box_start|>(600,600),(900,900)<|box_end|>"  # disjoint: IoU 0, centre outside


class _Written:
    """A predictor answering each item with its ``answers`` (the i-th completion of k)."""

    async def predict(self, item, k):
        geometry = [ImageGeometry(100, 100, 100, 100).to_dict()]
        return Prediction(item["id"], item["answers"][:k], geometry, None)


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _items(tmp_path):
    image = tmp_path / "grey.png"
    Image.new("RGB", (100, 100), (128, 128, 128)).save(image)

    def item(ident, answers):
        return {
            "id": ident,
            "images": [str(image)],
            "boxes": [TRUE_BOX],
            "expression": "the square",
            "messages": "<image>Where is the square?",
            "answers": answers,
        }

    unreadable = {"id": "bad", LOAD_ERROR: {"reason": "bad_row", "detail": "data row 3: bbox"}}
    return [item("a", [HIT, MISS]), item("b", [PART, MISS]), unreadable]


def _held_out(tmp_path, items, repeats=0, shown=2):
    task = TaskEvaluation(get_task("refcoco"), _Written(), family="qwen2_vl")
    return HeldOut(None, None, None, items, None, repeats, shown, tmp_path, task=task)


def test_the_record_holds_the_tasks_metrics_over_the_scored_items(tmp_path):
    held_out = _held_out(tmp_path, _items(tmp_path), repeats=2)
    kept, level = _Kept(), logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.DEBUG)
    try:
        record = held_out.run(4, TrainLoggers())
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
    assert read_jsonl(tmp_path / "eval.jsonl") == [record]
    # Greedy: item a hit (every value 1); item b IoU 0.25 (ACC@0.1 and Center_ACC 1, the other
    # thresholds 0); the unreadable row is not scored.
    expected = {"IoU": 0.625, "ACC@0.1": 1, "ACC@0.3": 0.5, "ACC@0.5": 0.5, "ACC@0.9": 0.5}
    for name, value in {**expected, "Center_ACC": 1}.items():
        assert record[f"eval/{name}"] == pytest.approx(value), name
    assert (record["eval/mean"], record["eval_primary"], record["eval_task"]) == (
        0.5,
        "ACC@0.5",
        "refcoco",
    )
    assert (record["eval/n"], record["eval/rejected"]) == (3, 1)
    # Sampled, 2 per item: IoU a (1 + 0) / 2, b (0.25 + 0) / 2; ACC@0.5 a 1/2, b 0/2; pass@2
    # (from ACC@0.5) is 1 for a, 0 for b.
    assert record["eval_sampled/IoU"] == pytest.approx(0.3125)
    assert record["eval_sampled/mean"] == pytest.approx(0.25)
    assert record["eval_sampled/pass@2"] == pytest.approx(0.5)
    (line,) = [m for m in kept.messages if "held-out eval" in m]
    assert line == (
        "held-out eval at step 4: eval ACC@0.5 0.5000 over 2 items (1 rejected, not scored); "
        "eval_sampled ACC@0.5 0.2500 over 2 items (1 rejected, not scored)"
    )
    shown = read_jsonl(tmp_path / "eval_rollouts.jsonl")
    assert [(r["id"], r["completion"], r["reward"]) for r in shown] == [
        ("a", HIT, 1.0),
        ("b", PART, 0.0),
    ]
    assert shown[0]["true_boxes"] == shown[0]["predicted_boxes"] == [TRUE_BOX]
    assert shown[1]["predicted_boxes"] == [[10, 10, 50, 20]]
    assert (tmp_path / shown[1]["image"]).is_file()


def test_no_scored_item_ends_the_evaluation_with_the_reasons(tmp_path):
    items = _items(tmp_path)[2:]
    with pytest.raises(NothingAccepted, match="bad_row"):
        _held_out(tmp_path, items).run(0, TrainLoggers())
    assert not (tmp_path / "eval.jsonl").exists()


def test_the_report_names_the_tasks_metric(tmp_path):
    held_out = _held_out(tmp_path, _items(tmp_path), shown=0)
    held_out.run(0, TrainLoggers())
    held_out.run(2, TrainLoggers())
    page = write_report(tmp_path).read_text()
    assert "held-out refcoco ACC@0.5" in page
    assert "Held-out greedy refcoco ACC@0.5 at step 2: 0.5 against 0.5" in page
    assert "<th>eval/IoU</th>" in page  # the other metrics in the table
    assert "rejected episode scores 0" not in page  # rejected items are not scored


def test_a_caption_evaluation_records_the_corpus_metric_and_shows_a_per_item_value(tmp_path):
    image = tmp_path / "grey.png"
    Image.new("RGB", (100, 100), (128, 128, 128)).save(image)
    caption = "a red square on a grey field"
    items = [
        {
            "id": i,
            "images": [str(image)],
            "captions": [caption],
            "messages": "<image>Describe.",
            "answers": [answer],
        }
        for i, answer in (("same", caption), ("other", "blue"))
    ]
    task = TaskEvaluation(get_task("caption"), _Written(), family="qwen2_vl")
    record = HeldOut(None, None, None, items, None, 0, 2, tmp_path, task=task).run(
        1, TrainLoggers()
    )
    assert (record["eval_primary"], record["eval/mean"]) == ("CIDEr-D", record["eval/CIDEr-D"])
    assert {"eval/BLEU-4", "eval/ROUGE-L"} <= set(record)
    shown = read_jsonl(tmp_path / "eval_rollouts.jsonl")
    # CIDEr-D has no per-item value: an identical caption shows its sentence BLEU-4, 1.
    first = shown[0]
    assert (first["completion"], first["box_problems"]) == (caption, [])
    assert first["reward"] == pytest.approx(1.0)
