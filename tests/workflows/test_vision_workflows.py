"""Vision workflows with the real (offline-built) Qwen2-VL processor and a scripted engine."""

from __future__ import annotations

import asyncio
import base64
import io
import logging

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
from areal.infra.workflow_executor import check_trajectory_format
from PIL import Image

from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionRLVRWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=16)
QUESTION = "How many shapes are there?"


def _item(image, item_id="v1", **extra):
    return {
        "id": item_id,
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
        ],
        "images": [image],
        "answer": "3",
        **extra,
    }


def _image(size=(150, 100), colour="red"):
    return Image.new("RGB", size, colour)


def _enc(tok, text):
    return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


def _workflow(tokenizer, processor, reward="tests.workflows.reward_fns.contains_answer", **kw):
    return VisionRLVRWorkflow(reward, GCONFIG, tokenizer, processor, **kw)


def test_vision_trajectory_carries_the_processor_output(tokenizer, qwen2vl_processor):
    wf = _workflow(tokenizer, qwen2vl_processor)
    out = _enc(tokenizer, "3")
    engine = ScriptedEngine([out])
    image = _image()
    traj = asyncio.run(wf.arun_episode(engine, _item(image)))
    assert check_trajectory_format(traj)

    # What calling the same processor directly gives.
    text = qwen2vl_processor.apply_chat_template(
        _item(image)["messages"], tokenize=False, add_generation_prompt=True
    )
    direct = qwen2vl_processor(images=[image], text=[text], return_tensors="pt")
    prompt = direct["input_ids"][0].tolist()
    assert traj["input_ids"][0].tolist() == prompt + out
    mm = traj["multi_modal_input"][0]
    assert torch.equal(mm["pixel_values"], direct["pixel_values"])
    assert torch.equal(mm["image_grid_thw"], direct["image_grid_thw"])
    assert traj["mm_token_type_ids"][0].tolist() == direct["mm_token_type_ids"][0].tolist() + [
        0
    ] * len(out)

    # Placeholder count in input_ids equals what image_grid_thw implies (2x2 merge).
    n_placeholders = prompt.count(qwen2vl_processor.image_token_id)
    assert n_placeholders == int(direct["image_grid_thw"].prod()) // 4

    # The engine got the images three ways: base64 for SGLang, data URLs for vLLM, tensors for us.
    req = engine.requests[0]
    assert len(req.image_data) == 1
    decoded = Image.open(io.BytesIO(base64.b64decode(req.image_data[0])))
    assert decoded.size == image.size
    assert req.vision_msg_vllm and "data:image" in str(req.vision_msg_vllm)
    assert torch.equal(req.metadata["multi_modal_input"]["pixel_values"], mm["pixel_values"])
    assert traj["rewards"].item() == 1.0


def test_geometry_reaches_the_reward(tokenizer, qwen2vl_processor):
    wf = _workflow(
        tokenizer, qwen2vl_processor, reward="tests.workflows.reward_fns.echo_geometry_width"
    )
    traj = asyncio.run(
        wf.arun_episode(ScriptedEngine([_enc(tokenizer, "x")]), _item(_image((150, 100))))
    )
    assert traj["rewards"].item() == 150.0


def test_image_file_paths_work_and_max_pixels_reaches_the_processor(
    tokenizer, qwen2vl_processor, tmp_path
):
    path = tmp_path / "img.png"
    _image((200, 200), "blue").save(path)
    wf = _workflow(tokenizer, qwen2vl_processor, max_pixels=56 * 56)
    traj = asyncio.run(wf.arun_episode(ScriptedEngine([_enc(tokenizer, "3")]), _item(str(path))))
    assert traj["multi_modal_input"][0]["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_group_prepares_the_prompt_once(tokenizer, qwen2vl_processor):
    wf = _workflow(tokenizer, qwen2vl_processor)
    calls = []
    original = wf.ctx.preprocessor.prepare
    wf.ctx.preprocessor.prepare = lambda data: calls.append(1) or original(data)
    group = GroupedRolloutWorkflow(wf, 8, logging.getLogger("test"))
    engine = ScriptedEngine([_enc(tokenizer, "3"), _enc(tokenizer, "4")])
    traj = asyncio.run(group.arun_episode(engine, _item(_image())))
    assert check_trajectory_format(traj, batch_size=8)
    assert len(calls) == 1
    assert len(traj["multi_modal_input"]) == 8
    assert sorted(traj["rewards"].tolist()) == [0.0] * 4 + [1.0] * 4


def test_placeholder_mismatch_is_rejected_with_both_numbers(tokenizer, qwen2vl_processor):
    wf = _workflow(tokenizer, qwen2vl_processor)
    item = _item(_image())
    item["images"] = [_image(), _image()]
    engine = ScriptedEngine([_enc(tokenizer, "3")])
    assert asyncio.run(wf.arun_episode(engine, item)) is None
    assert list(wf.ledger.by_reason) == ["placeholder_mismatch"]
    detail = wf.ledger.records[0].detail
    assert "1" in detail and "2" in detail
    assert engine.requests == []


def test_corrupt_image_is_rejected_and_names_the_item(tokenizer, qwen2vl_processor, tmp_path):
    path = tmp_path / "broken.png"
    buf = io.BytesIO()
    _image().save(buf, format="PNG")
    path.write_bytes(buf.getvalue()[:60])
    wf = _workflow(tokenizer, qwen2vl_processor)
    assert (
        asyncio.run(wf.arun_episode(ScriptedEngine([[1]]), _item(str(path), item_id="bad7")))
        is None
    )
    record = wf.ledger.records[0]
    assert record.reason == "image_decode"
    assert "bad7" in record.item


def test_vision_multi_attempt_keeps_images_and_masks_feedback(tokenizer, qwen2vl_processor):
    wrong, right = _enc(tokenizer, "5"), _enc(tokenizer, "3")
    engine = ScriptedEngine([wrong, right])
    wf = VisionMultiAttemptWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GCONFIG,
        tokenizer,
        qwen2vl_processor,
        max_turns=3,
        turn_discount=0.5,
    )
    traj = asyncio.run(wf.arun_episode(engine, _item(_image())))
    assert check_trajectory_format(traj)
    assert traj["rewards"].item() == 0.5
    prompt = engine.requests[0].input_ids
    assert engine.requests[1].input_ids == prompt + wrong + wf.feedback_ids
    # The second request still carries the image tensors and the image bytes.
    assert len(engine.requests[1].image_data) == 1
    assert "multi_modal_input" in engine.requests[1].metadata
    n = len(traj["input_ids"][0])
    assert traj["mm_token_type_ids"].shape == (1, n)
    assert int(traj["mm_token_type_ids"].sum()) == prompt.count(qwen2vl_processor.image_token_id)
    mask = traj["loss_mask"][0].tolist()
    assert mask == [0] * len(prompt) + [1] * len(wrong) + [0] * len(wf.feedback_ids) + [1] * len(
        right
    )


