"""The trainer's packed forward on video sequences equals each sequence forwarded alone.

AReaL 1.0.4's own ``FSDPEngine._prepare_mb_list`` packs a padded batch of three sequences (a
video, an image + a video, text only; each prompt with a short completion) into one row, with
the packing fix of :mod:`vlrollout.train.packing` installed, as the trainer runs it on the CPU
(sdpa). The gradient of a per-token weighted logprob objective over that packed row equals the
gradient of the same objective with each sequence forwarded alone by transformers (its own
positions, mask and video inputs) to 1e-4 relative. Without the fix AReaL forwards no
``pixel_values_videos``: the model reads its video placeholders as text embeddings.

The engine here is a stand-in holding what ``_prepare_mb_list`` reads (config, model,
micro-batch spec); no process group, FSDP or optimizer is needed for it.
"""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from areal.api.cli_args import MicroBatchSpec
from areal.engine import fsdp_engine

from tests.train.family_logp import compare_gradients
from tests.train.procs import ROOT, subprocess_env
from tests.train.video_inputs import (
    IMAGE_BEFORE_VIDEO_MISBUILT,
    VIDEO_FAMILIES,
    video_prompt,
    vision_of,
)
from vlrollout.families import family_of, rope_grids
from vlrollout.testing.tiny_families import tiny_vlm
from vlrollout.train import packing
from vlrollout.train.support import TRAINABLE

GRAD_RTOL = 1e-4
COMPLETION = 4


def _sequences(family, processor):
    """Three (processor output, completion ids) pairs: video, image + video (another video
    where the family's processor builds that wrong), text only."""
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "Only text here."}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompts = [
        video_prompt(processor, "What moves?", seed=1),
        video_prompt(
            processor,
            "Which came first?",
            seed=2,
            image=family not in IMAGE_BEFORE_VIDEO_MISBUILT,
            n_frames=6,
        ),
        processor(text=[text], return_tensors="pt"),
    ]
    gen = torch.Generator().manual_seed(0)
    return [(p, torch.randint(10, 200, (1, COMPLETION), generator=gen)) for p in prompts]


def _batch(seqs) -> dict:
    """The padded batch AReaL's actor gets (right padding, one ``multi_modal_input`` per row)."""
    rows = [torch.cat([p["input_ids"], c], 1)[0] for p, c in seqs]
    width = max(len(r) for r in rows)
    batch = {
        "input_ids": torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows]),
        "attention_mask": torch.stack(
            [torch.nn.functional.pad(torch.ones_like(r), (0, width - len(r))) for r in rows]
        ),
        "multi_modal_input": [vision_of(p) for p, _ in seqs],
    }
    if "mm_token_type_ids" in seqs[0][0]:
        batch["mm_token_type_ids"] = torch.stack(
            [
                torch.nn.functional.pad(
                    p.get("mm_token_type_ids", p["input_ids"] * 0)[0],
                    (0, width - len(p["input_ids"][0])),
                )
                for p, _ in seqs
            ]
        )
    return batch


def _weights(seqs) -> list[torch.Tensor]:
    """Per sequence, the weight of each next-token logprob: distinct on completion tokens, 0 on
    the prompt (as an advantage on the loss mask)."""
    out = []
    for i, (p, c) in enumerate(seqs):
        n = p["input_ids"].shape[1]
        w = torch.zeros(n + c.shape[1] - 1)
        w[n - 1 :] = (-1.0) ** i * (1.0 + i / 10)
        out.append(w)
    return out


def _objective(logits: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[1:, None])[:, 0]
    return -(weights * logp).sum()


