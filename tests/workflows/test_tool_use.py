"""VisionToolWorkflow with the offline Qwen2-VL processor and a scripted engine.

The engine's script is a function of the request: the turn index is the number of assistant
generation prompts in ``input_ids`` minus one. Every test checks the packed trajectory against
AReaL's format contract and against the processor run on the whole conversation at once.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json

import numpy as np
import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format
from PIL import Image

from vlrollout.registry import UnknownNameError
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.tools import Tool, ToolResult
from vlrollout.workflows import VisionToolWorkflow

GCONFIG = GenerationHyperparameters(max_new_tokens=512)
RED, BLUE = (255, 0, 0), (0, 0, 255)


# -- module-level (picklable) reward and tool -----------------------------------------------


def record_reward(prompt, completions, prompt_ids, completion_ids, dump_path=None, **task_data):
    """Write what the reward saw to ``dump_path``; 1.0 when the answer says "blue"."""
    with open(dump_path, "w") as f:
        seen = {"completion": completions, "prompt": prompt, "prompt_len": len(prompt_ids)}
        json.dump({**seen, **task_data}, f, default=str)
    return 1.0 if "blue" in completions else 0.0


def _explode(ctx, **kwargs):
    raise RuntimeError("kaboom")


EXPLODE = Tool("explode", _explode, {"type": "object", "properties": {}})


def _draw(ctx, colour: str) -> ToolResult:
    return ToolResult(f"A {colour} square.", [Image.new("RGB", (56, 56), colour)])


DRAW = Tool("draw", _draw, {"type": "object", "properties": {"colour": {"type": "string"}}})


# -- helpers -------------------------------------------------------------------------------


def _quadrant_image() -> Image.Image:
    """224x224 red, with a blue bottom-right quadrant."""
    image = Image.new("RGB", (224, 224), RED)
    image.paste(Image.new("RGB", (112, 112), BLUE), (112, 112))
    return image


def _item(image, tmp_path, question="What colour is the bottom-right corner?"):
    return {
        "id": "t1",
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}
        ],
        "images": [image],
        "dump_path": str(tmp_path / "reward.json"),
    }


def _call(name, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _turn_index(tokenizer, req) -> int:
    return tokenizer.decode(req.input_ids).count("<|im_start|>assistant") - 1


def _run(wf, tokenizer, item, texts, eos=True, as_characters=False):
    """Run one episode; turn k answers ``texts[k]`` (+ eos), truncated to ``max_new_tokens``.
    ``as_characters``: special-token text is written as its characters, not as the token."""
    outputs = [
        tokenizer(t, add_special_tokens=False, split_special_tokens=as_characters)["input_ids"]
        + ([tokenizer.eos_token_id] if eos else [])
        for t in texts
    ]

    def script(req):
        return outputs[_turn_index(tokenizer, req)][: req.gconfig.max_new_tokens]

    engine = ScriptedEngine(script, stop_token_ids=[tokenizer.eos_token_id])
    traj = asyncio.run(wf.arun_episode(engine, item))
    dump = json.loads(open(item["dump_path"]).read()) if traj is not None else None
    return traj, engine, dump


def _workflow(tokenizer, processor, **kw):
    kw.setdefault("tools", ["zoom_in", "rotate", "image_info"])
    kw.setdefault("max_turns", 4)
    return VisionToolWorkflow(f"{__name__}.record_reward", GCONFIG, tokenizer, processor, **kw)


def _processed(processor, images):
    """The processor's own output for ``images`` (one placeholder each)."""
    text = "<|vision_start|><|image_pad|><|vision_end|>" * len(images)
    return processor(text=[text], images=[images], return_tensors="pt")


