"""No model output, reward value or data line ends a run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from areal.api.cli_args import GenerationHyperparameters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vlrollout.datasets import load_items
from vlrollout.files import atomic_write_json, item_stem
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.run.report import write_report
from vlrollout.run.runner import Runner
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.tiny.rewards import shapes_task_reward
from vlrollout.workflows import RLVRWorkflow, VisionRLVRWorkflow

REWARD = "tests.workflows.reward_fns.contains_answer"


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_malformed_messages_are_bad_message_rejections(tokenizer, tmp_path):
    rows = [
        {"id": "null", "messages": [{"role": "user", "content": None}], "images": []},
        {"id": "int", "messages": 42, "images": []},
        {
            "id": "part",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, 5]}],
        },
        {"id": "ok", "messages": [{"role": "user", "content": "2+2?"}], "answer": "4"},
    ]
    items = load_items(_jsonl(tmp_path / "d.jsonl", rows))
    answer = tokenizer.encode("4", add_special_tokens=False) + [tokenizer.eos_token_id]
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(), tokenizer)
    runner = Runner(wf, ScriptedEngine([answer]), tokenizer, tmp_path / "out", group_size=2)
    summary = asyncio.run(runner.run(items, progress=False))
    assert summary["items"] == {"total": 4, "done": 4, "accepted": 1, "rejected": 3}
    assert summary["episodes"]["rejected_by_reason"] == {"bad_message": 6}
    details = {r["id"]: r["detail"] for r in summary["rejections"]}
    assert "content is null" in details["null"]
    assert "got an int" in details["int"]
    assert "part 1 is an int" in details["part"]


class _Exploding(RLVRWorkflow):
    async def arun_episode(self, engine, data):
        raise RuntimeError("workflow bug")


def test_a_workflow_exception_is_a_rejection_not_a_crash(tokenizer, tmp_path):
    items = load_items(
        _jsonl(tmp_path / "d.jsonl", [{"id": "a", "messages": "hi"}, {"id": "b", "messages": "x"}])
    )
    wf = _Exploding(REWARD, GenerationHyperparameters(), tokenizer)
    runner = Runner(wf, ScriptedEngine([[1]]), tokenizer, tmp_path / "out", group_size=3)
    summary = asyncio.run(runner.run(items, progress=False))
    assert summary["items"]["rejected"] == 2
    assert summary["episodes"]["rejected_by_reason"] == {"workflow_error": 6}
    assert "RuntimeError: workflow bug" in summary["rejections"][0]["detail"]


def test_report_lists_reversed_and_malformed_boxes_instead_of_drawing_them(tmp_path):
    Image.new("RGB", (200, 100), (0, 128, 0)).save(tmp_path / "a.png")
    item = {
        "id": "g",
        "task": "ground",
        "messages": [{"role": "user", "content": "<image>Where?"}],
        "images": [str(tmp_path / "a.png")],
        "boxes": [[1, 2, 3]],  # a label box with three numbers
    }
    out = tmp_path / "out"
    reversed_box = "<|box_start|>(774,371),(971,6)<|box_end|>"
    unreadable = "<|box_start|>(1,2),(3)<|box_end|>"
    atomic_write_json(
        out / "items" / f"{item_stem('g')}.json",
        {
            "id": "g",
            "status": "accepted",
            "episodes": [
                {"reward": 0.0, "turns": [reversed_box]},
                {"reward": 0.5, "turns": [unreadable]},
            ],
            "rejections": [],
            "generated_tokens": 10,
        },
    )
    reward = GroundingReward("qwen2_vl", "iou")
    page = write_report(out, [item], {"items": {"done": 1, "total": 1}}, reward=reward).read_text()
    assert "could not draw" not in page
    assert "label box [1, 2, 3] refused" in page and "not_4_numbers" in page
    assert "inverted_box" in page  # the first episode's box is listed with the reward's reason
    assert "(3)" in page  # the second episode's unreadable box is listed too
    assert page.count("<img") == 1


# -- property: random completions and random items through run + report ------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2000) | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["role", "content", "type", "text", "url"]), children)
    ),
    max_leaves=10,
)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}),
    st.fixed_dictionaries({"type": st.just("image")}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": st.text()})}
    ),
    _json,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"])},
    optional={"content": st.one_of(st.text(max_size=20), st.lists(_part, max_size=3), _json)},
)
_box_text = st.builds(
    lambda a, b, c, d: f"<|box_start|>({a},{b}),({c},{d})<|box_end|>",
    *[st.integers(-100, 2000)] * 4,
)
_completion = st.lists(
    st.one_of(st.text(max_size=12), _box_text, st.sampled_from(["3", "<|box_start|>(1,2)"])),
    max_size=3,
).map("".join)


@st.composite
def _items(draw, image: str):
    items = []
    for i in range(draw(st.integers(1, 4))):
        item = {
            "id": draw(st.text(min_size=1, max_size=12)) + f"#{i}",
            "task": draw(st.sampled_from(["count", "ground", "caption", "other"])),
            "messages": draw(
                st.one_of(
                    st.just([{"role": "user", "content": "<image>How many?"}]),
                    st.lists(_message, max_size=3),
                    _json,
                )
            ),
            "images": draw(
                st.one_of(
                    st.just([image]), st.lists(st.sampled_from([image, "x.png", "AAAA"])), _json
                )
            ),
        }
        for key in ("answer", "boxes", "captions"):
            if draw(st.booleans()):
                item[key] = draw(
                    st.one_of(
                        _json, st.lists(st.lists(st.integers(0, 200), max_size=5), max_size=2)
                    )
                )
        items.append(item)
    return items


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_items_and_completions_never_end_a_run(
    tokenizer, qwen2vl_processor, tmp_path_factory, data
):
    folder = tmp_path_factory.mktemp("prop")
    Image.new("RGB", (56, 56), (200, 30, 30)).save(folder / "a.png")
    rows = data.draw(_items(str(folder / "a.png")))
    completions = data.draw(st.lists(_completion, min_size=1, max_size=6))
    items = load_items(_jsonl(folder / "d.jsonl", rows))
    eos = tokenizer.eos_token_id
    script = [tokenizer.encode(c, add_special_tokens=False)[:40] + [eos] for c in completions]
    wf = VisionRLVRWorkflow(
        shapes_task_reward(items), GenerationHyperparameters(), tokenizer, qwen2vl_processor
    )
    out = folder / "out"
    group = 2
    summary = asyncio.run(
        Runner(wf, ScriptedEngine(script), tokenizer, out, group_size=group).run(
            items, progress=False
        )
    )
    assert summary["items"]["done"] == len(items)
    episodes = summary["episodes"]
    assert episodes["accepted"] + episodes["rejected"] == group * len(items)
    page = write_report(out, items, summary, processor=qwen2vl_processor).read_text()
    assert "could not draw" not in page
    assert page.count("<section>") == len(items)


def test_a_data_file_with_bad_lines_runs_to_the_end(tmp_path, capsys):
    """Bad lines (not JSON, not an object, a repeated id) are rejected items with their reason;
    the good lines run, the report is written and the exit status is 0."""
    import json as _json

    from vlrollout.cli import main

    repo = Path(__file__).resolve().parents[2]
    good = (repo / "assets" / "samples" / "data.jsonl").read_text().splitlines()[:2]
    data = tmp_path / "d.jsonl"
    first_id = _json.loads(good[0])["id"]
    data.write_text("\n".join([good[0], "{oops", "[1, 2]", good[1], good[0]]) + "\n")
    (tmp_path / "images").symlink_to(repo / "assets" / "samples" / "images")  # relative paths
    out = tmp_path / "out"
    code = main(
        ["run", "--data", str(data), "--model", str(repo / "assets" / "tiny-qwen2vl")]
        + ["--output", str(out), "--group-size", "1", "--max-new-tokens", "4", "--no-progress"]
    )
    assert code == 0, capsys.readouterr().err
    summary = _json.loads((out / "summary.json").read_text())
    assert summary["items"] == {"total": 5, "done": 5, "accepted": 2, "rejected": 3}
    reasons = {r["id"]: r["reason"] for r in summary["rejections"]}
    assert reasons == {
        "line-2": "bad_json",
        "line-3": "bad_item",
        f"{first_id}@line-5": "duplicate_id",
    }
    assert (out / "report.html").is_file()
    assert f"{first_id}@line-5" in (out / "report.html").read_text()
