"""What ``vlrollout run`` does before the model loads with what the readers made: every reader
placeholder blocks its item under its own reason, and a reward that scores none of the items'
tasks stops the run naming the reward to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrollout.cli import main
from vlrollout.datasets import LOAD_ERROR, LOAD_REASONS
from vlrollout.errors import ConfigError
from vlrollout.readers.sources import unreadable
from vlrollout.rewards.combine import ByTask
from vlrollout.rewards.registry import get_reward
from vlrollout.run.items import BLOCKING, item_problems
from vlrollout.run.main import block_unscored_tasks, check_reward_tasks


def test_every_reader_placeholder_blocks_its_item_under_its_own_reason():
    for reason in LOAD_REASONS:
        item = unreadable("x", reason, "d.json row 2: field image: why")
        blocking = [(r, d) for r, d in item_problems(item) if r in BLOCKING]
        assert blocking == [(reason, "d.json row 2: field image: why")], reason
    with pytest.raises(ValueError, match="placeholder reason 'made_up'"):
        unreadable("x", "made_up", "d")


def _items(*tasks):
    return [{"id": str(k), "messages": "q", "task": t} for k, t in enumerate(tasks)]


def test_a_reward_that_scores_none_of_the_items_tasks_stops_naming_the_reward_to_pass():
    tiny = get_reward("tiny_task", items=[])
    bad = unreadable("z", "bad_box", "d row 3: field bbox: why")  # placeholders are not counted
    with pytest.raises(ConfigError, match=r"count, ground .*\(refcoco: 2 item.*--reward iou$"):
        check_reward_tasks(tiny, [*_items("refcoco", "refcoco"), bad], "tiny_task")
    with pytest.raises(ConfigError, match=r"no task: 1 item.*--reward NAME, e\.g\. iou"):
        check_reward_tasks(tiny, [{"id": "a", "messages": "q"}], "tiny_task")
    with pytest.raises(ConfigError, match="--reward cider_d"):
        check_reward_tasks(tiny, _items("caption"), "tiny_task")
    check_reward_tasks(tiny, _items("refcoco", "count"), "tiny_task")  # some scored: run
    check_reward_tasks(get_reward("count"), _items("refcoco"), "count")  # not routed by task
    assert LOAD_ERROR in bad


def test_items_whose_task_the_reward_does_not_score_are_blocked_before_rolling_out():
    """Their group would be generated only for the reward to refuse every episode: each is
    blocked up front under ``unknown_task`` with the reward's own message and fix."""
    tiny = get_reward("tiny_task", items=[])
    items = [*_items("count", "juggle", ["a", "list"]), unreadable("z", "bad_box", "why")]
    blocked = block_unscored_tasks(tiny, items)
    assert blocked[0] == items[0] and blocked[3] == items[3]  # scored, or already blocked
    (problem,) = [p for p in item_problems(blocked[1]) if p[0] in BLOCKING]
    assert problem[0] == "unknown_task"
    assert "no reward for task='juggle'; known tasks: ['count', 'ground']" in problem[1]
    assert item_problems(blocked[2])[0][0] == "unknown_task"
    assert blocked[1]["messages"] == "q"  # the item itself stays, for the report
    count = get_reward("count")
    assert block_unscored_tasks(count, _items("juggle")) == _items("juggle")  # not routed


def test_an_item_the_run_rejects_for_its_own_content_keeps_that_reason():
    """A media field nothing reads, or a reserved field, on an item without a task: fixing the
    task alone would not make it run, so its own reason is the one reported."""
    tiny = get_reward("tiny_task", items=[])
    items = [
        {"id": "a", "messages": "<image>How many?", "image": "a.png"},
        {"id": "b", "messages": "q", "prompt": "x"},
    ]
    reasons = [
        [r for r, _ in item_problems(item) if r in BLOCKING][0]
        for item in block_unscored_tasks(tiny, items)
    ]
    assert reasons == ["media_field_unsupported", "reserved_field"]


def test_an_item_whose_task_has_no_route_is_rejected_with_the_fix():
    reward = ByTask({"count": lambda *a, **k: 1.0})
    with pytest.raises(ValueError, match=r"task='refcoco'.*--reward iou"):
        reward("p", "3", [], [], task="refcoco")


def test_cider_d_takes_its_document_frequencies_from_the_items_captions():
    captions = [["a red square", "a square"], ["a blue circle"]]
    items = [{"id": str(k), "captions": c} for k, c in enumerate(captions)] + [{"id": "x"}]
    from_items = get_reward("cider_d", items=items)
    given = get_reward("cider_d", corpus=captions)
    assert from_items.cider.num_docs == 2
    reference = given("p", "a red square", [], [], captions=captions[0])
    assert from_items("p", "a red square", [], [], captions=captions[0]) == reference > 0
    with pytest.raises(ValueError, match="no item has any"):
        get_reward("cider_d", items=[{"id": "x"}])


def test_an_item_without_messages_names_its_fix():
    (problem,) = item_problems({"id": "1", "image": "a.jpg", "problem": "Find x.", "answer": "3"})
    assert problem[0] == "bad_message" and "--prompt '{problem}'" in problem[1]
    llava = {"id": "1", "image": "a.jpg", "conversations": [{"from": "human", "value": "?"}]}
    assert "--format llava" in item_problems(llava)[0][1]


def test_a_run_rejects_an_unscored_task_without_rolling_it_out(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    good = json.loads((repo / "assets" / "samples" / "data.jsonl").read_text().splitlines()[0])
    data = tmp_path / "d.jsonl"
    data.write_text(f"{json.dumps(good)}\n{json.dumps({**good, 'id': 'j', 'task': 'juggle'})}\n")
    (tmp_path / "images").symlink_to(repo / "assets" / "samples" / "images")
    out = tmp_path / "out"
    args = ["run", "--data", str(data), "--model", str(repo / "assets" / "tiny-qwen2vl")]
    assert main([*args, "--output", str(out), "--group-size", "2", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["rejected_by_reason"] == {"unknown_task": 2}
    assert summary["tokens_per_s"] is not None
    (rejection,) = {r["detail"] for r in summary["rejections"] if r["id"] == "j"}
    assert "task='juggle'" in rejection
