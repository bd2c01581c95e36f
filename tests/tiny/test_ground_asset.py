"""The grounding recipe's starting checkpoint, ``assets/tiny-qwen3vl-ground``: the code-built
tokenizer and image grid, its training record, and that it localises, where the shipped Qwen2-VL
model does not (offline loading: ``test_asset.py``).

Regenerate it with ``make tiny-ground``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrollout.tiny.synthetic import (
    IMAGE_GRIDS,
    cell_of,
    make_item,
    parse_qwen2vl_box,
)
from vlrollout.tiny.tokenizer import build_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets" / "tiny-qwen3vl-ground"


@pytest.fixture(scope="module")
def loaded():
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoProcessor.from_pretrained(ASSET), AutoModelForImageTextToText.from_pretrained(ASSET)


def test_weights_at_most_20_mb():
    weights = list(ASSET.glob("*.safetensors"))
    assert weights and sum(p.stat().st_size for p in weights) <= 20 * 1024 * 1024


def test_tokenizer_and_image_grid_are_the_tiny_models(loaded):
    processor, model = loaded
    tok = processor.tokenizer
    assert tok.get_vocab() == build_bpe_tokenizer().get_vocab()
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    from PIL import Image

    for (width, height), (cols, rows) in IMAGE_GRIDS.items():
        grid = processor.image_processor(images=[Image.new("RGB", (width, height))])
        assert grid["image_grid_thw"][0].tolist() == [1, 2 * rows, 2 * cols]


def test_the_record_says_how_it_was_trained():
    record = json.loads((ASSET / "TRAINING.json").read_text())
    stage1 = json.loads((ASSET / "TRAINING-stage1.json").read_text())
    assert record["final"] and stage1["final"]
    assert stage1["architecture"] == record["architecture"] == "Qwen3VLForConditionalGeneration"
    assert record["recipe"]["init"] == "runs/tiny-ground-stage1"
    assert "cell" in record["mix"] and record["metrics"]["ground"]["n"] == 200


def test_it_localises_on_fresh_one_shape_items(loaded):
    """Greedy boxes on 48 one-shape items of a seed used nowhere else: the box centre is in the
    target's cell far more often than a random cell (about 0.08) or the best answer that sees
    only the image size (about 0.16) would put it."""
    from vlrollout.tiny.evaluate import greedy_completions

    processor, model = loaded
    items = [make_item("ground", 321, i, n_shapes=1) for i in range(48)]
    answers = greedy_completions(model.eval(), processor, items)
    hits = 0
    for item, text in zip(items, answers, strict=True):
        box = parse_qwen2vl_box(text, *item["image_size"])
        target = cell_of(item["boxes"][0], item["image_size"])
        hits += box is not None and cell_of(box, item["image_size"]) == target
    assert hits / len(items) >= 0.25, answers[:4]  # 0.31 (15 of 48) when the asset was made
