"""Training pieces: answer-only labels, the per-example loss, the schedule and a smoke run."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, AutoProcessor

from vlrollout.tiny.evaluate import (
    IGNORE_INDEX,
    box_iou,
    encode_batch,
    score_completions,
)
from vlrollout.tiny.rewards import shapes_task_reward
from vlrollout.tiny.synthetic import IMAGE_GRIDS, answer_with_cell, generate_items
from vlrollout.tiny.train import (
    answer_loss,
    lr_at,
    main,
    mix_at,
    parse_args,
    parse_mix,
    parse_phases,
    progress_at,
)


def test_labels_cover_exactly_the_solution_and_im_end(qwen2vl_processor):
    tok = qwen2vl_processor.tokenizer
    items = generate_items("mix", 6, seed=0)
    side = tok.padding_side
    batch = encode_batch(qwen2vl_processor, items, with_solution=True)
    assert tok.padding_side == side  # the shared processor is not mutated
    assert batch["labels"].shape == batch["input_ids"].shape
    for row, item in zip(batch["labels"], items, strict=True):
        kept = row[row != IGNORE_INDEX]
        assert tok.decode(kept, skip_special_tokens=False) == item["solution"] + "<|im_end|>"
        # left padding: the answer is the tail of the row
        assert (row[-len(kept) :] != IGNORE_INDEX).all()
    prompt_only = encode_batch(qwen2vl_processor, items, with_solution=False)
    assert "labels" not in prompt_only
    assert (prompt_only["input_ids"] == 12).sum() == (batch["input_ids"] == 12).sum()


def test_answer_loss_ignores_prompt_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.full((2, 5), IGNORE_INDEX)
    labels[0, 3:] = torch.tensor([1, 2])
    labels[1, 4] = 3
    base = answer_loss(logits, labels)
    assert base.shape == (2,)
    changed = logits.clone()
    changed[:, :2] += 5.0  # positions whose next token is not an answer token
    assert torch.allclose(answer_loss(changed, labels), base)
    # per-example mean: example 1's single token is its whole loss
    want = torch.nn.functional.cross_entropy(logits[1, 3:4], torch.tensor([3]))
    assert torch.allclose(base[1], want)


def test_lr_schedule_progress_and_mix_validation():
    args = parse_args(
        ["--steps", "100", "--warmup", "10", "--lr", "1e-3", "--min-lr-ratio", "0.1"]
        + ["--max-minutes", "0"]
    )
    assert lr_at(0, 0.0, args) == pytest.approx(1e-4)  # warm-up
    assert lr_at(10, 0.0, args) == pytest.approx(1e-3)
    assert lr_at(50, 0.5, args) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    assert lr_at(99, 1.0, args) == pytest.approx(1e-4)
    assert progress_at(50, 1e6, args) == 0.5  # no time cap: steps only
    capped = parse_args(["--steps", "100", "--max-minutes", "1"])
    assert progress_at(10, 45.0, capped) == pytest.approx(0.75)  # time runs out first
    assert progress_at(90, 6.0, capped) == pytest.approx(0.9)
    assert parse_mix("count=1,ground=0.5") == {"count": 1.0, "ground": 0.5}
    phases = parse_phases(["0.1:count=1", "0.3:count=1,ground=1"])
    final = {"caption": 1.0}
    assert mix_at(0.05, phases, final) == {"count": 1.0}
    assert mix_at(0.1, phases, final) == {"count": 1.0, "ground": 1.0}
    assert mix_at(0.5, phases, final) == final
    with pytest.raises(ValueError, match="increase"):
        parse_phases(["0.3:count=1", "0.1:ground=1"])
    with pytest.raises(ValueError, match="unknown task"):
        parse_mix("detect=1")


def test_metric_helpers():
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert box_iou([0, 0, 10, 10], [10, 0, 20, 10]) == 0.0
    assert box_iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(1 / 3)


def test_smoke_training_decreases_loss(tmp_path):
    out = tmp_path / "tiny"
    record = main(
        [
            "--steps",
            "20",
            "--out",
            str(out),
            "--eval-per-task",
            "4",
            "--log-every",
            "5",
            "--warmup",
            "5",
            "--max-minutes",
            "0",
            "--batch-size",
            "16",
        ]
    )
    curve = [entry[1] for entry in record["loss_curve"]]
    assert curve[-1] < curve[0] - 1.0, curve
    saved = json.loads((out / "TRAINING.json").read_text())
    assert saved["final"] and saved["steps_done"] == 20
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


def test_count_accuracy_reads_the_count_as_the_reward_does():
    """Evaluation reads a count with the reward's reader (the last count, number words included),
    so a completion scores in evaluation as it does in RL."""
    items = [{"id": f"c{n}", "task": "count", "answer": n, "solution": str(n)} for n in (3, 4, 2)]
    completions = ["1 row of 3 circles", "3 shapes? No: four", "2"]
    reward = shapes_task_reward(items)
    assert [reward("p", c, [], [], **it) for it, c in zip(items, completions, strict=True)] == [
        1.0,
        1.0,
        1.0,
    ]
    assert score_completions(items, completions, {})["count"]["accuracy"] == 1.0
    wrong = ["3 circles in 1 row", "four, or 3", "none"]
    assert [reward("p", c, [], [], **it) for it, c in zip(items, wrong, strict=True)] == [
        0.0,
        0.0,
        0.0,
    ]
    assert score_completions(items, wrong, {})["count"]["accuracy"] == 0.0


def test_a_cell_answer_names_the_cell_that_holds_the_target():
    """Each shape lies inside one grid cell; the cell answer is that cell, column digit first."""
    named = set()
    for item in generate_items("ground", 200, seed=3):
        cell = answer_with_cell(item)
        col, row = int(cell["solution"][0]), int(cell["solution"][1])
        (width, height), (x1, y1, x2, y2) = item["image_size"], item["boxes"][0]
        cols, rows = IMAGE_GRIDS[(width, height)]
        cw, ch = width // cols, height // rows
        assert col * cw <= x1 < x2 <= (col + 1) * cw and row * ch <= y1 < y2 <= (row + 1) * ch
        assert len(cell["solution"]) == 2 and cell["task"] == "cell"
        assert cell["images"] == item["images"]
        asked = cell["messages"][0]["content"][1]["text"]
        assert item["object"] in asked and asked != item["messages"][0]["content"][1]["text"]
        named.add((col, row))
    assert len(named) == 16  # every cell of the 4x4 grid is named by some item
    assert parse_mix("cell=1,ground=1") == {"cell": 1.0, "ground": 1.0}


def test_training_can_start_from_a_saved_model_and_train_on_cell_answers(tmp_path):
    common = ["--eval-per-task", "2", "--max-minutes", "0", "--batch-size", "4", "--log-every", "1"]
    first = tmp_path / "first"
    main(["--steps", "2", "--out", str(first), *common])
    # No steps: the saved weights are the initial ones, so they must equal the --init model's.
    again = tmp_path / "again"
    record = main(["--init", str(first), "--steps", "0", "--out", str(again), *common])
    assert record["recipe"]["init"] == str(first)
    a, b = load_file(first / "model.safetensors"), load_file(again / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "fine-tuned" in (again / "README.md").read_text()
    cell = main(
        ["--init", str(first), "--steps", "2", "--mix", "cell=1", "--out", str(tmp_path / "c")]
        + common
    )
    assert cell["steps_done"] == 2 and cell["mix"] == {"cell": 1.0}
    with pytest.raises(SystemExit, match="no saved model"):
        main(["--init", str(tmp_path / "missing"), "--out", str(tmp_path / "y")])
    with pytest.raises(SystemExit, match="not with --init"):
        main(["--init", str(first), "--rope-theta", "2", "--out", str(tmp_path / "x")])


def test_a_qwen3_vl_model_sees_one_merged_token_per_grid_cell(tmp_path):
    out = tmp_path / "q3"
    common = ["--eval-per-task", "1", "--max-minutes", "0", "--batch-size", "2"]
    record = main(["--family", "qwen3_vl", "--steps", "1", "--out", str(out), *common])
    assert record["architecture"] == "Qwen3VLForConditionalGeneration"
    assert record["config"]["vision"]["num_position_embeddings"] == 64
    processor = AutoProcessor.from_pretrained(out)
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    merge = model.config.vision_config.spatial_merge_size
    for (width, height), (cols, rows) in IMAGE_GRIDS.items():
        image = Image.new("RGB", (width, height))
        grid = processor.image_processor(images=[image])["image_grid_thw"][0].tolist()
        assert grid == [1, rows * merge, cols * merge]
    with pytest.raises(SystemExit, match="for --family qwen2_vl"):
        main(["--family", "qwen3_vl", "--mrope-section", "2,7,7", "--out", str(tmp_path / "x")])
