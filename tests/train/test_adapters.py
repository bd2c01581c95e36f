"""LoRA (AReaL's ``actor.use_lora``) and frozen vision parts (``vlrollout.freeze_*``).

The slow tests run two GRPO steps of AReaL's actor in a subprocess (``adapt_step.py``) and check:
frozen parameters are bit-identical, every trainable one changed and none of the frozen ones
reached AReaL's grad-norm clipping; the engine serves exactly the trainer's weights (merged for
LoRA); the checkpoint loads in transformers as merged weights, and its ``adapter/`` with peft.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import Future
from functools import partial
from pathlib import Path

import pytest
import torch

from tests.train.procs import ROOT, run_side_by_side, subprocess_env
from vlrollout.errors import ConfigError
from vlrollout.testing.tiny_families import save_tiny_vlm, tiny_vlm
from vlrollout.train.freezing import freeze_vision, vision_parts
from vlrollout.train.lora import lora_scalings, merge_lora

TINY = "assets/tiny-qwen2vl"


def _adapt_step(model, out, *flags) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/train/adapt_step.py"), str(model), str(out), *flags],
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_trained(result: dict, moved: bool = True) -> None:
    """``moved``: every trainable parameter changed, except LoRA A matrices (their gradient is
    0 while B is still 0, so they move only in a second step with a learning signal)."""
    assert result["trainable"] and result["frozen"]
    assert result["frozen_change_max"] == 0.0  # bit-identical
    if moved:
        assert result["trainable_change_max"] > 0
        assert all(".lora_A." in n for n in result["unchanged"]), result["unchanged"]
    assert not set(result["with_grad"]) & set(result["frozen"])
    assert result["engine_keys_equal"] and result["engine_gap"] == 0.0


def _same(model, served: dict) -> None:
    state = model.state_dict()
    assert sorted(state) == sorted(served)
    for k, v in served.items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)


ADAPT_STEPS = {
    "test_lora_trains_adapters_and_serves_merged_weights": (TINY, "lora"),
    "test_frozen_vision_tower_stays_bit_identical": (TINY, "tower"),
    "test_lora_with_frozen_vision_on_qwen2_5_vl": ("qwen2_5_vl", "lora", "tower", "projector"),
}
"""Each slow test's model (a folder, or a family saved tiny with random weights) and flags."""


@pytest.fixture(scope="module")
def adapt_steps(request, tmp_path_factory) -> dict[str, tuple[Path, Future[dict]]]:
    """The adapt steps of the slow tests this session runs, all started at once so they share
    the machine's cores (``run_side_by_side``): per test, its output folder and result."""
    selected = {getattr(item, "originalname", None) for item in request.session.items}
    root = tmp_path_factory.mktemp("adapt")
    runs = {}
    for test, (model, *flags) in ADAPT_STEPS.items():
        if test in selected:
            out = root / test / "run"
            out.mkdir(parents=True)
            if model != TINY:
                model = save_tiny_vlm(model, root / test / "model")
            runs[test] = (out, partial(_adapt_step, model, out, *flags))
    futures = run_side_by_side(job for _, job in runs.values())
    return {test: (out, f) for (test, (out, _)), f in zip(runs.items(), futures, strict=True)}


@pytest.mark.slow
def test_lora_trains_adapters_and_serves_merged_weights(adapt_steps):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out, run = adapt_steps["test_lora_trains_adapters_and_serves_merged_weights"]
    result = run.result()
    _check_trained(result)
    assert all(".lora_" in n for n in result["trainable"])
    assert all(".lora_" not in n for n in result["frozen"])
    served = torch.load(out / "served.pt")
    ckpt = result["checkpoint"]
    _same(AutoModelForImageTextToText.from_pretrained(ckpt), served)
    AutoProcessor.from_pretrained(ckpt)  # a complete HF folder
    base = AutoModelForImageTextToText.from_pretrained(TINY)
    _same(PeftModel.from_pretrained(base, f"{ckpt}/adapter").merge_and_unload(), served)


@pytest.mark.slow
def test_frozen_vision_tower_stays_bit_identical(adapt_steps):
    from transformers import AutoModelForImageTextToText

    out, run = adapt_steps["test_frozen_vision_tower_stays_bit_identical"]
    result = run.result()
    _check_trained(result)
    visual = [n for n in result["frozen"] + result["trainable"] if n.startswith("model.visual.")]
    assert set(result["frozen"]) == {n for n in visual if ".merger." not in n}
    assert any(n.startswith("model.visual.merger.") for n in result["trainable"])
    _same(
        AutoModelForImageTextToText.from_pretrained(result["checkpoint"]),
        torch.load(out / "served.pt"),
    )


@pytest.mark.slow
def test_lora_with_frozen_vision_on_qwen2_5_vl(adapt_steps):
    _, run = adapt_steps["test_lora_with_frozen_vision_on_qwen2_5_vl"]
    result = run.result()
    _check_trained(result, moved=False)  # random weights: rewards may all be equal (no signal)
    assert result["trainable"] and not any(".visual." in n for n in result["trainable"])


