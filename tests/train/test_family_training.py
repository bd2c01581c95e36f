"""AReaL's trainer on every family vlrollout serves, on tiny random models.

Trainable families: trainer logprobs on a packed batch equal the rollout's (1e-4, float32, sdpa),
and the gradient of AReaL's ``ppo_update`` on that batch equals the PPO objective's gradient
computed the plain way (each sequence forwarded alone by transformers) to 1e-4. Refused families
(Gemma 3, LFM2-VL) are refused by ``vlrollout train`` before any model loads, and the reason each
names is still what AReaL does with it. One subprocess checks every family in turn.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.train.procs import ROOT, subprocess_env
from vlrollout.errors import ConfigError
from vlrollout.testing.tiny_families import TINY_FAMILIES, save_tiny_vlm, tiny_vlm
from vlrollout.train.actor import pad_image_tensors
from vlrollout.train.packing import (
    linear_attention_layers,
    mrope_positions,
    separate_packed_sequences,
)
from vlrollout.train.support import (
    AREAL_VISION_MODELS,
    NOT_TRAINABLE,
    TRAINABLE,
    check_trainable,
    refusal,
    trains,
)

ATOL = 1e-4
GRAD_RTOL = 1e-4
"""Relative distance allowed between the trainer's gradient and the plain one (float32 sums in
another order: about 1e-7 measured)."""


REFUSED_WITH = {
    "gemma3": "`token_type_ids` is required",
}
"""Refused families → words of their refusal; :func:`test_refused_family_fails_in_areal_as_the_refusal_says`
checks that AReaL's actor still fails on each as the refusal says."""


@pytest.fixture(scope="module")
def family_logp() -> dict[str, dict]:
    """:mod:`tests.train.family_logp` on every trainable and refused family, in one subprocess
    (the imports paid once): family → its JSON line."""
    families = [*TRAINABLE, *REFUSED_WITH]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/train/family_logp.py"), *families],
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"family"')]
    return {r["family"]: r for r in lines}


@pytest.mark.slow
@pytest.mark.parametrize("family", TRAINABLE)
def test_trainer_logprobs_equal_rollout(family, family_logp):
    result = family_logp[family]
    assert "error" not in result, result
    assert result["rejected"] == 0 and result["ppo_update"], result
    assert result["fixed"] <= ATOL, result
    if family in AREAL_VISION_MODELS:  # AReaL alone: packed sequences leak (or positions)
        assert result["unfixed"] > 0.1, result
    else:  # AReaL alone concatenates the sequences' image tensors, ragged here, or drops some
        assert "unfixed_error" in result or result["unfixed"] > 0.1, result
    assert result["grad_names_equal"], result
    assert result["grad_rel"] <= GRAD_RTOL, result
    assert result["grad_worst"][1] <= 10 * GRAD_RTOL, result  # every tensor, the smallest too


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(REFUSED_WITH))
def test_refused_family_fails_in_areal_as_the_refusal_says(family, family_logp):
    """Registered as a vision model, with the fixes the trained families get, AReaL's actor still
    fails on each refused family the way its refusal says."""
    result = family_logp[family]
    assert REFUSED_WITH[family] in refusal(tiny_vlm(family)[0].config)
    if family == "gemma3":  # no token_type_ids: the update raises, the packed forward is off
        assert "`token_type_ids` is required" in result.get("error", ""), result
        assert result["fixed"] > 0.1, result


def _prepared(processor, text: str, image=None):
    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    if image is not None:
        messages[0]["content"].insert(0, {"type": "image"})
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    size = image or (0, 0)
    images = [Image.new("RGB", size, (90, 40, 200))] if image else None
    return processor(text=[prompt], images=images, return_tensors="pt")


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_5"])
def test_mrope_positions_equal_the_models_own_per_sequence(family):
    """Three sequences packed into one row (image, text only, two-image-sized image) with trailing
    padding: each sequence's 3-D positions are the model's own for it alone."""
    model, processor = tiny_vlm(family)
    seqs = [
        _prepared(processor, "What is this?", (64, 48)),
        _prepared(processor, "Only text here."),
        _prepared(processor, "And this one?", (40, 90)),
    ]
    ids = torch.cat([s["input_ids"] for s in seqs], 1)
    pad = 5
    mb = {
        "input_ids": torch.cat([ids, torch.zeros(1, pad, dtype=ids.dtype)], 1),
        "mm_token_type_ids": torch.cat(
            [*(s["mm_token_type_ids"] for s in seqs), torch.zeros(1, pad, dtype=torch.long)], 1
        ),
        "cu_seqlens": torch.tensor(
            [0, *torch.tensor([s["input_ids"].shape[1] for s in seqs]).cumsum(0).tolist()],
            dtype=torch.int32,
        ),
        "image_grid_thw": torch.cat([s["image_grid_thw"] for s in seqs if "image_grid_thw" in s]),
    }
    pos = mrope_positions(model.model, mb)
    start = 0
    for s in seqs:
        n = s["input_ids"].shape[1]
        own, _ = model.model.get_rope_index(
            s["input_ids"],
            image_grid_thw=s.get("image_grid_thw"),
            attention_mask=torch.ones_like(s["input_ids"]),
            mm_token_type_ids=s["mm_token_type_ids"],
        )
        assert torch.equal(pos[:, :, start : start + n], own), start
        start += n
    assert pos[:, 0, start:].tolist() == [list(range(pad))] * 3


