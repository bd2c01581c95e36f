"""What a ``vlrollout train`` run (``trained_run``: two steps, held-out evaluations at steps 0 and
2, three shown rollouts each) wrote to its trackers, read back with each tracker's own reader and
compared with ``metrics.jsonl``, ``eval.jsonl`` and ``eval_rollouts.jsonl``."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from tests.train.trackers import swanlab_scalars, tensorboard, wandb_history
from vlrollout.tiny.synthetic import generate_items

pytestmark = pytest.mark.slow

SHOWN = 3  # vlrollout.log_rollouts in tests/train/procs.py TRACKERS


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _expected(run) -> dict[str, dict[int, float]]:
    """``{name: {step: value}}``: every number of the step and eval records (nested ``areal``
    stats under ``areal/``; AReaL's ``__count`` keys are not sent)."""
    out: dict[str, dict[int, float]] = {}
    for record in _jsonl(run / "metrics.jsonl") + _jsonl(run / "eval.jsonl"):
        flat = {k: v for k, v in record.items() if k not in ("step", "areal")}
        flat.update({f"areal/{k}": v for k, v in record.get("areal", {}).items()})
        for key, value in flat.items():
            if value is not None and not key.endswith("__count"):
                out.setdefault(key, {})[record["step"]] = value
    return out


def _rollouts(run) -> list[dict]:
    return _jsonl(run / "eval_rollouts.jsonl")


def test_the_run_shows_three_rollouts_per_evaluation(trained_run):
    rollouts = _rollouts(trained_run)
    assert [(r["step"], r["index"]) for r in rollouts] == [
        (step, k) for step in (0, 2) for k in range(SHOWN)
    ]
    items = generate_items("ground", SHOWN, seed=200)  # the held-out set: vlrollout.eval_seed
    whole_boxes = 0
    for r in rollouts:
        item = items[r["index"]]
        assert r["id"] == item["id"] and r["true_boxes"] == item["boxes"]
        assert r["completion"] and (trained_run / r["image"]).is_file()
        numbers = [int(n) for n in re.findall(r"\d+", r["completion"])]
        if len(numbers) == 4:  # Qwen2-VL's 0..1000 box, in the item's pixels
            whole_boxes += 1
            w, h = item["images"][0].size
            x1, y1, x2, y2 = (
                v / 1000 * size for v, size in zip(numbers, (w, h, w, h), strict=True)
            )
            assert r["predicted_boxes"] == [pytest.approx([x1, y1, x2, y2])]
    assert whole_boxes  # the greedy tiny model writes boxes


def test_tensorboard_scalars_are_the_records(trained_run):
    expected = _expected(trained_run)
    events = tensorboard(trained_run / "tensorboard")
    got = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
    assert set(got) == set(expected)
    assert {"reward_mean", "eval/mean", "time/step"} <= set(got)
    assert sorted(got["reward_mean"]) == [1, 2] and sorted(got["eval/mean"]) == [0, 2]
    for tag, by_step in expected.items():  # TensorBoard stores 32-bit floats
        assert got[tag] == {s: float(np.float32(v)) for s, v in by_step.items()}, tag


def test_tensorboard_images_and_text_are_the_shown_rollouts(trained_run):
    events = tensorboard(trained_run / "tensorboard")
    assert sorted(events.Tags()["images"]) == [f"eval_rollouts/{k}" for k in range(SHOWN)]
    items = generate_items("ground", SHOWN, seed=200)
    rollouts = {(r["step"], r["index"]): r for r in _rollouts(trained_run)}
    for k in range(SHOWN):
        images = events.Images(f"eval_rollouts/{k}")
        assert [i.step for i in images] == [0, 2]
        texts = events.Tensors(f"eval_rollouts/{k}/text_summary")
        for image, text in zip(images, texts, strict=True):
            assert (image.width, image.height) == items[k]["images"][0].size
            record = rollouts[(image.step, k)]
            sent = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
            saved = np.asarray(Image.open(trained_run / record["image"]))
            assert (sent == saved).all()
            markdown = text.tensor_proto.string_val[0].decode()
            assert f"item {record['id']} (ground): reward {record['reward']:.3f}" in markdown
            assert all(f"    {line}" in markdown for line in record["completion"].split("\n"))


def _run_folder(run, pattern: str):
    (folder,) = (run / "areal" / "logs").glob(f"*/vlrollout-train/grounding/{pattern}")
    return folder


def test_wandb_offline_run_has_the_records_and_images(trained_run):
    expected = _expected(trained_run)
    run = _run_folder(trained_run, "wandb/offline-run-*")
    history = wandb_history(run)
    assert sorted(history) == [0, 1, 2]
    for key in ("reward_mean", "entropy", "eval/mean", "eval/n", "areal/ppo_actor/update/lr"):
        assert {s: history[s][key] for s in history if key in history[s]} == expected[key], key
    captions = {r["step"]: [] for r in _rollouts(trained_run)}
    for r in _rollouts(trained_run):
        captions[r["step"]].append(f"item {r['id']} (ground): reward {r['reward']:.3f}")
    for step in (0, 2):
        images = {k.partition(".")[2]: v for k, v in history[step].items() if "eval_rollouts" in k}
        assert images["count"] == SHOWN
        assert [c.split("\n")[0] for c in images["captions"]] == captions[step]
        assert all((run / "files" / f).is_file() for f in images["filenames"])
    assert not any("eval_rollouts" in key for key in history[1])  # no evaluation at step 1


def test_swanlab_offline_run_has_the_records_and_images(trained_run):
    expected = _expected(trained_run)
    run = _run_folder(trained_run, "run-*")
    scalars = swanlab_scalars(run)
    for key in ("reward_mean", "eval/mean", "time/rollout"):
        assert {s: v[key] for s, v in scalars.items() if key in v} == pytest.approx(expected[key])
    for step in (0, 2):
        assert len(list(run.glob(f"media/*/image-step{step}-*.png"))) == SHOWN


def test_report_embeds_the_first_and_last_evaluations_rollouts(trained_run):
    report = (trained_run / "report.html").read_text()
    section = report[report.index("<h2>Held-out rollouts</h2>") :]
    assert section.count("<h3>step") == 2 and section.count("data:image/png;base64,") == 2 * SHOWN
