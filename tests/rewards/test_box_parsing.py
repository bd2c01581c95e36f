"""Parsers per model family: hand-written outputs with the values each convention implies."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlrollout.rewards.box_parsing import (
    PARSERS,
    get_parser,
    parse_florence2,
    parse_glm4v,
    parse_internvl,
    parse_molmo,
    parse_paligemma,
    parse_plain,
    parse_qwen2_5_vl,
    parse_qwen2_vl,
    parse_qwen3_vl,
)
from vlrollout.rewards.frames import Frame


def test_qwen2_vl_tokens_labels_and_frame():
    text = (
        "<|object_ref_start|>the dog<|object_ref_end|><|box_start|>(250,250),(750,750)<|box_end|>"
        " and <|box_start|>(1, 2),(3, 4)<|box_end|>"
    )
    out = parse_qwen2_vl(text)
    assert out.frame is Frame.NORM1000
    assert out.boxes == [(250, 250, 750, 750), (1, 2, 3, 4)]
    assert out.box_labels == ["the dog", None]


def test_qwen2_vl_special_tokens_stripped_and_qwen_vl_form():
    # skip_special_tokens=True decoding leaves "the dog(250,250),(750,750)"
    assert parse_qwen2_vl("the dog(250,250),(750,750)").boxes == [(250, 250, 750, 750)]
    assert parse_qwen2_vl("<ref>cat</ref><box>(1,2),(3,4)</box>").box_labels == ["cat"]


def test_qwen2_vl_malformed_box_is_an_issue_not_an_error():
    out = parse_qwen2_vl("<|box_start|>(1,2),(3)<|box_end|>")
    assert out.boxes == [] and "3 numbers" in out.issues[0]


def test_qwen2_5_vl_json_variants():
    fenced = '```json\n[\n {"bbox_2d": [161, 119, 483, 357], "label": "cat"},\n {"point_2d": [10, 20], "label": "eye"}\n]\n```'
    out = parse_qwen2_5_vl(fenced)
    assert out.frame is Frame.MODEL
    assert out.boxes == [(161, 119, 483, 357)] and out.box_labels == ["cat"]
    assert out.points == [(10, 20)] and out.point_labels == ["eye"]
    # prose around a bare object; string numbers are accepted
    assert parse_qwen2_5_vl('Here: {"bbox_2d": ["1", 2, 3, 4]} done').boxes == [(1, 2, 3, 4)]
    # truncated JSON (generation cut off) is read by key
    assert parse_qwen2_5_vl('[{"bbox_2d": [5, 6, 7, 8], "label": "a"}, {"bbox_2d": [1').boxes == [
        (5, 6, 7, 8)
    ]
    # Python's json accepts NaN: it is passed through for the scorer to reject
    assert math.isnan(parse_qwen2_5_vl('{"bbox_2d": [NaN, 1, 2, 3]}').boxes[0][0])
    bad = parse_qwen2_5_vl('{"bbox_2d": [1, 2, 3]}')
    assert bad.boxes == [] and "not 4 numbers" in bad.issues[0]


def test_qwen3_vl_is_norm1000():
    out = parse_qwen3_vl('{"bbox_2d": [250, 250, 750, 750], "label": "x"}')
    assert out.frame is Frame.NORM1000 and out.boxes == [(250, 250, 750, 750)]


def test_internvl_multiple_boxes_in_one_tag():
    out = parse_internvl("<ref>cars</ref><box>[[10, 20, 30, 40], [50, 60, 70, 80]]</box>")
    assert out.frame is Frame.NORM1000
    assert out.boxes == [(10, 20, 30, 40), (50, 60, 70, 80)]
    assert out.box_labels == ["cars", "cars"]


def test_internvl_tags_stripped_by_skip_special_tokens():
    # InternVL adds <ref>, </ref>, <box>, </box> as special tokens: verl's and TRL's decoding
    # (skip_special_tokens=True) leaves "cat[[...]]", which InternVL's own evaluator reads.
    out = parse_internvl("cat[[100, 300, 500, 900]] and dogs[[1, 2, 3, 4], [5, 6, 7, 8]]")
    assert out.boxes == [(100, 300, 500, 900), (1, 2, 3, 4), (5, 6, 7, 8)]
    assert out.frame is Frame.NORM1000
    assert parse_internvl("a single list [1, 2, 3, 4] is prose").boxes == []
    tagged = parse_internvl("<ref>cat</ref><box>[[1, 2, 3, 4]]</box> then [[5, 6, 7, 8]]")
    assert tagged.boxes == [(1, 2, 3, 4)]  # tags present: only the tagged box


def test_glm4v_reads_the_box_between_its_tokens():
    text = (
        "The cat is around [0, 0, 500, 500] of the frame. "
        "<|begin_of_box|>[100,300,500,900]<|end_of_box|>"
    )
    out = parse_glm4v(text)
    assert out.frame is Frame.NORM1000 and out.boxes == [(100, 300, 500, 900)]
    assert parse_glm4v("<|begin_of_box|>[[1,2,3,4],[5,6,7,8]]<|end_of_box|>").boxes == [
        (1, 2, 3, 4),
        (5, 6, 7, 8),
    ]


def test_glm4v_tokens_stripped_and_full_width_punctuation():
    # GLM's box tokens are special: skip_special_tokens=True decoding leaves the bare list.
    assert parse_glm4v("the cat: [100, 300, 500, 900]").boxes == [(100, 300, 500, 900)]
    full_width = [
        "[100，300，500，900]",
        "［100, 300, 500, 900］",
        "［１００，３００，５００，９００］",
    ]
    for inner in full_width:
        assert parse_glm4v(f"<|begin_of_box|>{inner}<|end_of_box|>").boxes == [
            (100, 300, 500, 900)
        ], inner
        assert parse_glm4v(inner).boxes == [(100, 300, 500, 900)], inner


def test_stripped_and_cut_off_box_forms():
    assert parse_internvl("cat［［１０，２０，３０，４０］］").boxes == [(10, 20, 30, 40)]
    cut = "prose [1,1,2,2] then <|begin_of_box|>[100,200,300,400]"  # stopped before its close
    assert parse_glm4v(cut).boxes == [(100, 200, 300, 400)]
    assert get_parser("glm4v_moe") is parse_glm4v  # GLM-4.5V's model_type


def test_paligemma_is_y_first_over_1023():
    # tokens y1=0256 x1=0512 y2=0767 x2=1023 -> x1 = 512/1023, y1 = 256/1023, x2 = 1, y2 = 767/1023
    out = parse_paligemma("<loc0256><loc0512><loc0767><loc1023> cat ; <loc0000>")
    assert out.frame is Frame.NORM1
    assert out.boxes == [(512 / 1023, 256 / 1023, 1.0, 767 / 1023)]
    assert out.box_labels == ["cat"]


def test_florence2_is_x_first_bin_centres():
    # bin N -> (N + 0.5) / 1000, as Florence2Processor's dequantize
    out = parse_florence2(
        "car<loc_100><loc_200><loc_300><loc_400>dog<loc_0><loc_0><loc_999><loc_999>"
    )
    assert out.boxes == [(0.1005, 0.2005, 0.3005, 0.4005), (0.0005, 0.0005, 0.9995, 0.9995)]
    assert out.box_labels == ["car", "dog"]


def test_molmo_point_and_points():
    out = parse_molmo(
        '<point x="61.5" y="40.6" alt="cup">cup</point> <points x1="10" y1="20" x2="30" y2="40" '
        'alt="dogs">dogs</points>'
    )
    assert out.frame is Frame.NORM1
    flat = [v for p in out.points for v in p]
    assert flat == pytest.approx([0.615, 0.406, 0.1, 0.2, 0.3, 0.4])
    assert out.point_labels == ["cup", "dogs", "dogs"]
    assert parse_molmo('<point y="1">x</point>').issues


def test_plain_declared_frame():
    out = parse_plain("boxes: [1, 2, 3, 4] and [[5.5, 6, 7, 8]]", "norm1000")
    assert out.frame is Frame.NORM1000 and out.boxes == [(1, 2, 3, 4), (5.5, 6, 7, 8)]
    assert get_parser("plain", "model")("[1,2,3,4]").frame is Frame.MODEL


def test_get_parser_aliases_and_errors():
    assert get_parser("Qwen2.5-VL") is parse_qwen2_5_vl
    with pytest.raises(ValueError, match="unknown box family"):
        get_parser("llava")


@pytest.mark.parametrize(
    ("family", "parser"),
    [
        ("qwen3_vl_moe", parse_qwen3_vl),
        ("qwen3_5", parse_qwen3_vl),
        ("qwen3_5_moe", parse_qwen3_vl),
        ("glm4v", parse_glm4v),
        ("glm46v", parse_glm4v),
    ],
)
def test_get_parser_takes_the_model_families_that_eval_and_train_take(family, parser):
    assert get_parser(family) is parser


def test_a_family_without_a_box_convention_is_told_to_declare_its_frame():
    with pytest.raises(ValueError, match="plain_frame") as info:
        get_parser("gemma3")
    assert "no box convention of its own" in str(info.value)


FRAGMENTS = [
    "<|box_start|>", "<|box_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "(", ")", ",",
    "[", "]", "{", "}", '"bbox_2d"', '"point_2d"', ":", "```json", "```", "<box>", "</box>",
    "<ref>", "</ref>", "<loc0123>", "<loc_5>", '<point x="', '" y="', '">', "</point>",
    "<points x1=\"", "1", "2.5", "-3", "NaN", "1e400", " ", "abc",
]  # fmt: skip
texts = st.one_of(
    st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)
)


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from(sorted(PARSERS)))
def test_parsers_never_raise_and_return_well_formed_output(text, family):
    out = get_parser(family)(text)
    assert all(len(b) == 4 and all(isinstance(v, float) for v in b) for b in out.boxes)
    assert all(len(p) == 2 and all(isinstance(v, float) for v in p) for p in out.points)
    assert len(out.box_labels) == len(out.boxes) and len(out.point_labels) == len(out.points)
    assert isinstance(out.frame, Frame)


def test_location_tokens_past_the_models_bins_are_issues_not_boxes():
    """PaliGemma has <loc0000>..<loc1023> and Florence-2 <loc_0>..<loc_999>: a box written with
    another is no box of the model's (read, it would lie past the image edge)."""
    pali = parse_paligemma("<loc1024><loc0000><loc0100><loc0100> cat")
    assert pali.boxes == [] and pali.issues == ["<loc1024> is past PaliGemma's 1024 location bins"]
    florence = parse_florence2("car<loc_0><loc_1000><loc_5><loc_5>")
    assert florence.boxes == [] and florence.issues == [
        "<loc_1000> is past Florence-2's 1000 location bins"
    ]


