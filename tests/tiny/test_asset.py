"""The committed tiny model and sample set: offline loading, size, ids, and that it was trained.

Regenerate the asset with ``python scripts/train_tiny.py --out assets/tiny-qwen2vl`` and the
samples with ``python -m vlrollout.tiny.synthetic --out assets/samples``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlrollout.tiny.synthetic import SAMPLES_SEED, TASKS, generate_items, read_dataset
from vlrollout.tiny.tokenizer import build_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets" / "tiny-qwen2vl"
SAMPLES = ROOT / "assets" / "samples" / "data.jsonl"


@pytest.fixture(scope="module")
def loaded():
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(ASSET)
    model = Qwen2VLForConditionalGeneration.from_pretrained(ASSET)
    return processor, model


def test_weights_at_most_20_mb():
    weights = list(ASSET.glob("*.safetensors"))
    assert weights, f"no safetensors in {ASSET}"
    assert sum(p.stat().st_size for p in weights) <= 20 * 1024 * 1024


@pytest.mark.parametrize(
    ("asset", "family"),
    [
        (ASSET, "Qwen2VL"),
        (ROOT / "assets" / "tiny-qwen3vl-ground", "Qwen3VL"),
        (ROOT / "assets" / "tiny-qwen3vl-count", "Qwen3VL"),
    ],
    ids=["tiny-qwen2vl", "tiny-qwen3vl-ground", "tiny-qwen3vl-count"],
)
def test_loads_in_a_fresh_offline_process(asset, family):
    """Offline, as the class the asset names: an image processor saved as one type and loaded
    as another makes transformers warn of a breaking change at every load."""
    code = (
        "import sys\n"
        "from transformers import AutoModelForImageTextToText, AutoProcessor\n"
        "p = AutoProcessor.from_pretrained(sys.argv[1])\n"
        "m = AutoModelForImageTextToText.from_pretrained(sys.argv[1])\n"
        "print(type(p).__name__, type(m).__name__, type(p.image_processor).__name__)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("HF_ENDPOINT", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(asset)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    saved = json.loads((asset / "processor_config.json").read_text())["image_processor"]
    assert out.stdout.split() == [
        f"{family}Processor",
        f"{family}ForConditionalGeneration",
        saved["image_processor_type"],
    ]
    assert "breaking change" not in out.stderr


def test_loads_with_matching_ids(loaded):
    processor, model = loaded
    tok = processor.tokenizer
    assert type(processor).__name__ == "Qwen2VLProcessor"
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    cfg = model.config
    assert cfg.text_config.vocab_size == len(tok)
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.vision_config.hidden_size == cfg.text_config.hidden_size
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    # The shipped tokenizer is the one the code builds: tokenizer.py changes must retrain the asset.
    assert tok.get_vocab() == build_bpe_tokenizer().get_vocab()
    # transformers 5 loads the fast image processor, which keeps the limits in ``size``.
    assert processor.image_processor.size["longest_edge"] == 112 * 112


def test_training_record_beats_baselines():
    record = json.loads((ASSET / "TRAINING.json").read_text())
    m = record["metrics"]
    assert record["final"]
    assert m["count"]["n"] == m["ground"]["n"] == m["caption"]["n"] == 200
    assert m["count"]["accuracy"] > m["count"]["chance"] + 0.4
    assert m["caption"]["cider_d"] > m["caption"]["constant_caption_baseline_cider_d"] + 1.5
    # Grounding is the weak task (see vlrollout/tiny/model.py): about twice the baseline.
    assert m["ground"]["mean_iou"] > 2 * m["ground"]["centre_box_baseline_mean_iou"]


def test_asset_model_beats_baselines_on_fresh_items(loaded):
    """Greedy answers on 48 fresh items per task (a seed used nowhere else), seconds on a CPU."""
    from vlrollout.tiny.evaluate import baselines_from_training, evaluate

    processor, model = loaded
    items = [it for t in TASKS for it in generate_items(t, 48, seed=123)]
    res = evaluate(model, processor, items, baselines_from_training(0, n=500))
    assert res["count"]["accuracy"] >= 0.6
    assert res["caption"]["cider_d"] > res["caption"]["constant_caption_baseline_cider_d"] + 1.0
    assert res["ground"]["unparsable"] <= 2
    assert res["ground"]["mean_iou"] > res["ground"]["centre_box_baseline_mean_iou"]


def test_samples_are_the_seeded_mix():
    items = read_dataset(SAMPLES)
    assert len(items) == 12 and {it["task"] for it in items} == set(TASKS)
    fresh = generate_items("mix", 12, seed=SAMPLES_SEED)
    for a, b in zip(items, fresh, strict=True):
        assert {k: v for k, v in a.items() if k != "images"} == {
            k: v for k, v in b.items() if k != "images"
        }
        assert a["images"][0].tobytes() == b["images"][0].tobytes()
