"""Rewards and parsers under hostile model output: deep nesting, huge numbers, long garbage.

Linear time is checked by ``test_parser_linear_time.py`` (10 KB against 100 KB) and measured by
``bench/bench_parsers.py`` (up to 1 MB); here: no exception, bounded recursion, the exact reading
of huge numbers, and the same answers as the simple regexes they replace.
"""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlrollout.rewards.answer import (
    ChoiceReward,
    CountReward,
    MathReward,
    NumericReward,
    read_count,
)
from vlrollout.rewards.box_parsing import PARSERS
from vlrollout.rewards.format import LengthPenalty
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.rewards.result import MAX_OUTPUT_CHARS
from vlrollout.rewards.temporal import TemporalIoUReward, temporal_iou
from vlrollout.rewards.temporal_parsing import parse_segments
from vlrollout.rewards.text_extract import last_boxed, tag_blocks

BOX = '{"bbox_2d": [1, 2, 3, 4], "label": "a]"}'


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_deep_json_nesting_does_not_recurse(family):
    # Deeper than Python's recursion limit: a recursive JSON decoder would raise RecursionError.
    assert PARSERS[family]("[" * 1000).boxes == []
    deep = "[" * 5000 + BOX + "]" * 5000
    parsed = PARSERS[family](deep)
    assert parsed.boxes == [(1.0, 2.0, 3.0, 4.0)] and parsed.box_labels == ["a]"]


@settings(max_examples=60, deadline=None)
@given(
    depth=st.integers(0, 3000),
    opens=st.text(alphabet="[{", min_size=1, max_size=3),
    closed=st.booleans(),
)
def test_any_nesting_depth_finds_the_box(depth, opens, closed):
    prefix = (opens * depth)[:depth]
    closer = "".join({"[": "]", "{": "}"}[c] for c in reversed(prefix)) if closed else ""
    for family in ("qwen2_5_vl", "qwen3_vl"):
        assert PARSERS[family](prefix + BOX + closer).boxes == [(1.0, 2.0, 3.0, 4.0)]


def huge_number_texts(big: str) -> list[str]:
    """One box (or point) in each family's format whose first number is ``big``."""
    return [
        f'{{"bbox_2d": [{big}, 1, 2, 3]}}',
        f"<|box_start|>({big},1),(2,3)<|box_end|>",
        f"<ref>a</ref><box>[[{big}, 1, 2, 3]]</box>",
        f"a<loc_{big}><loc_1><loc_2><loc_3>",
        f'<point x="{big}" y="1">a</point>',
        f"[{big}, 1, 2, 3]",
        f"<|begin_of_box|>[{big}, 1, 2, 3]<|end_of_box|>",
    ]


INF_BOX = ([(math.inf, 1.0, 2.0, 3.0)], [])
#: family -> {index in huge_number_texts(): (boxes, points)}; every other text reads as nothing.
#: A huge number in a family's own format reads as inf (scoring then refuses the box as
#: ``non_finite_box``); florence2's and paligemma's bins have at most six and exactly four digits,
#: so their formats do not match a 5000-digit bin at all.
HUGE_NUMBER_READS = {
    "florence2": {},
    "glm4v": {0: INF_BOX, 2: INF_BOX, 5: INF_BOX, 6: INF_BOX},  # no box tokens: bare lists
    "internvl": {2: INF_BOX},
    "molmo": {4: ([], [(math.inf, 0.01)])},
    "paligemma": {},
    "plain": {0: INF_BOX, 2: INF_BOX, 5: INF_BOX, 6: INF_BOX},
    "qwen2_5_vl": {0: INF_BOX},
    "qwen2_vl": {1: INF_BOX},
    "qwen3_vl": {0: INF_BOX},
    "qwen_vl": {1: INF_BOX},
}


def test_every_parser_has_its_huge_number_reads():
    assert sorted(HUGE_NUMBER_READS) == sorted(PARSERS)


@pytest.mark.parametrize("digits", [400, 5000])  # past a float's range; past int()'s limit
@pytest.mark.parametrize("family", sorted(PARSERS))
def test_huge_numbers_read_as_inf_without_raising(family, digits):
    for i, text in enumerate(huge_number_texts("9" * digits)):
        parsed = PARSERS[family](text)
        want = HUGE_NUMBER_READS[family].get(i, ([], []))
        assert (parsed.boxes, parsed.points) == want, (family, text[:40])


def test_huge_numbers_in_answer_rewards_are_reasons():
    big = "7" * 4301
    assert CountReward().score("p", big, [], [], answer=3).reason == "number_too_long"
    assert NumericReward().score("p", big, [], [], answer=3).reason == "no_number"
    assert read_count(f"[{big}]") == (None, "number_too_long")
    r = GroundingReward("qwen3_vl", "iou", label_frame="norm1000")
    res = r.score("p", f'{{"bbox_2d": [1, 1, {big}, 5]}}', [], [], boxes=[1, 1, 9, 9])
    assert (res.value, res.reason) == (0.0, "non_finite_box")