@pytest.mark.parametrize(
    "text",
    ["（１０，２０），（３０，４０）", "<|box_start|>（１０，２０），（３０，４０）<|box_end|>"],
)
def test_qwen2_vl_reads_full_width_pairs_as_the_other_families_do(text):
    assert parse_qwen2_vl(text).boxes == [(10, 20, 30, 40)]


@pytest.mark.parametrize(
    ("parse", "text", "boxes", "issues"),
    [
        (
            parse_internvl,
            "<ref>cat</ref><box>[[100, 200, 300], [400, 500, 600, 700, 800]]</box>",
            [],
            ["a list of 3 numbers is not a box", "a list of 5 numbers is not a box"],
        ),
        (parse_internvl, "<box>[[1, 2, 3, 4], [5, 6, 7]]</box>", [(1, 2, 3, 4)], 1),
        (parse_glm4v, "<|begin_of_box|>[1, 2, 3, 4, 5, 6, 7, 8]<|end_of_box|>", [], 1),
        (
            parse_glm4v,
            "<|begin_of_box|>[[1, 2, 3, 4], [5, 6, 7, 8]]<|end_of_box|>",
            [(1, 2, 3, 4), (5, 6, 7, 8)],
            0,
        ),
        (parse_qwen2_vl, "<|box_start|>(100,200,300),(400)<|box_end|>", [], 1),
        (parse_qwen2_vl, "<|box_start|>(1,2),(3,4),(5,6)<|box_end|>", [], 1),
        (parse_qwen2_vl, "<ref>a</ref><box>(1,2),(3,4)</box>", [(1, 2, 3, 4)], 0),
    ],
)
def test_a_box_is_one_written_list_never_numbers_of_several(parse, text, boxes, issues):
    """Each ``[...]`` list (or ``(x1,y1),(x2,y2)`` pair of points) in a box block is one box:
    numbers are never pooled across lists into fours, and a list that is not a box is named."""
    out = parse(text)
    assert out.boxes == boxes
    if isinstance(issues, list):
        assert out.issues == issues
    else:
        assert len(out.issues) == issues, out.issues