def _plain_gradients(model, seqs) -> dict:
    """Each sequence forwarded alone by transformers (grids as its ``get_rope_index`` reads)."""
    model.zero_grad()
    for (p, c), w in zip(seqs, _weights(seqs), strict=True):
        ids = torch.cat([p["input_ids"], c], 1)
        kwargs = vision_of(p)
        if "mm_token_type_ids" in p:
            types = torch.nn.functional.pad(p["mm_token_type_ids"], (0, c.shape[1]))
            kwargs["mm_token_type_ids"] = types
            if kwargs and family_of(model.config).positions == "mrope":
                kwargs.update(rope_grids(vision_of(p), types))
        _objective(model(input_ids=ids, **kwargs).logits[0], ids[0], w).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _packed_gradients(model, seqs, fixed: bool = True) -> dict:
    """AReaL's ``_prepare_mb_list`` (wrapped by the packing fix when ``fixed``) on the batch,
    then the forward of every packed micro-batch as AReaL's ``forward_backward_batch`` runs it."""
    engine = SimpleNamespace(
        enable_tree_training=False,
        model_config=model.config,
        model=model,
        config=SimpleNamespace(
            mb_spec=MicroBatchSpec(max_tokens_per_mb=100_000),
            pad_to_maximum=False,
            attn_impl="sdpa",
        ),
        logger=logging.getLogger("test_packed_video"),
    )
    engine._prepare_mb_list = functools.partial(fsdp_engine.FSDPEngine._prepare_mb_list, engine)
    if fixed:
        assert packing.install(engine)
    model.zero_grad()
    mb_list = engine._prepare_mb_list(_batch(seqs))
    weights = _weights(seqs)
    for mb, rows in zip(mb_list.padded_mbs, packing.sequences_of(mb_list), strict=True):
        inputs = {
            k: v for k, v in mb.items() if k not in ("max_seqlen", "max_length_q", "max_length_k")
        }
        logits = model(**inputs).logits[0]
        bounds = mb["cu_seqlens"].tolist()
        loss = sum(
            _objective(logits[start:end], mb["input_ids"][0, start:end], weights[row])
            for row, start, end in zip(rows, bounds[:-1], bounds[1:], strict=False)
        )
        loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(autouse=True)
def _no_process_group(monkeypatch):
    """AReaL logs the rank inside ``_prepare_mb_list``; a world of one has rank 0."""
    monkeypatch.setattr(fsdp_engine.dist, "get_rank", lambda *a, **k: 0)


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_packed_video_gradient_equals_each_sequence_alone(family):
    torch.set_num_threads(1)
    model, processor = tiny_vlm(family, seed=0)
    model.train()
    seqs = _sequences(family, processor)
    want = _plain_gradients(model, seqs)
    got = _packed_gradients(model, seqs)
    result = compare_gradients(got, want)
    assert result["grad_names_equal"] and result["grad_rel"] <= GRAD_RTOL, result
    assert any("visual" in n or "vision" in n for n in got), "the video never reached the tower"


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_without_the_fix_the_video_is_lost(family):
    """AReaL alone forwards no ``pixel_values_videos`` (nor Qwen2.5-VL's frame spacing)."""
    model, processor = tiny_vlm(family, seed=0)
    model.train()
    seqs = _sequences(family, processor)
    result = compare_gradients(
        _packed_gradients(model, seqs, fixed=False), _plain_gradients(model, seqs)
    )
    assert result["grad_rel"] > 100 * GRAD_RTOL, result


def _video_logp(family: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/train/video_logp.py"), family],
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("family", [f for f in VIDEO_FAMILIES if f in TRAINABLE])
def test_areal_actor_on_video_trajectories(family):
    """AReaL's FSDP actor itself: trainer logprobs equal the rollout's and ``ppo_update``'s
    gradient equals the plain per-sequence one (about 20 s per family). Only the families
    ``vlrollout train`` trains (:data:`vlrollout.train.support.TRAINABLE`)."""
    result = _video_logp(family)
    assert "error" not in result, result
    assert result["fixed"] <= 1e-4 and result["ppo_update"], result
    assert result["grad_names_equal"] and result["grad_rel"] <= GRAD_RTOL, result