def test_a_long_output_is_not_read_but_failed_with_a_reason():
    """The answer readers take the last answer: a prefix of a long completion can keep an
    earlier answer and lose the final one, so a completion past the cap is not read."""
    text = "First guess: 3. " + "hmm " * (MAX_OUTPUT_CHARS // 4) + "The final answer is 4."
    for reward, labels in (
        (NumericReward(), {"answer": 3}),
        (CountReward(), {"answer": 3}),
        (ChoiceReward(), {"answer": "A", "choices": ["x", "y"]}),
    ):
        res = reward.score(
            "p", text.replace("3", "(A)") if labels.get("choices") else text, [], [], **labels
        )
        assert (res.value, res.reason) == (0.0, "output_too_long"), reward
        assert res.details["chars"] > MAX_OUTPUT_CHARS
    giou = GroundingReward("qwen3_vl", "giou", label_frame="norm1000")
    long_box = '{"bbox_2d": [1, 1, 9, 9]} ' + "x" * MAX_OUTPUT_CHARS
    assert giou.score("p", long_box, [], [], boxes=[1, 1, 9, 9]).value == -1.0
    r = NumericReward()
    r.max_output_chars = None
    assert r.score("p", text, [], [], answer=4).value == 1.0
    penalty = LengthPenalty(max_length=10, cache_length=5)
    assert penalty.score("p", "x" * (MAX_OUTPUT_CHARS + 1), [], list(range(20))).value == -1.0


def test_math_reward_on_repeated_unclosed_boxed():
    res = MathReward().score("p", "\\boxed{" * 20000, [], [], answer="1")
    assert res.value == 0.0 and res.reason is not None


_TAG_TEXT = st.lists(st.sampled_from(["<a>", "</a>", "x", "<"]), max_size=12).map("".join)


@given(_TAG_TEXT)
def test_tag_blocks_equal_the_lazy_regex(text):
    want = [m.span(1) for m in re.finditer(r"<a>(.*?)</a>", text, re.DOTALL)]
    assert tag_blocks(text, "<a>", "</a>") == want


def _last_boxed_reference(text):  # the old quadratic scan
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i].strip()
    return None


@given(st.lists(st.sampled_from(["\\boxed{", "{", "}", "a", " "]), max_size=12).map("".join))
def test_last_boxed_equals_the_brace_scan(text):
    assert last_boxed(text) == _last_boxed_reference(text)


@given(
    st.lists(st.sampled_from(["<loc_1>", "<loc_22>", "car", "<", " "]), max_size=14).map("".join)
)
def test_florence_labels_equal_the_old_regex(text):
    old = re.compile(r"([^<]*)<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>")
    want = [m.group(1).strip() or None for m in old.finditer(text)]
    assert PARSERS["florence2"](text).box_labels == want


@given(
    st.lists(
        st.sampled_from(["<ref>", "</ref>", "<box>", "</box>", "[[1,2,3,4]]", "cat", " "]),
        max_size=10,
    ).map("".join)
)
def test_internvl_equals_the_old_regex_when_refs_do_not_nest(text):
    old = re.compile(r"(?:<ref>(.*?)</ref>\s*)?<box>(.*?)</box>", re.DOTALL)
    matches = list(old.finditer(text))
    if any(m.group(1) and ("<ref>" in m.group(1) or "</ref>" in m.group(1)) for m in matches):
        return  # the lazy regex lets a label span several refs; the scanner does not
    parsed = PARSERS["internvl"](text)
    want = [
        (m.group(1).strip() or None) if m.group(1) is not None else None
        for m in matches
        for _ in range(len(re.findall(r"\d+", m.group(2))) // 4)
        if len(re.findall(r"\d+", m.group(2))) % 4 == 0
    ]
    if not matches:  # no tagged box: the bare lists that stripped tags leave
        want = [None] * text.count("[[1,2,3,4]]")
    assert parsed.box_labels == want


def test_temporal_reward_on_huge_numbers_and_deep_brackets():
    r = TemporalIoUReward()
    big = "7" * 5000
    for text in (f"[{big}, 2]", f"from 1s to {big}s", f"{big}:00 - 0:01"):
        res = r.score("p", text, [], [], segments=[1, 2])
        assert (res.value, res.reason) == (0.0, "non_finite_segment"), text[:20]
    deep = "[" * 30_000 + "1, 2" + "]" * 30_000  # under MAX_OUTPUT_CHARS
    assert r.score("p", deep, [], [], segments=[1, 2]).value == 1.0


def test_temporal_reward_on_a_megabyte_is_not_read():
    r = TemporalIoUReward()
    for unit in ("1, ", "[1, 2]", "-", "frames ", "0:"):
        text = unit * (1_000_000 // len(unit))
        res = r.score("p", text, [], [], segments=[1, 2])
        assert (res.value, res.reason) == (0.0, "output_too_long")
        assert res.details["chars"] == len(text)


_SEGMENT_TEXT = st.lists(
    st.sampled_from(["1", "2.5", ",", "-", " to ", "s", "[", "]", "frames", " ", ":", "x"]),
    max_size=14,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(_SEGMENT_TEXT)
def test_temporal_parser_never_raises_and_the_reward_scores_what_it_read(text):
    parsed = parse_segments(text)
    assert all(e.unit in (None, "seconds", "frames") for seg in parsed.segments for e in seg)
    res = TemporalIoUReward().score("p", text, [], [], segments=[1, 2])
    assert res.details["num_segments"] == len(parsed.segments)
    if res.reason is None:
        start, end = res.details["segment_s"]
        assert 0 <= start < end and res.value == temporal_iou((start, end), (1.0, 2.0))
    else:
        assert res.value == 0.0