def test_custom_preprocessor_object_rejects_resize_limits(tokenizer, qwen2vl_processor):
    from vlrollout.processors.auto import AutoProcessorPreprocessor

    with pytest.raises(ValueError, match="custom preprocessor"):
        _workflow(
            tokenizer,
            qwen2vl_processor,
            preprocessor=AutoProcessorPreprocessor(qwen2vl_processor),
            max_pixels=100,
        )


def test_vision_multi_attempt_sends_vllm_the_whole_conversation(tokenizer, qwen2vl_processor):
    """AReaL's vLLM client sends vision_msg_vllm, not input_ids: it must grow turn by turn."""
    wrong, right = _enc(tokenizer, "5"), _enc(tokenizer, "3")
    engine = ScriptedEngine([wrong, right])
    wf = VisionMultiAttemptWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GCONFIG,
        tokenizer,
        qwen2vl_processor,
        max_turns=3,
        turn_discount=0.5,
        feedback="Wrong, try again.",
    )
    asyncio.run(wf.arun_episode(engine, _item(_image())))
    first, second = (r.vision_msg_vllm[0] for r in engine.requests)
    assert len(first) == 1 and len(second) == 3
    assert second[1] == {"role": "assistant", "content": "5"}
    assert second[2] == {"role": "user", "content": "Wrong, try again."}
    assert "data:image" in str(second[0])
    # The rendered conversation is exactly the token sequence the engine got.
    text = qwen2vl_processor.apply_chat_template(second, tokenize=False, add_generation_prompt=True)
    rendered = qwen2vl_processor(images=[_image()], text=[text], return_tensors="pt")["input_ids"][
        0
    ]
    assert rendered.tolist() == engine.requests[1].input_ids


@pytest.mark.parametrize("field", ["prompt", "completions", "prompt_ids", "completion_ids"])
def test_a_field_named_as_a_reward_argument_is_rejected_before_generating(
    tokenizer, qwen2vl_processor, field
):
    # TRL and verl datasets often carry a 'prompt' column; the reward's first argument is the
    # rendered prompt, so the field cannot reach it.
    wf = _workflow(tokenizer, qwen2vl_processor)
    engine = ScriptedEngine([_enc(tokenizer, "3")])
    assert asyncio.run(wf.arun_episode(engine, _item(_image(), **{field: "x"}))) is None
    assert list(wf.ledger.by_reason) == ["reserved_field"]
    assert f"field {field!r}" in wf.ledger.records[0].detail
    assert engine.requests == []


@pytest.mark.parametrize("turns", [None, 2])
def test_a_completion_holding_an_image_placeholder_is_rejected(tokenizer, qwen2vl_processor, turns):
    """A sampler can emit the image placeholder token; trained on, the sequence would hold more
    placeholders than the images have features, and the trainer's forward fails."""
    reward = "tests.workflows.reward_fns.contains_answer"
    wf = (
        VisionRLVRWorkflow(reward, GCONFIG, tokenizer, qwen2vl_processor)
        if turns is None
        else VisionMultiAttemptWorkflow(reward, GCONFIG, tokenizer, qwen2vl_processor, turns, 0.9)
    )
    pad = qwen2vl_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    engine = ScriptedEngine([[*_enc(tokenizer, "3")[:-1], pad, tokenizer.eos_token_id]] * 4)
    assert asyncio.run(wf.arun_episode(engine, _item(_image()))) is None
    assert wf.ledger.by_reason == {"generated_placeholder": 1}
    (rejection,) = wf.ledger.records
    assert str(pad) in rejection.detail