def _check_packing(traj, engine, processor):
    """Format, prefixes, loss masks, logprobs, and placeholders vs image tensors."""
    assert check_trajectory_format(traj)
    ids = traj["input_ids"][0].tolist()
    reqs = engine.requests
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    for k, req in enumerate(reqs):
        # Every request is exactly the trajectory prefix.
        assert ids[: len(req.input_ids)] == list(req.input_ids)
        n = len(engine.script(req))
        if k + 1 < len(reqs):  # an observation follows the generated turn
            assert len(reqs[k + 1].input_ids) > len(req.input_ids) + n
        for i in range(n):
            mask[len(req.input_ids) + i] = 1
            logprobs[len(req.input_ids) + i] = -0.01 * (i + 1)
    assert len(ids) == len(reqs[-1].input_ids) + len(engine.script(reqs[-1]))
    assert traj["loss_mask"][0].tolist() == mask
    assert torch.allclose(traj["logprobs"][0], torch.tensor(logprobs))

    mm = traj["multi_modal_input"][0]
    grid = mm["image_grid_thw"]
    image_token = processor.image_token_id
    assert ids.count(image_token) == int(grid.prod(-1).sum()) // 4
    assert mm["pixel_values"].shape[0] == int(grid.prod(-1).sum())
    types = traj["mm_token_type_ids"][0].tolist()
    assert types == [int(t == image_token) for t in ids]
    # The last request carried every image: tensors, base64 and vLLM messages.
    last = reqs[-1]
    assert len(last.image_data) == grid.shape[0]
    (messages,) = last.vision_msg_vllm
    parts = [p for m in messages if isinstance(m["content"], list) for p in m["content"]]
    assert sum(p["type"] == "image_url" for p in parts) == grid.shape[0]
    assert [m["role"] for m in messages][1:] == ["assistant", "user"] * (len(reqs) - 1)
    return mm


def _whole_conversation(processor, item, conversation, images):
    """The processor's output for the whole conversation rendered by the chat template at once."""
    messages = list(item["messages"])
    for k, text in enumerate(conversation[:-1]):
        if k % 2 == 0:
            messages.append({"role": "assistant", "content": text})
        else:
            parts = []
            for j, chunk in enumerate(text.split("<image>")):
                if j:
                    parts.append({"type": "image"})
                if chunk:
                    parts.append({"type": "text", "text": chunk})
            messages.append({"role": "user", "content": parts})
    rendered = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return processor(text=[rendered], images=[images], return_tensors="pt")


def _decode_b64(data: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))


# -- tests -------------------------------------------------------------------------------