# ----------------------------------------------------------------------------- fast
@pytest.mark.parametrize(
    ("family", "towers", "projectors"),
    [
        ("qwen2_vl", ["model.visual"], ["model.visual.merger"]),
        (
            "qwen3_vl",
            ["model.visual"],
            ["model.visual.merger", "model.visual.deepstack_merger_list"],
        ),
        ("llava", ["model.vision_tower"], ["model.multi_modal_projector"]),
        ("idefics3", ["model.vision_model"], ["model.connector"]),
    ],
)
def test_vision_parts_found_by_name(family, towers, projectors):
    assert vision_parts(tiny_vlm(family)[0]) == (towers, projectors)


def test_freeze_tower_and_projector_are_independent():
    model = tiny_vlm("llava")[0]
    frozen = freeze_vision(model, vision_tower=False, projector=True)
    assert set(frozen) == {"projector"} and frozen["projector"] > 0
    assert all(p.requires_grad for p in model.model.vision_tower.parameters())
    assert not any(p.requires_grad for p in model.model.multi_modal_projector.parameters())
    assert all(p.requires_grad for p in model.model.language_model.parameters())


def test_freeze_refuses_a_model_without_a_tower():
    with pytest.raises(ConfigError, match="freeze_vision_tower=true but Linear has no module"):
        freeze_vision(torch.nn.Linear(2, 2), vision_tower=True, projector=False)


def test_merge_matches_peft_merge_and_refuses_a_convolution():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(
        tiny_vlm("qwen2_vl")[0], LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "qkv"])
    )
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p)
    merged = merge_lora(model.state_dict(), lora_scalings(model))
    expected = model.merge_and_unload().state_dict()
    assert sorted(merged) == sorted(expected)
    for k, v in expected.items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-6, msg=k)

    conv = get_peft_model(tiny_vlm("qwen2_vl")[0], LoraConfig(r=2, target_modules=["proj"]))
    with pytest.raises(ConfigError, match="merges LoRA into linear layers only"):
        lora_scalings(conv)


def test_example_config_has_the_keys(tmp_path):
    from vlrollout.train.config import load_config

    cfg = load_config(
        "examples/train_grounding.yaml",
        [
            f"vlrollout.output={tmp_path}",
            "actor.use_lora=true",
            "actor.lora_rank=8",
            "actor.target_modules=[q_proj,v_proj]",
            "vlrollout.freeze_vision_tower=true",
            "vlrollout.freeze_projector=true",
        ],
    )
    assert cfg.actor.use_lora and cfg.actor.lora_rank == 8
    assert cfg.actor.target_modules == ["q_proj", "v_proj"]
    assert cfg.vlrollout.freeze_vision_tower and cfg.vlrollout.freeze_projector


def test_resume_refuses_a_lora_mismatch(tmp_path):
    from vlrollout.train.lora import check_resume

    (tmp_path / "adapter").mkdir()
    with pytest.raises(ConfigError, match="saved without LoRA: resume with actor.use_lora=false"):
        check_resume(tmp_path / "adapter", use_lora=True)
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    check_resume(tmp_path, use_lora=True)
    with pytest.raises(ConfigError, match="saved with LoRA: resume with actor.use_lora=true"):
        check_resume(tmp_path, use_lora=False)


@pytest.mark.slow
def test_cli_lora_with_frozen_tower_resumes_the_adapter(tmp_path):
    from safetensors.torch import load_file

    from tests.train.procs import run_train
    from tests.train.test_cli_train import SMALL

    out = tmp_path / "run"
    lora = ["actor.use_lora=true", "actor.lora_rank=4", "vlrollout.freeze_vision_tower=true"]
    lora.append("vlrollout.task=caption")  # a dense reward: groups differ, adapters move
    proc = run_train(out, *SMALL, *lora)
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(r["grad_norm"] > 0 for r in steps), steps
    assert "LoRA (rank 4, alpha 16)" in proc.stderr and "frozen (elements)" in proc.stderr
    # Adam moves each element by about lr (1e-4) per step: after 3 steps some LoRA B elements
    # reach 3e-4 only if the resumed run started from the saved adapter (fresh adapters start
    # at B = 0 and would reach 1e-4); the resumed run serves the merged checkpoint.
    run_train(out, *SMALL, *lora, "total_train_steps=3")
    ckpts = out / "checkpoints"
    b2, b3 = (
        load_file(ckpts / s / "adapter" / "adapter_model.safetensors") for s in ("step_2", "step_3")
    )
    largest = max(float(b3[k].abs().max()) for k in b3 if "lora_B" in k)
    assert max(float(b2[k].abs().max()) for k in b2 if "lora_B" in k) < 2.5e-4 < largest
    merged = load_file(ckpts / "step_3" / "model.safetensors")
    base = load_file(ROOT / TINY / "model.safetensors")
    assert sorted(merged) == sorted(base)
    assert any(not torch.equal(merged[k], base[k]) for k in base)
