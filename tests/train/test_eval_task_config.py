"""The training config's evaluation and data keys: ``vlrollout.eval_task`` and the data-reading
keys reach the item loader for both files, the held-out file gets the task's prompt, and the keys a
user may try for the held-out file are answered with AReaL's ``valid_dataset.path``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from vlrollout.datasets import LOAD_ERROR
from vlrollout.errors import ConfigError
from vlrollout.readers.prompts import TASK_PROMPTS
from vlrollout.train.config import load_config
from vlrollout.train.data import load_data

GROUNDING = str(Path(__file__).resolve().parents[2] / "examples" / "train_grounding.yaml")


def _file(folder: Path, name: str, rows: list[dict]) -> Path:
    Image.new("RGB", (20, 20)).save(folder / "dot.png")
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(ident: str, phrase: str) -> dict:
    return {"id": ident, "images": ["dot.png"], "bbox": [[1, 1, 5, 5]], "phrase": phrase}


def _config(tmp_path, *settings):
    train = _file(tmp_path, "train.jsonl", [_row("t0", "the dot")])
    held_out = [_row("v0", "a dot"), {"id": "v1", "images": ["missing.png"], "phrase": "x"}]
    valid = _file(tmp_path, "valid.jsonl", held_out)
    return load_config(
        GROUNDING,
        [
            f"vlrollout.output={tmp_path / 'run'}",
            f"train_dataset.path={train}",
            f"valid_dataset.path={valid}",
            "+vlrollout.data_map={expression: phrase, boxes: bbox}",
            *settings,
        ],
    )


def _text(item: dict) -> str:
    return item["messages"][0]["content"][-1]["text"]


def test_the_held_out_file_is_read_as_vlrollout_eval_reads_it(tmp_path):
    train, held_out = load_data(_config(tmp_path, "vlrollout.eval_task=refcoco"))
    assert [(t["id"], t["expression"], t["boxes"]) for t in train] == [
        ("t0", "the dot", [[1, 1, 5, 5]])
    ]
    assert "messages" not in train[0]  # no prompt set: the training file is read as it is
    assert _text(held_out[0]) == TASK_PROMPTS["refcoco"].format(expression="a dot")
    # The unreadable row stays, for the evaluator to count with its reason.
    (unreadable,) = [it for it in held_out if LOAD_ERROR in it]
    assert "valid.jsonl line 2: field bbox" in unreadable[LOAD_ERROR]["detail"]


def test_a_prompt_applies_to_both_files_and_without_a_task_bad_rows_are_dropped(tmp_path):
    train, held_out = load_data(_config(tmp_path, "vlrollout.prompt='Where is {expression}?'"))
    assert [_text(it) for it in train + held_out] == ["Where is the dot?", "Where is a dot?"]
    assert not any(LOAD_ERROR in it for it in held_out)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("vlrollout.eval_task=refcocog", "vlrollout.eval_task must be null or one of refcoco, "),
        ("vlrollout.data_format=csv", "vlrollout.data_format must be null"),
        ("vlrollout.eval_box_format=qwen9", "vlrollout.eval_box_format: unknown box format"),
        (
            "vlrollout.eval_path=x.jsonl",
            "the held-out file is AReaL's valid_dataset.path, not vlrollout.eval_path: pass "
            "+valid_dataset.type=rl +valid_dataset.path=FILE",
        ),
    ],
)
def test_bad_or_misplaced_evaluation_keys_are_one_line_errors(tmp_path, setting, message):
    with pytest.raises(ConfigError) as caught:
        load_config(GROUNDING, [f"vlrollout.output={tmp_path}", setting])
    assert message in str(caught.value)


def test_a_config_without_a_valid_dataset_section_is_told_how_to_add_it(tmp_path):
    """The recipes carry an empty valid_dataset section; a config of one's own may not, and hydra
    cannot set a key under a section the file leaves out."""
    text = Path(GROUNDING).read_text()
    section = re.search(r"^valid_dataset:.*?\n(?=\S)", text, re.S | re.M)
    assert section is not None
    config = tmp_path / "no_valid.yaml"
    config.write_text(text.replace(section.group(0), ""))
    with pytest.raises(ConfigError) as caught:
        load_config(str(config), [f"vlrollout.output={tmp_path}", "valid_dataset.path=x.jsonl"])
    message = "no valid_dataset section to set valid_dataset.path in: pass +valid_dataset.type=rl"
    assert message in str(caught.value)


def test_box_format_reaches_the_training_box_reward():
    """The tiny grounding model (family qwen3_vl) writes Qwen2-VL boxes: without
    ``vlrollout.box_format`` the built-in ``iou`` read them as qwen3_vl JSON and scored every
    completion 0."""
    from vlrollout.train.rewards import build_rewards

    items = [{"id": "a", "task": "ground", "boxes": [[5, 5, 27, 27]]}]
    geo = [{"original_width": 112, "original_height": 112, "model_width": 112, "model_height": 112}]
    box = "<|box_start|>(45,45),(241,241)<|box_end|>"
    model = "assets/tiny-qwen3vl-ground"
    family, _ = build_rewards("iou", "giou", items, items, model=model)
    written, held_out = build_rewards(
        "iou", "giou", items, items, model=model, written_as="qwen2_vl"
    )
    assert family("p", box, [], [], boxes=[[5, 5, 27, 27]], geometry=geo) == 0.0
    assert written("p", box, [], [], boxes=[[5, 5, 27, 27]], geometry=geo) > 0.99
    assert held_out("p", box, [], [], boxes=[[5, 5, 27, 27]], geometry=geo) > 0.99


def test_a_box_format_no_reward_reads_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="vlrollout.box_format applies to the box and point"):
        load_config(
            "examples/train_grounding.yaml",
            [f"vlrollout.output={tmp_path}", "vlrollout.box_format=qwen2_vl"],
        )