def test_zoom_then_answer(tokenizer, qwen2vl_processor, tmp_path):
    wf = _workflow(tokenizer, qwen2vl_processor)
    image = _quadrant_image()
    item = _item(image, tmp_path)
    texts = ["Let me look closer. " + _call("zoom_in", bbox_2d=[500, 500, 1000, 1000]), "blue"]
    traj, engine, dump = _run(wf, tokenizer, item, texts)

    mm = _check_packing(traj, engine, qwen2vl_processor)
    assert len(engine.requests) == 2
    crop = Image.new("RGB", (112, 112), BLUE)
    # Images in order: the prompt image, then the crop of the blue quadrant.
    expected = _processed(qwen2vl_processor, [image, crop])
    assert torch.equal(mm["image_grid_thw"], expected["image_grid_thw"])
    assert torch.equal(mm["pixel_values"], expected["pixel_values"])
    assert not torch.equal(mm["pixel_values"][:64], mm["pixel_values"][64:])  # red != blue
    # The second request's engine inputs: both images as base64, the crop exactly blue.
    req = engine.requests[1]
    assert len(req.image_data) == 2
    assert (_decode_b64(req.image_data[1]) == np.array(BLUE)).all()
    assert torch.equal(req.metadata["multi_modal_input"]["pixel_values"], mm["pixel_values"])
    # The trajectory is what the processor gives for the whole conversation at once.
    whole = _whole_conversation(qwen2vl_processor, item, dump["conversation"], [image, crop])
    assert whole["input_ids"][0].tolist() == list(req.input_ids)
    assert torch.equal(whole["pixel_values"], mm["pixel_values"])
    # The model saw the tool turn in Qwen2.5's tool-response format.
    assert dump["conversation"][1].startswith("<tool_response>\nImage 1: <image>\n")
    assert tokenizer.decode(req.input_ids).endswith(
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # The reward saw the final answer, both geometries, and the counters.
    assert dump["completion"] == "blue"
    assert dump["conversation"][0] == texts[0] and dump["conversation"][2] == "blue"
    assert dump["geometry"] == [
        {"original_width": 224, "original_height": 224, "model_width": 112, "model_height": 112},
        {"original_width": 112, "original_height": 112, "model_width": 112, "model_height": 112},
    ]
    assert (dump["tool_calls"], dump["tool_errors"], dump["stop_reason"]) == (1, 0, "answer")
    assert "images" not in dump
    assert traj["rewards"].item() == 1.0


def test_several_tools_in_sequence(tokenizer, qwen2vl_processor, tmp_path):
    image = Image.new("RGB", (224, 112), RED)
    image.paste(Image.new("RGB", (112, 112), BLUE), (112, 0))  # right half blue
    item = _item(image, tmp_path)
    texts = [
        # Two calls in one turn run in order: a text-only tool, then a rotation.
        _call("image_info") + "\n" + _call("rotate", angle=90),
        _call("zoom_in", bbox_2d=[0, 0, 1000, 500], image_index=1),
        "The corner is blue",
    ]
    wf = _workflow(tokenizer, qwen2vl_processor)
    traj, engine, dump = _run(wf, tokenizer, item, texts)

    mm = _check_packing(traj, engine, qwen2vl_processor)
    rotated = image.transpose(Image.Transpose.ROTATE_90)  # 112x224, blue on top
    assert np.asarray(rotated)[:112].tolist() == np.full((112, 112, 3), BLUE).tolist()
    crop = Image.new("RGB", (112, 112), BLUE)
    expected = _processed(qwen2vl_processor, [image, rotated, crop])
    assert torch.equal(mm["image_grid_thw"], expected["image_grid_thw"])
    assert torch.equal(mm["pixel_values"], expected["pixel_values"])
    whole = _whole_conversation(
        qwen2vl_processor, item, dump["conversation"], [image, rotated, crop]
    )
    assert whole["input_ids"][0].tolist() == list(engine.requests[-1].input_ids)

    first_obs = dump["conversation"][1]
    assert first_obs.index("Image 0: 224x112 pixels") < first_obs.index("Image 1: <image>")
    assert first_obs.count("<tool_response>") == 2
    grid = expected["image_grid_thw"].tolist()
    assert [(g["original_width"], g["original_height"]) for g in dump["geometry"]] == [
        (224, 112),
        (112, 224),
        (112, 112),
    ]
    assert [(g["model_width"], g["model_height"]) for g in dump["geometry"]] == [
        (w * 14, h * 14) for _, h, w in grid
    ]
    assert (dump["tool_calls"], dump["tool_errors"], dump["stop_reason"]) == (3, 0, "answer")
    assert len(engine.requests[1].image_data) == 2 and len(engine.requests[2].image_data) == 3
    assert traj["rewards"].item() == 1.0


def test_malformed_calls_are_shown_to_the_model_and_recovered_from(
    tokenizer, qwen2vl_processor, tmp_path
):
    image = _quadrant_image()
    item = _item(image, tmp_path)
    texts = [
        '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [1, 2, 3]}</tool_call>',  # bad JSON
        _call("magnify", factor=2),  # unknown tool
        _call("zoom_in", bbox_2d=[1200, 1200, 1500, 1500]),  # outside the image
        _call("explode"),  # the tool raises
        # A 1x224 crop: the processor rejects the aspect ratio.
        _call("zoom_in", bbox_2d=[0, 0, 4, 1000]),
        _call("zoom_in", bbox_2d=[500, 500, 1000, 1000]),
        "blue",
    ]
    wf = _workflow(tokenizer, qwen2vl_processor, tools=["zoom_in", EXPLODE], max_turns=8)
    traj, engine, dump = _run(wf, tokenizer, item, texts)

    mm = _check_packing(traj, engine, qwen2vl_processor)
    crop = Image.new("RGB", (112, 112), BLUE)
    expected = _processed(qwen2vl_processor, [image, crop])
    assert torch.equal(mm["pixel_values"], expected["pixel_values"])
    whole = _whole_conversation(qwen2vl_processor, item, dump["conversation"], [image, crop])
    assert whole["input_ids"][0].tolist() == list(engine.requests[-1].input_ids)

    errors = dump["conversation"][1:10:2]
    assert all(e.startswith("<tool_response>\nError: ") and "<image>" not in e for e in errors)
    assert "invalid JSON" in errors[0]
    assert "unknown tool 'magnify'" in errors[1] and "zoom_in" in errors[1]
    assert "outside the image" in errors[2]
    assert "explode failed: RuntimeError: kaboom" in errors[3]
    assert "aspect ratio" in errors[4]
    # What the model saw is what the reward saw: the error text is in the engine's input.
    assert "unknown tool 'magnify'" in tokenizer.decode(engine.requests[2].input_ids)
    assert (dump["tool_calls"], dump["tool_errors"], dump["stop_reason"]) == (6, 5, "answer")
    assert len(dump["geometry"]) == 2
    assert traj["rewards"].item() == 1.0


def test_max_turns_ends_on_a_generated_turn(tokenizer, qwen2vl_processor, tmp_path):
    image = _quadrant_image()
    item = _item(image, tmp_path)
    zoom = _call("zoom_in", bbox_2d=[0, 0, 500, 500])
    # No eos: every turn is cut off by the length limit, so the workflow closes it.
    wf = _workflow(tokenizer, qwen2vl_processor, max_turns=3)
    traj, engine, dump = _run(wf, tokenizer, item, [zoom] * 5, eos=False)

    mm = _check_packing(traj, engine, qwen2vl_processor)
    assert len(engine.requests) == 3
    red = Image.new("RGB", (112, 112), RED)
    assert torch.equal(
        mm["pixel_values"], _processed(qwen2vl_processor, [image, red, red])["pixel_values"]
    )
    whole = _whole_conversation(qwen2vl_processor, item, dump["conversation"], [image, red, red])
    assert whole["input_ids"][0].tolist() == list(engine.requests[-1].input_ids)
    # The last turn's call was not run: the trajectory ends on generated tokens.
    assert traj["loss_mask"][0, -1].item() == 1
    assert (dump["tool_calls"], dump["tool_errors"], dump["stop_reason"]) == (2, 0, "max_turns")
    assert dump["completion"] == zoom and len(dump["conversation"]) == 5
    assert traj["rewards"].item() == 0.0


def test_context_limit_caps_generation_and_drops_an_observation_that_does_not_fit(
    tokenizer, qwen2vl_processor, tmp_path
):
    image = _quadrant_image()
    texts = [_call("zoom_in", bbox_2d=[500, 500, 1000, 1000]), "It is blue"]
    _, engine, _ = _run(
        _workflow(tokenizer, qwen2vl_processor), tokenizer, _item(image, tmp_path), texts
    )
    prompt_len = len(engine.requests[0].input_ids)
    after_obs = len(engine.requests[1].input_ids)

    # Room for 3 new tokens after the observation: the request is capped, the answer truncated.
    wf = _workflow(tokenizer, qwen2vl_processor, max_total_tokens=after_obs + 3)
    traj, engine, dump = _run(wf, tokenizer, _item(image, tmp_path), texts)
    _check_packing(traj, engine, qwen2vl_processor)
    assert engine.requests[0].gconfig.max_new_tokens == min(
        GCONFIG.max_new_tokens, after_obs + 3 - prompt_len
    )
    assert engine.requests[1].gconfig.max_new_tokens == 3
    assert traj["input_ids"].shape[1] == after_obs + 3
    # The reward is told the answer was cut at the limit, not that the model chose to stop.
    assert dump["stop_reason"] == "context_limit"

    # The observation itself does not fit: the episode ends on the tool-calling turn.
    wf = _workflow(tokenizer, qwen2vl_processor, max_total_tokens=after_obs)
    traj, engine, dump = _run(wf, tokenizer, _item(image, tmp_path), texts)
    assert check_trajectory_format(traj)
    assert len(engine.requests) == 1
    n_out = traj["input_ids"].shape[1] - prompt_len
    assert traj["loss_mask"][0].tolist() == [0] * prompt_len + [1] * n_out
    assert traj["multi_modal_input"][0]["image_grid_thw"].shape[0] == 1
    assert (dump["tool_calls"], dump["stop_reason"], len(dump["geometry"])) == (
        1,
        "context_limit",
        1,
    )


def test_text_prompt_with_a_tool_that_adds_the_first_image(tokenizer, qwen2vl_processor, tmp_path):
    item = {
        "id": "t2",
        "messages": [{"role": "user", "content": "Draw a blue square, then name its colour."}],
        "dump_path": str(tmp_path / "reward.json"),
    }
    wf = _workflow(tokenizer, qwen2vl_processor, tools=[DRAW])
    traj, engine, dump = _run(wf, tokenizer, item, [_call("draw", colour="blue"), "blue"])
    mm = _check_packing(traj, engine, qwen2vl_processor)
    square = Image.new("RGB", (56, 56), "blue")
    assert torch.equal(mm["pixel_values"], _processed(qwen2vl_processor, [square])["pixel_values"])
    assert engine.requests[0].image_data == [] and not engine.requests[0].vision_msg_vllm
    (messages,) = engine.requests[1].vision_msg_vllm
    assert messages[0] == item["messages"][0]
    assert dump["geometry"] == [
        {"original_width": 56, "original_height": 56, "model_width": 56, "model_height": 56}
    ]
    assert traj["rewards"].item() == 1.0


def test_prompt_over_the_context_limit_is_rejected(tokenizer, qwen2vl_processor, tmp_path):
    wf = _workflow(tokenizer, qwen2vl_processor, max_total_tokens=10)
    traj, engine, _ = _run(wf, tokenizer, _item(_quadrant_image(), tmp_path), ["blue"])
    assert traj is None and engine.requests == []
    assert list(wf.ledger.by_reason) == ["prompt_too_long"]


def test_configuration_errors(tokenizer, qwen2vl_processor):
    with pytest.raises(UnknownNameError, match="unknown tool .telescope."):
        _workflow(tokenizer, qwen2vl_processor, tools=["telescope"])
    with pytest.raises(ValueError, match="max_turns"):
        _workflow(tokenizer, qwen2vl_processor, max_turns=0)
    with pytest.raises(ValueError, match="two tools are named 'zoom_in'"):
        _workflow(tokenizer, qwen2vl_processor, tools=["zoom_in", "zoom_in"])


def test_the_reward_prompt_is_the_text_the_scored_turn_continues(
    tokenizer, qwen2vl_processor, tmp_path
):
    """As in every workflow: after a rotate call, the reward's prompt holds the call, the tool's
    answer and its image (one placeholder per image), and prompt_ids are the scored turn's."""
    item = _item(_quadrant_image(), tmp_path)
    texts = [_call("rotate", angle=90), "It is blue."]
    traj, engine, dump = _run(_workflow(tokenizer, qwen2vl_processor), tokenizer, item, texts)
    assert traj is not None and dump["completion"] == "It is blue."
    assert '"name": "rotate"' in dump["prompt"] and dump["prompt"].count("<|image_pad|>") == 2
    assert dump["prompt_len"] == len(engine.requests[-1].input_ids)


def test_two_images_in_one_turn_are_named_by_the_indices_they_get(
    tokenizer, qwen2vl_processor, tmp_path
):
    """The tools' texts name the source image; each new image's index is the one its
    announcement gives, also when one turn returns several."""
    item = _item(_quadrant_image(), tmp_path)
    texts = [_call("zoom_in", bbox_2d=[0, 0, 500, 500]) + "\n" + _call("rotate", angle=90), "ok"]
    traj, engine, dump = _run(_workflow(tokenizer, qwen2vl_processor), tokenizer, item, texts)
    _check_packing(traj, engine, qwen2vl_processor)
    observation = dump["conversation"][1]
    assert "Image 1: <image>\nRegion [0, 0, 500, 500] of image 0" in observation, observation
    assert "Image 2: <image>\nImage 0 rotated 90 degrees" in observation, observation
    assert observation.count("Image 1:") == 1 and observation.count("Image 2:") == 1


def _special_text(ctx, **kwargs) -> ToolResult:
    return ToolResult("see <|image_pad|> and <|im_end|> here")


SPECIAL = Tool("special", _special_text, {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    "call",
    [
        _call("zoom_in", bbox_2d=[0, 0, 500, 500], label="<|image_pad|>"),
        _call("<|image_pad|>"),
        _call("special"),
    ],
    ids=["label", "tool-name", "tool-text"],
)
def test_special_token_text_in_a_tool_turn_becomes_an_error_the_model_sees(
    tokenizer, qwen2vl_processor, tmp_path, call
):
    """Text the tokenizer would read as a special token (an image placeholder, a turn end),
    whether the model wrote it or a tool returned it, cannot go into the observation: the call
    is an error shown to the model, as any failed call, and the episode goes on."""
    item = _item(_quadrant_image(), tmp_path)
    wf = _workflow(tokenizer, qwen2vl_processor, tools=["zoom_in", SPECIAL])
    traj, engine, dump = _run(wf, tokenizer, item, [call, "done"], as_characters=True)
    assert traj is not None, wf.ledger.summary()
    _check_packing(traj, engine, qwen2vl_processor)
    observation = dump["conversation"][1]
    assert "<|image_pad|>" not in observation and "<|im_end|>" not in observation
    assert "special token" in observation
    assert (dump["tool_calls"], dump["tool_errors"]) == (1, 1)


def test_max_turns_must_be_a_whole_number(tokenizer, qwen2vl_processor):
    for bad in (2.0, 2.5, True, "3"):
        with pytest.raises((TypeError, ValueError), match="max_turns"):
            _workflow(tokenizer, qwen2vl_processor, max_turns=bad)


def test_an_unknown_box_frame_is_refused_at_construction(tokenizer, qwen2vl_processor):
    """Else every tool call fails, shown to the model as its own mistake."""
    with pytest.raises(ValueError, match="box_frame 'bogus'.*norm1000"):
        _workflow(tokenizer, qwen2vl_processor, box_frame="bogus")
