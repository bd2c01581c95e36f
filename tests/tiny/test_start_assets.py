"""The training recipes' starting checkpoints: ``assets/tiny-qwen3vl-ground`` (grounding) and
``assets/tiny-qwen3vl-count`` (counting, made from the grounding one). Each has the code-built
tokenizer and image grid and a training record saying how it was made, and each has the skill its
recipe trains, well above chance, where the shipped Qwen2-VL model does not localise (offline
loading: ``test_asset.py``).

Regenerate them with ``make tiny-ground`` and ``make tiny-count``.
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
GROUND = ROOT / "assets" / "tiny-qwen3vl-ground"
COUNT = ROOT / "assets" / "tiny-qwen3vl-count"
ASSETS = [pytest.param(GROUND, id="ground"), pytest.param(COUNT, id="count")]


def _load(asset: Path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoProcessor.from_pretrained(asset), AutoModelForImageTextToText.from_pretrained(asset)


@pytest.mark.parametrize("asset", ASSETS)
def test_weights_at_most_20_mb(asset):
    weights = list(asset.glob("*.safetensors"))
    assert weights and sum(p.stat().st_size for p in weights) <= 20 * 1024 * 1024


@pytest.mark.parametrize("asset", ASSETS)
def test_tokenizer_and_image_grid_are_the_tiny_models(asset):
    processor, model = _load(asset)
    tok = processor.tokenizer
    assert tok.get_vocab() == build_bpe_tokenizer().get_vocab()
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    from PIL import Image

    for (width, height), (cols, rows) in IMAGE_GRIDS.items():
        grid = processor.image_processor(images=[Image.new("RGB", (width, height))])
        assert grid["image_grid_thw"][0].tolist() == [1, 2 * rows, 2 * cols]


def test_the_ground_record_says_how_it_was_trained():
    record = json.loads((GROUND / "TRAINING.json").read_text())
    stage1 = json.loads((GROUND / "TRAINING-stage1.json").read_text())
    assert record["final"] and stage1["final"]
    assert stage1["architecture"] == record["architecture"] == "Qwen3VLForConditionalGeneration"
    assert record["recipe"]["init"] == "runs/tiny-ground-stage1"
    assert "cell" in record["mix"] and record["metrics"]["ground"]["n"] == 200


def test_the_count_record_says_it_was_made_from_the_ground_checkpoint():
    record = json.loads((COUNT / "TRAINING.json").read_text())
    assert record["final"] and record["architecture"] == "Qwen3VLForConditionalGeneration"
    assert record["recipe"]["init"] == "assets/tiny-qwen3vl-ground"
    assert record["mix"] == {"count": 1.0} and record["metrics"]["count"]["n"] == 200


def test_the_ground_checkpoint_localises_on_fresh_one_shape_items():
    """Greedy boxes on 48 one-shape items of a seed used nowhere else: the box centre is in the
    target's cell far more often than a random cell (about 0.08) or the best answer that sees
    only the image size (about 0.16) would put it."""
    from vlrollout.tiny.evaluate import greedy_completions

    processor, model = _load(GROUND)
    items = [make_item("ground", 321, i, n_shapes=1) for i in range(48)]
    answers = greedy_completions(model.eval(), processor, items)
    hits = 0
    for item, text in zip(items, answers, strict=True):
        box = parse_qwen2vl_box(text, *item["image_size"])
        target = cell_of(item["boxes"][0], item["image_size"])
        hits += box is not None and cell_of(box, item["image_size"]) == target
    assert hits / len(items) >= 0.25, answers[:4]  # 0.31 (15 of 48) when the asset was made


def test_the_count_checkpoint_counts_on_fresh_items():
    """Greedy counts on 48 items of a seed used nowhere else, read as the count reward reads
    them: far above chance (0.25), and short of perfect, which is what GRPO is left to teach."""
    from vlrollout.tiny.evaluate import greedy_completions
    from vlrollout.tiny.rewards import count_reward

    processor, model = _load(COUNT)
    items = [make_item("count", 321, i) for i in range(48)]
    answers = greedy_completions(model.eval(), processor, items)
    reward = count_reward()
    right = sum(
        reward("", a, [], [], answer=it["answer"]) for it, a in zip(items, answers, strict=True)
    )
    assert 0.6 <= right / len(items) < 1.0, answers[:4]  # 0.81 (39 of 48) when the asset was made
