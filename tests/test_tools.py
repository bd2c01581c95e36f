"""vlrollout.tools: box conversion, built-in tools, argument validation, registry, call parsing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlrollout.processors.base import ImageGeometry
from vlrollout.registry import UnknownNameError
from vlrollout.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolResult,
    available_tools,
    box_to_pixels,
    get_tool,
    parse_tool_calls,
    register_tool,
    resolve_tools,
    run_tool_call,
    run_tool_calls,
    tools_system_prompt,
    unregister_tool,
    validate_arguments,
)

GEO = ImageGeometry(640, 480, 644, 476)


def _pattern(width=640, height=480) -> Image.Image:
    """Every pixel distinct: R = x % 256, G = y % 256, B = (x // 256) * 16 + y // 256."""
    x, y = np.meshgrid(np.arange(width), np.arange(height))
    rgb = np.stack([x % 256, y % 256, (x // 256) * 16 + y // 256], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb)


def _ctx(image=None, geometry=GEO, frame="norm1000") -> ToolContext:
    return ToolContext([image or _pattern()], [geometry], frame)


# -- box conversion -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("box", "frame", "expected"),
    [
        # 0-1000: x * 640 / 1000, y * 480 / 1000.
        ([250, 250, 750, 750], "norm1000", (160, 120, 480, 360)),
        # Model frame (Qwen2.5-VL): x * 640 / 644, y * 480 / 476.
        ([161, 119, 483, 357], "model", (160, 120, 480, 360)),
        # Rounded outward: 64.0, 48.0, 64.64 -> 65, 48.48 -> 49.
        ([100, 100, 101, 101], "norm1000", (64, 48, 65, 49)),
        # Clamped: -64 -> 0, 576 -> 480.
        ([-100, 900, 500, 1200], "norm1000", (0, 432, 320, 480)),
        ([0.1, 0.2, 0.5, 1.0], "norm1", (64, 96, 320, 480)),
    ],
)
def test_box_to_pixels_hand_computed(box, frame, expected):
    assert box_to_pixels(box, GEO, frame, (640, 480)) == expected


def test_box_to_pixels_ignores_float_noise():
    # 750 * (68 / 1000) = 51.00000000000001 in floating point: still pixel 51, not 52.
    geo = ImageGeometry(68, 68, 56, 56)
    assert box_to_pixels([0, 0, 750, 750], geo, "norm1000", (68, 68)) == (0, 0, 51, 51)


@pytest.mark.parametrize(
    ("box", "message"),
    [
        ([500, 500, 500, 700], "empty or reversed"),
        ([600, 0, 500, 100], "empty or reversed"),
        ([1100, 0, 1200, 100], "outside the image"),
        ([-300, -300, -1, -1], "outside the image"),
        ([0, 0, float("nan"), 10], "finite"),
        ([0, 0, 10], "four numbers"),
        ([0, 0, "10", 10], "four numbers"),
    ],
)
def test_box_to_pixels_rejects(box, message):
    with pytest.raises(ToolError, match=message):
        box_to_pixels(box, GEO, "norm1000", (640, 480))


def test_crop_returns_the_pixels_of_the_box():
    image = _pattern()
    result = BUILTIN_TOOLS["zoom_in"](_ctx(image), {"bbox_2d": [250, 250, 750, 750]})
    (crop,) = result.images
    assert np.array_equal(np.asarray(crop), np.asarray(image)[120:360, 160:480])
    assert "320x240" in result.text


def test_crop_uses_the_geometry_of_the_chosen_image():
    small = _pattern(100, 50)
    ctx = ToolContext([_pattern(), small], [GEO, ImageGeometry(100, 50, 112, 56)], "model")
    (crop,) = BUILTIN_TOOLS["crop"](ctx, {"bbox_2d": [56, 0, 112, 28], "image_index": 1}).images
    # Model frame 112x56 -> original 100x50: x 50..100, y 0..25.
    assert np.array_equal(np.asarray(crop), np.asarray(small)[0:25, 50:100])


def test_crop_of_a_missing_image_is_a_tool_error():
    with pytest.raises(ToolError, match="image_index 2 does not exist.*from the next turn on"):
        BUILTIN_TOOLS["crop"](_ctx(), {"bbox_2d": [0, 0, 10, 10], "image_index": 2})


def test_context_decodes_base64_images_lazily():
    import base64
    import io

    buf = io.BytesIO()
    _pattern(64, 32).save(buf, format="PNG")
    ctx = ToolContext([base64.b64encode(buf.getvalue()).decode()], [ImageGeometry(64, 32, 56, 28)])
    assert np.array_equal(np.asarray(ctx.image(0)), np.asarray(_pattern(64, 32)))


@pytest.mark.parametrize("angle", [90, 180, 270])
def test_rotate_is_counter_clockwise_and_exact(angle):
    image = _pattern(6, 4)
    (rotated,) = BUILTIN_TOOLS["rotate"](_ctx(image), {"angle": angle}).images
    assert np.array_equal(np.asarray(rotated), np.rot90(np.asarray(image), k=angle // 90))


def test_rotate_rejects_other_angles():
    with pytest.raises(ToolError, match=r"is not one of \[90, 180, 270\]"):
        BUILTIN_TOOLS["rotate"](_ctx(), {"angle": 45})


def test_image_info_is_text_only():
    result = BUILTIN_TOOLS["image_info"](_ctx(), {})
    assert result.images == []
    assert "640x480" in result.text and "644x476" in result.text and "1000" in result.text


# -- argument validation ------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1},
        "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
        "mode": {"type": "string", "enum": ["a", "b"]},
    },
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "arguments: 'n' is a required property"),
        ({"n": True}, "arguments.n: True is not of type 'integer'"),
        ({"n": 1.5}, "arguments.n: 1.5 is not of type 'integer'"),
        ({"n": 0}, "arguments.n: 0 is less than the minimum of 1"),
        ({"n": 1, "xs": [1, "2"]}, r"arguments.xs\[1\]: '2' is not of type 'number'"),
        ({"n": 1, "xs": [1, 2, 3]}, "too long"),
        ({"n": 1, "mode": "c"}, "arguments.mode: 'c' is not one of"),
        ({"n": 1, "extra": 1}, r"'extra' was unexpected"),
        ([1], r"\[1\] is not of type 'object'"),
        ({"n": 1, "xs": [float("nan")]}, r"arguments.xs\[0\] must be a finite number"),
    ],
)
def test_validate_arguments_rejects(args, message):
    with pytest.raises(ToolError, match=message):
        validate_arguments(args, SCHEMA)


def test_validate_arguments_accepts():
    validate_arguments({"n": 2, "xs": [1, 2.5], "mode": "a"}, SCHEMA)


# -- registry -----------------------------------------------------------------------------


def _upper(ctx, text: str) -> str:
    return text.upper()


UPPER_TOOL = Tool("upper", _upper, {"type": "object", "properties": {"text": {"type": "string"}}})
NOT_A_TOOL = _upper


def test_register_and_get_by_name():
    register_tool("shout", _upper, {"type": "object", "properties": {"text": {"type": "string"}}})
    try:
        tool = get_tool("shout")
        assert tool(ToolContext(), {"text": "hi"}).text == "HI"
        assert "shout" in available_tools()
        with pytest.raises(ValueError, match="already registered"):
            register_tool("shout", lambda ctx: "x", {"type": "object"})
        register_tool(Tool("shout", lambda ctx: "x", {"type": "object"}), overwrite=True)
        assert get_tool("shout")(ToolContext(), {}).text == "x"
    finally:
        unregister_tool("shout")
    with pytest.raises(UnknownNameError, match="unknown tool 'shout'"):
        get_tool("shout")


def test_get_by_import_path():
    assert get_tool(f"{__name__}.UPPER_TOOL") is UPPER_TOOL
    with pytest.raises(TypeError, match="not a Tool"):
        get_tool(f"{__name__}.NOT_A_TOOL")
    with pytest.raises((ImportError, AttributeError), match="no_such_tool"):
        get_tool(f"{__name__}.no_such_tool")


def test_register_rejects_builtin_dotted_and_schemaless_names():
    with pytest.raises(ValueError, match="built-in"):
        register_tool("zoom_in", _upper, {"type": "object"})
    with pytest.raises(ValueError, match="dots"):
        register_tool("a.b", _upper, {"type": "object"})
    with pytest.raises(ValueError, match="JSON schema"):
        register_tool("nameless", _upper)
    with pytest.raises(ValueError, match="type 'object'"):
        Tool("bad", _upper, {"type": "string"})


def test_resolve_tools_mixes_names_paths_and_objects():
    table = resolve_tools(["zoom_in", f"{__name__}.UPPER_TOOL", BUILTIN_TOOLS["rotate"]])
    assert list(table) == ["zoom_in", "upper", "rotate"]
    with pytest.raises(ValueError, match="at least one"):
        resolve_tools([])


def test_tools_system_prompt_lists_every_tool_spec():
    text = tools_system_prompt(resolve_tools(["zoom_in", "rotate"]).values())
    assert text.count('"type": "function"') == 2 and '"name": "rotate"' in text
    assert "<tool_call>" in text


# -- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call>',
        '<tool_call>\n  {"name": "zoom_in",\n "arguments": {"bbox_2d": [1, 2, 3, 4]}}  \n</tool_call>',
        '<tool_call>\n```json\n{"name": "zoom_in", "arguments": {"bbox_2d": [1, 2, 3, 4]}}\n```\n</tool_call>',
        '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [1, 2, 3, 4]}} I will zoom.</tool_call>',
        'Thinking... <tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call> done',
        '<tool_call>{"name": "zoom_in", "arguments": "{\\"bbox_2d\\": [1, 2, 3, 4]}"}</tool_call>',
        '<tool_call>{"name": " zoom_in", "parameters": {"bbox_2d": [1, 2, 3, 4]}}',  # cut off
    ],
)
def test_parse_variants(text):
    (call,) = parse_tool_calls(text)
    assert call.ok, call.error
    assert (call.name, call.arguments) == ("zoom_in", {"bbox_2d": [1, 2, 3, 4]})