def test_qwen2_5_vl_packed_forward_equals_each_sequence_alone():
    """Positions that restart per sequence, the model's own 3-D rule (``tokens_per_second``
    spacing) and no mask, as the packing fix gives AReaL's micro-batches: a packed forward equals
    each sequence's own."""
    model, processor = tiny_vlm("qwen2_5_vl")
    seqs = [
        _prepared(processor, "What is this?", (64, 48)),
        _prepared(processor, "Only text here."),
    ]
    lens = [s["input_ids"].shape[1] for s in seqs]
    mb = {
        "input_ids": torch.cat([s["input_ids"] for s in seqs], 1),
        "mm_token_type_ids": torch.cat([s["mm_token_type_ids"] for s in seqs], 1),
        "cu_seqlens": torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32),
        "image_grid_thw": seqs[0]["image_grid_thw"],
    }
    mb["position_ids"] = mrope_positions(model.model, mb)
    separate_packed_sequences(mb)
    with torch.no_grad():
        packed = model(
            input_ids=mb["input_ids"],
            position_ids=mb["position_ids"],
            attention_mask=None,
            pixel_values=seqs[0]["pixel_values"],
            image_grid_thw=mb["image_grid_thw"],
            use_cache=False,  # as AReaL: transformers looks for packed sequences only without a cache
        ).logits[0]
        alone = torch.cat([model(**s).logits[0] for s in seqs])
    assert (packed - alone).abs().max().item() < 1e-4


def test_linear_attention_layers_are_counted():
    assert linear_attention_layers(tiny_vlm("qwen3_5")[0].config) > 0
    assert linear_attention_layers(tiny_vlm("lfm2_vl")[0].config) > 0  # short convolutions
    assert linear_attention_layers(tiny_vlm("qwen2_vl")[0].config) == 0


def test_gemma3_is_refused_naming_family_and_reason(tmp_path):
    path = save_tiny_vlm("gemma3", tmp_path / "gemma3")
    with pytest.raises(
        ConfigError, match="'gemma3' cannot be trained: .*token_type_ids.*bidirectionally"
    ):
        check_trainable(str(path))
    for family in TRAINABLE:
        assert refusal(tiny_vlm(family)[0].config) is None
        assert trains(family) == "yes"
    assert trains("gemma3") == f"no: {refusal(tiny_vlm('gemma3')[0].config).split(': ', 1)[1]}"


def test_every_served_family_trains_or_is_refused_with_its_reason():
    for family in TINY_FAMILIES:
        assert (family in TRAINABLE) != (family in NOT_TRAINABLE), family
        assert "not checked" not in trains(family), family
    assert set(REFUSED_WITH) == set(NOT_TRAINABLE)  # each refusal is checked against AReaL


def test_an_unchecked_vision_family_is_refused():
    from transformers import PaliGemmaConfig

    reason = refusal(PaliGemmaConfig())
    assert reason.startswith("model family 'paligemma' cannot be trained: vlrollout has not")
    assert trains("paligemma").startswith("no: not checked")


def test_image_tensors_padded_to_the_batch_largest_where_inert():
    a = {"pixel_values": torch.ones(1, 2, 3, 4, 4), "pixel_attention_mask": torch.ones(1, 2, 4, 4)}
    b = {"pixel_values": torch.ones(1, 5, 3, 6, 4), "image_sizes": torch.ones(1, 2)}
    out = pad_image_tensors([a, {}, b], ("pixel_values", "pixel_attention_mask"))
    assert out[0]["pixel_values"].shape == (1, 5, 3, 6, 4) == out[2]["pixel_values"].shape
    assert out[0]["pixel_values"][:, :2, :, :4].eq(1).all()
    assert out[0]["pixel_values"].sum() == a["pixel_values"].sum()  # zeros only
    assert out[0]["pixel_attention_mask"].shape == (1, 2, 4, 4)  # no other sequence has one
    assert out[1] == {} and out[2]["image_sizes"] is b["image_sizes"]
    assert torch.equal(
        torch.cat([out[0]["pixel_values"], out[2]["pixel_values"]])[1], b["pixel_values"][0]
    )


@pytest.mark.slow
def test_vlrollout_train_refuses_gemma3_before_loading(tmp_path):
    path = save_tiny_vlm("gemma3", tmp_path / "gemma3")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlrollout.cli",
            "train",
            "--config",
            "examples/train_grounding.yaml",
            f"actor.path={path}",
            f"vlrollout.output={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "'gemma3' cannot be trained" in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert "Loading weights" not in proc.stderr