def test_parse_several_calls_in_order():
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "b"}</tool_call><tool_call>{"name": "c", "arguments": {"x": 1}}'
    )
    assert [(c.name, c.arguments) for c in parse_tool_calls(text)] == [
        ("a", {}),
        ("b", {}),
        ("c", {"x": 1}),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>{"name": "a", "arguments": {</tool_call>', "invalid JSON"),
        ("<tool_call>zoom please</tool_call>", "no JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>', "not JSON"),
        ('<tool_call>{"name": "a", "arguments": {"x": 1</tool_call>', "not closed"),
    ],
)
def test_parse_errors_are_reported_not_raised(text, message):
    text = text if "not closed" not in message else text.replace("</tool_call>", "")
    (call,) = parse_tool_calls(text)
    assert not call.ok and message in call.error


def test_no_tags_means_no_call():
    assert parse_tool_calls('The answer is {"name": "zoom_in"}') == []


# -- running ------------------------------------------------------------------------------


def _raises(ctx):
    raise KeyError("inner")


def test_run_tool_call_turns_every_failure_into_an_error_outcome():
    tools = {
        **BUILTIN_TOOLS,
        "boom": Tool("boom", _raises, {"type": "object"}),
        "bad": Tool("bad", lambda ctx: ToolResult("x", ["not an image"]), {"type": "object"}),
        "number": Tool("number", lambda ctx: ToolResult(123, []), {"type": "object"}),
        "one": Tool("one", lambda ctx: ToolResult("x", _pattern(4, 4)), {"type": "object"}),
        "none": Tool("none", lambda ctx: ToolResult("x", None), {"type": "object"}),
    }
    ctx = _ctx()
    cases = [
        (ToolCall(None, error="invalid JSON"), "invalid JSON"),
        (ToolCall("nope"), "unknown tool 'nope'"),
        (ToolCall("rotate", {"angle": 45}), "is not one of"),
        (ToolCall("zoom_in", {"bbox_2d": [2000, 0, 3000, 10]}), "outside the image"),
        (ToolCall("boom"), "boom failed: KeyError"),
        (ToolCall("bad"), "images must be PIL images, got ['str']"),
        (ToolCall("number"), "its text must be a string, got int"),
        (ToolCall("one"), "images must be a list of PIL images, got one Image"),
        (ToolCall("none"), "images must be a list of PIL images, got NoneType"),
    ]
    for call, message in cases:
        outcome = run_tool_call(call, tools, ctx)
        assert not outcome.ok and message in outcome.error
        assert outcome.result.text == f"Error: {outcome.error}" and outcome.result.images == []
    ok = run_tool_call(ToolCall("rotate", {"angle": 90}), tools, ctx)
    assert ok.ok and len(ok.result.images) == 1


def test_a_tools_images_given_as_a_generator_are_all_shown():
    """The type check must not use up a generator that the observation then finds empty."""
    images = (_pattern(4 + k, 4) for k in range(2))
    tools = {"gen": Tool("gen", lambda ctx: ToolResult("x", images), {"type": "object"})}
    outcome = run_tool_call(ToolCall("gen"), tools, _ctx())
    assert outcome.ok and [im.size for im in outcome.result.images] == [(4, 4), (5, 4)]


def test_run_tool_calls_caps_calls_per_turn():
    calls = [ToolCall("image_info")] * 3
    outcomes = run_tool_calls(calls, BUILTIN_TOOLS, _ctx(), max_calls=2)
    assert [o.ok for o in outcomes] == [True, True, False]
    assert "at most 2" in outcomes[2].error


# -- observation encoding -----------------------------------------------------------------


def _outcome(text="", images=()):
    from vlrollout.tools import ToolOutcome

    return ToolOutcome("t", ToolResult(text, list(images)))


def test_response_parts_number_new_images_in_order():
    from vlrollout.tools.observation import parts_text, response_parts

    red, blue = Image.new("RGB", (8, 8), "red"), Image.new("RGB", (8, 8), "blue")
    parts = response_parts([_outcome("a", [red, blue]), _outcome("b")], first_image_index=3)
    assert parts_text(parts) == (
        "<tool_response>\nImage 3: <image>\nImage 4: <image>\na\n</tool_response>\n"
        "<tool_response>\nb\n</tool_response>"
    )


def test_text_observation_equals_the_chat_template_difference(tokenizer, qwen2vl_processor):
    from vlrollout.processors.auto import AutoProcessorPreprocessor
    from vlrollout.tools.observation import ObservationEncoder
    from vlrollout.workflows.multi_attempt import feedback_token_ids

    encoder = ObservationEncoder(AutoProcessorPreprocessor(qwen2vl_processor))
    obs = encoder.encode([_outcome("Image 0: 64x64 pixels")], 1, close_turn=False)
    expected = "<tool_response>\nImage 0: 64x64 pixels\n</tool_response>"
    assert obs.token_ids == feedback_token_ids(tokenizer, expected)
    assert obs.multi_modal_input == {} and obs.mm_token_type_ids == [0] * len(obs.token_ids)
    closed = encoder.encode([_outcome("Image 0: 64x64 pixels")], 1, close_turn=True)
    assert closed.token_ids == [tokenizer.eos_token_id, *obs.token_ids]


def test_image_observation_expands_placeholders_per_image(tokenizer, qwen2vl_processor):
    from vlrollout.processors.auto import AutoProcessorPreprocessor
    from vlrollout.tools.observation import ObservationEncoder

    pre = AutoProcessorPreprocessor(qwen2vl_processor, max_pixels=56 * 56)
    encoder = ObservationEncoder(pre)
    images = [Image.new("RGB", (200, 100), "red"), Image.new("RGB", (30, 60), "blue")]
    huge = Image.new("RGB", (150, 150))
    pre.max_image_pixels = 200 * 100
    obs = encoder.encode([_outcome("x", images), _outcome("y", [huge])], 2, close_turn=False)
    grid = obs.multi_modal_input["image_grid_thw"]
    direct = qwen2vl_processor(
        text=["<|vision_start|><|image_pad|><|vision_end|>" * 2],
        images=[images],
        images_kwargs={"size": {"shortest_edge": 56 * 56, "longest_edge": 56 * 56}},
        return_tensors="pt",
    )
    assert torch.equal(grid, direct["image_grid_thw"])
    assert torch.equal(obs.multi_modal_input["pixel_values"], direct["pixel_values"])
    image_token = qwen2vl_processor.image_token_id
    assert obs.token_ids.count(image_token) == int(grid.prod(-1).sum()) // 4
    assert obs.mm_token_type_ids == [int(t == image_token) for t in obs.token_ids]
    assert [(g.original_width, g.original_height) for g in obs.geometry] == [(200, 100), (30, 60)]
    # The over-limit image became an error for its call; the other call kept its images.
    assert [o.ok for o in obs.outcomes] == [True, False] and obs.num_errors == 1
    assert "image_too_large" not in obs.text and "unusable" in obs.text


def test_a_box_is_cropped_from_the_engine_image_a_plugin_letterboxed():
    # A letterbox plug-in: the 200x100 original padded to a 200x200 canvas (50 px on top), which
    # the processor resizes to 112x112. The engine image the tool crops is the canvas.
    geo = ImageGeometry(200, 100, 112, 112, scale_x=0.56, scale_y=0.56, offset_y=28.0)
    square_in_model = [11.2, 39.2, 33.6, 61.6]  # the original's [20, 20, 60, 60]
    assert box_to_pixels(square_in_model, geo, "model", (200, 200)) == (20, 70, 60, 110)
    assert box_to_pixels(square_in_model, geo, "model", (200, 100)) == (20, 20, 60, 60)
