"""Parse boxes and points from model output, per model family, into a declared frame.

Every parser takes the completion text and returns a :class:`ParsedOutput` whose coordinates are
in ``ParsedOutput.frame`` (see :mod:`.frames`). Parsers never raise on model output: anything they
cannot read is skipped and named in ``issues``; non-finite numbers (``NaN`` in JSON) are passed
through for the scorer to reject with a reason.

Conventions and their sources (cited per parser below). Box tags that a model's tokenizer holds
as special tokens disappear under ``skip_special_tokens=True`` decoding (verl, TRL), so each
parser whose tags can be stripped also reads the bare form that decoding leaves.

==============  ===============================================  =========  ================
family          text                                             values     frame returned
==============  ===============================================  =========  ================
qwen2_vl        ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>``      0..1000    ``norm1000``
qwen2_5_vl      JSON ``{"bbox_2d": [x1,y1,x2,y2]}``/``point_2d``  pixels     ``model``
qwen3_vl        JSON ``bbox_2d`` / ``point_2d``                  0..1000    ``norm1000``
internvl        ``<ref>o</ref><box>[[x1, y1, x2, y2]]</box>``    0..1000    ``norm1000``
glm4v           ``<|begin_of_box|>[x1,y1,x2,y2]<|end_of_box|>``  0..1000    ``norm1000``
paligemma       ``<locY1><locX1><locY2><locX2> label`` (y first)  0..1023    ``norm1`` (v/1023)
florence2       ``label<loc_x1><loc_y1><loc_x2><loc_y2>``        0..999     ``norm1`` ((v+.5)/1000)
molmo           ``<point x="" y="">``, ``<points x1= y1= ...>``  percent    ``norm1`` (v/100)
plain           ``[x1, y1, x2, y2]``                             any        declared by caller
==============  ===============================================  =========  ================
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .frames import Box, Frame, Point
from .text_extract import tag_blocks

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"
_NUM_RE = re.compile(_NUM, re.IGNORECASE)


@dataclass(frozen=True)
class ParsedOutput:
    """Boxes and points read from one completion.

    Attributes:
        boxes: ``(x1, y1, x2, y2)`` tuples in ``frame``, in output order (floats, may be NaN).
        points: ``(x, y)`` tuples in ``frame``.
        box_labels: One label (or ``None``) per box.
        point_labels: One label (or ``None``) per point.
        frame: The frame all coordinates are in.
        issues: Fragments that looked like boxes/points but could not be read (e.g.
            ``"bbox_2d has 3 numbers"``).
    """

    boxes: list[Box] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    box_labels: list[str | None] = field(default_factory=list)
    point_labels: list[str | None] = field(default_factory=list)
    frame: Frame = Frame.NORM1000
    issues: list[str] = field(default_factory=list)


def _numbers(text: str) -> list[float]:
    return [float(m) for m in _NUM_RE.findall(text)]


def _group4(values: list[float], what: str, issues: list[str]) -> list[Box]:
    if len(values) % 4:
        issues.append(f"{what} has {len(values)} numbers (not a multiple of 4)")
        return []
    return [tuple(values[i : i + 4]) for i in range(0, len(values), 4)]  # type: ignore[misc]


_INNER_LIST = re.compile(r"\[([^\[\]]*)\]")
_INNER_PAIR = re.compile(r"\(([^()]*)\)")


def _block_boxes(inner: str, issues: list[str]) -> list[Box]:
    """The boxes written in one box block: each innermost ``[...]`` list is one box, ``(x, y)``
    points pair up into ``(x1, y1), (x2, y2)`` boxes, and numbers without brackets group by
    four. Numbers are never pooled across lists: a list that is not a box is named in ``issues``.
    """
    lists = _INNER_LIST.findall(inner)
    if lists:
        boxes = []
        for body in lists:
            values = _numbers(body)
            if len(values) == 4:
                boxes.append(tuple(values))
            else:
                issues.append(f"a list of {len(values)} numbers is not a box")
        return boxes  # type: ignore[return-value]
    points = [_numbers(body) for body in _INNER_PAIR.findall(inner)]
    if not points:
        return _group4(_numbers(inner), "box", issues)
    if len(points) % 2 or any(len(p) != 2 for p in points):
        numbers = sum(len(p) for p in points)
        issues.append(f"{numbers} numbers in {len(points)} points are not (x1,y1),(x2,y2)")
        return []
    return [tuple(points[i] + points[i + 1]) for i in range(0, len(points), 2)]  # type: ignore[misc]


def _ref_box_blocks(
    text: str, ref_open: str, ref_close: str, box_open: str, box_close: str
) -> list[tuple[str | None, str]]:
    """``(label, box content)`` of every ``[ref_open label ref_close] box_open ... box_close``.

    The blocks ``(?:<ref>(.*?)</ref>\\s*)?<box>(.*?)</box>`` finds on well-formed text, found by
    one scan over the four tags (linear time; the lazy regex rescans to the end of the text from
    every unclosed ``<ref>``/``<box>``, quadratic on garbage). A label counts when only
    whitespace separates its ``ref_close`` from the ``box_open``; tags inside an open box are part
    of its content, as in the regex.
    """
    tags = re.compile("|".join(re.escape(t) for t in (ref_open, ref_close, box_open, box_close)))
    out: list[tuple[str | None, str]] = []
    ref_start: int | None = None  # content start of the first ref_open not yet closed
    last_ref: tuple[str, int] | None = None  # (label, end of its ref_close)
    box_start: int | None = None
    label: str | None = None
    for m in tags.finditer(text):
        tag = m.group()
        if box_start is not None:
            if tag == box_close:
                out.append((label, text[box_start : m.start()]))
                box_start, ref_start, last_ref = None, None, None
        elif tag == ref_open:
            ref_start = m.end() if ref_start is None else ref_start
        elif tag == ref_close:
            if ref_start is not None:
                last_ref, ref_start = (text[ref_start : m.start()], m.end()), None
        elif tag == box_open:
            box_start = m.end()
            adjacent = last_ref is not None and not text[last_ref[1] : m.start()].strip()
            label = last_ref[0].strip() if adjacent and last_ref is not None else None
    return out


_PAIR_BOX = re.compile(
    rf"\(\s*({_NUM})\s*,\s*({_NUM})\s*\)\s*,\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)", re.IGNORECASE
)


def parse_qwen2_vl(text: str) -> ParsedOutput:
    """Qwen2-VL (and Qwen-VL): ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>``, 0..1000.

    Source: Qwen2-VL technical report (arXiv:2409.12191, "Visual Grounding": coordinates
    normalised to [0, 1000), ``<|box_start|>``/``<|box_end|>`` and ``<|object_ref_start|>``
    special tokens) and the ``Qwen/Qwen2-VL-7B-Instruct`` tokenizer's added tokens. Qwen-VL's
    ``<ref>..</ref><box>(x1,y1),(x2,y2)</box>`` (arXiv:2308.12966) uses the same range and is
    accepted too. When the special tokens were stripped by ``skip_special_tokens=True`` decoding,
    bare ``(x1,y1),(x2,y2)`` pairs are read instead. Full-width digits, brackets and commas are
    read as ASCII.

    >>> parse_qwen2_vl("<|object_ref_start|>dog<|object_ref_end|><|box_start|>(10,20),(30,40)"
    ...                "<|box_end|>").boxes
    [(10.0, 20.0, 30.0, 40.0)]
    """
    text = _half_width(str(text))
    boxes: list[Box] = []
    labels: list[str | None] = []
    issues: list[str] = []
    found = _ref_box_blocks(
        text, "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>"
    ) or [
        (label, inner)
        for label, inner in _ref_box_blocks(text, "<ref>", "</ref>", "<box>", "</box>")
        if inner.lstrip().startswith("(")
    ]
    for label, inner in found:
        got = _block_boxes(inner, issues)
        boxes += got
        labels += [label or None] * len(got)
    if not found:
        for m in _PAIR_BOX.finditer(text):
            boxes.append(tuple(float(g) for g in m.groups()))  # type: ignore[arg-type]
            labels.append(None)
    return ParsedOutput(boxes=boxes, box_labels=labels, frame=Frame.NORM1000, issues=issues)


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.DOTALL)
_KEY_LIST = re.compile(r'"(bbox_2d|point_2d)"\s*:\s*\[([^\[\]]*)\]')


MAX_JSON_DEPTH = 32
"""Bracket spans nested deeper than this are not decoded whole (their shallower parts are):
Qwen-VL JSON is 2-3 levels deep, and ``json`` recurses once per level (``"[" * 1000`` raised
``RecursionError``)."""

_JSON_TOKEN = re.compile(r'[\[\]{}"]')
_KEYS = ('"bbox_2d"', '"point_2d"')


def _bracket_spans(text: str) -> list[tuple[int, int, int]]:
    """``(start, end, height)`` of every balanced ``[...]``/``{...}`` span, sorted by start.

    One left-to-right scan with an explicit stack (no recursion, so any depth is fine). Inside
    brackets JSON strings are skipped (a quote ends a string unless an odd run of backslashes
    precedes it), so ``"a]"`` does not close a list; a closer that does not match the innermost
    open bracket is ignored. ``height`` is the nesting depth inside the span (``[]`` is 1).
    """
    out: list[tuple[int, int, int]] = []
    chars: list[str] = []
    starts: list[int] = []
    heights: list[int] = []
    in_string = False
    for m in _JSON_TOKEN.finditer(text):
        ch = m.group()
        if ch == '"':
            if not chars:
                continue
            i = j = m.start()
            while j > 0 and text[j - 1] == "\\":
                j -= 1
            if (i - j) % 2 == 0:
                in_string = not in_string
        elif in_string:
            continue
        elif ch == "[" or ch == "{":
            chars.append(ch)
            starts.append(m.start())
            heights.append(1)
        elif chars and chars[-1] == ("[" if ch == "]" else "{"):
            chars.pop()
            height = heights.pop()
            out.append((starts.pop(), m.end(), height))
            if heights and heights[-1] <= height:
                heights[-1] = height + 1
    out.sort()
    return out


def _int_or_float(digits: str) -> int | float:
    # Past 308 digits an int no longer converts to float (OverflowError), and int() refuses more
    # than 4,300: such a coordinate is simply huge, and float() reads it as inf.
    return int(digits) if len(digits) <= 308 else float(digits)


def _decode_spans(chunk: str, values: list[Any]) -> None:
    """Decode each outermost span that is valid JSON; look inside those that are not.

    Spans come sorted by start, so a span is tried only when no decoded span covers it: the same
    result as descending from the outermost spans, without recursion. A character is decoded at
    most ``MAX_JSON_DEPTH`` times (once per enclosing span short enough to try), so this is
    linear in the chunk.
    """
    covered = 0
    for start, end, height in _bracket_spans(chunk):
        if start < covered or height > MAX_JSON_DEPTH:
            continue
        try:
            values.append(json.loads(chunk[start:end], parse_int=_int_or_float))
        except ValueError:
            continue
        covered = end


def _walk_dicts(obj: Any, out: list[dict[str, Any]]) -> None:
    # Decoded values are at most MAX_JSON_DEPTH deep, so this recursion is bounded.
    if isinstance(obj, dict):
        out.append(obj)
        for v in obj.values():
            if isinstance(v, (dict, list)):
                _walk_dicts(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _walk_dicts(v, out)


def _json_values(text: str) -> list[Any]:
    """Decode the JSON values in ``text`` (fenced blocks first, else the whole text).

    Each outermost balanced bracket span is decoded once; a span that is not valid JSON (prose
    around it, truncation inside) is searched for valid inner spans. Linear in the text for any
    input up to the constant ``MAX_JSON_DEPTH`` (the old scanner re-ran the decoder from every
    ``[`` and ``{``: quadratic).
    """
    chunks = [m.group(1) for m in _FENCE.finditer(text)] or [text]
    values: list[Any] = []
    for chunk in chunks:
        if any(key in chunk for key in _KEYS):  # no key, no box or point to find: skip the scan
            _decode_spans(chunk, values)
    return values


def _as_floats(value: Any) -> list[float] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for v in value:
        if isinstance(v, bool):
            return None
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            return None
    return out


def _parse_qwen_json(text: str, frame: Frame) -> ParsedOutput:
    text = str(text)
    result = ParsedOutput(frame=frame)
    dicts: list[dict[str, Any]] = []
    for value in _json_values(text):
        _walk_dicts(value, dicts)
    found_key = False
    for d in dicts:
        label = d.get("label")
        label = str(label) if label is not None else None
        if "bbox_2d" in d:
            found_key = True
            nums = _as_floats(d["bbox_2d"])
            if nums is None or len(nums) != 4:
                result.issues.append(f"bbox_2d is not 4 numbers: {d['bbox_2d']!r}"[:120])
            else:
                result.boxes.append(tuple(nums))  # type: ignore[arg-type]
                result.box_labels.append(label)
        if "point_2d" in d:
            found_key = True
            nums = _as_floats(d["point_2d"])
            if nums is None or len(nums) != 2:
                result.issues.append(f"point_2d is not 2 numbers: {d['point_2d']!r}"[:120])
            else:
                result.points.append((nums[0], nums[1]))
                result.point_labels.append(label)
    if not found_key:
        # Truncated or otherwise invalid JSON: read the key/value pairs directly.
        for key, inner in _KEY_LIST.findall(text):
            nums = _numbers(inner)
            if key == "bbox_2d" and len(nums) == 4:
                result.boxes.append(tuple(nums))  # type: ignore[arg-type]
                result.box_labels.append(None)
            elif key == "point_2d" and len(nums) == 2:
                result.points.append((nums[0], nums[1]))
                result.point_labels.append(None)
            else:
                result.issues.append(f"{key} has {len(nums)} numbers")
    return result


def parse_qwen2_5_vl(text: str) -> ParsedOutput:
    """Qwen2.5-VL: JSON ``bbox_2d``/``point_2d`` in absolute pixels of the *resized* image.

    Source: Qwen2.5-VL technical report (arXiv:2502.13923, §2.1: "we directly use the actual
    dimensions of the input images to represent bounding boxes, points", i.e. coordinates on the
    image after ``smart_resize``) and the official cookbook
    ``QwenLM/Qwen2.5-VL/cookbooks/spatial_understanding.ipynb``, which rescales predictions from the
    processor's ``input_width``/``input_height`` to the original size. Accepts ```` ```json ````
    fences, a single object, a list, or truncated JSON (read by key).

    >>> parse_qwen2_5_vl('```json\\n[{"bbox_2d": [161, 119, 483, 357], "label": "cat"}]\\n```').boxes
    [(161.0, 119.0, 483.0, 357.0)]
    """
    return _parse_qwen_json(text, Frame.MODEL)


def parse_qwen3_vl(text: str) -> ParsedOutput:
    """Qwen3-VL: the same JSON as Qwen2.5-VL but relative coordinates in 0..1000.

    Source: Qwen3-VL cookbook ``QwenLM/Qwen3-VL/cookbooks/2d_grounding.ipynb`` (boxes and points
    are relative coordinates scaled to 0..1000, converted with ``x / 1000 * width``).

    >>> parse_qwen3_vl('{"point_2d": [500, 250]}').points
    [(500.0, 250.0)]
    """
    return _parse_qwen_json(text, Frame.NORM1000)


def parse_internvl(text: str) -> ParsedOutput:
    """InternVL 2/2.5: ``<ref>obj</ref><box>[[x1, y1, x2, y2], ...]</box>``, 0..1000.

    Source: InternVL documentation, "InternVL2 series -> grounding" (internvl.readthedocs.io):
    box coordinates are normalised to [0, 1000] and written as ``<box>[[x1, y1, x2, y2]]</box>``;
    the InternVL2 model card (``OpenGVLab/InternVL2-8B``) shows the same format.

    >>> parse_internvl("<ref>cat</ref><box>[[1, 2, 3, 4], [5, 6, 7, 8]]</box>").box_labels
    ['cat', 'cat']
    """
    text = str(text)
    result = ParsedOutput(frame=Frame.NORM1000)
    found = _ref_box_blocks(text, "<ref>", "</ref>", "<box>", "</box>")
    if not found:  # tags stripped with the special tokens: "cat[[x1, y1, x2, y2]]"
        found = [(None, m.group(1)) for m in _DOUBLE_LIST.finditer(_half_width(text))]
    for label, inner in found:
        got = _block_boxes(inner, result.issues)
        result.boxes.extend(got)
        result.box_labels.extend([label or None] * len(got))
    return result


_GLM_OPEN, _GLM_CLOSE = "<|begin_of_box|>", "<|end_of_box|>"
_FULL_WIDTH = str.maketrans({"［": "[", "］": "]", "，": ",", "（": "(", "）": ")"})


def _half_width(text: str) -> str:
    """``text`` with full-width digits, brackets and commas as ASCII (what Chinese-first models
    sometimes write inside a box)."""
    return unicodedata.normalize("NFKC", text).translate(_FULL_WIDTH)


def parse_glm4v(text: str) -> ParsedOutput:
    """GLM-4.1V / GLM-4.5V / GLM-4.6V: ``<|begin_of_box|>[x1, y1, x2, y2]<|end_of_box|>``, 0..1000.

    Source: the ``zai-org/GLM-4.5V`` model card (grounding: "coordinates ... normalized to
    0-1000", the box between ``<|begin_of_box|>`` and ``<|end_of_box|>``). Only boxes between the
    tokens count (a list in the prose before them is not the answer); several boxes in one pair
    (``[[...], [...]]``) are each read, and a box cut off before its closing token too. When the tokens were stripped by
    ``skip_special_tokens=True`` decoding, bare ``[x1, y1, x2, y2]`` lists are read instead.
    Full-width digits, brackets and commas are read as ASCII.

    >>> parse_glm4v("near [0, 0, 9, 9]: <|begin_of_box|>[100, 300, 500, 900]<|end_of_box|>").boxes
    [(100.0, 300.0, 500.0, 900.0)]
    """
    text = _half_width(str(text))
    result = ParsedOutput(frame=Frame.NORM1000)
    blocks = [text[a:b] for a, b in tag_blocks(text, _GLM_OPEN, _GLM_CLOSE)]
    last_open = text.rfind(_GLM_OPEN)
    if last_open != -1 and text.find(_GLM_CLOSE, last_open) == -1:  # cut off inside a box
        blocks.append(text[last_open + len(_GLM_OPEN) :])
    if not blocks:
        return parse_plain(text, Frame.NORM1000)
    for inner in blocks:
        got = _block_boxes(inner, result.issues)
        result.boxes.extend(got)
        result.box_labels.extend([None] * len(got))
    return result


_DOUBLE_LIST = re.compile(r"\[\s*\[([-+\w.\s,\[\]]{0,400}?)\]\s*\]")
"""InternVL's ``[[x1, y1, x2, y2], ...]`` without its tags (bounded: a box list is short)."""

_PALI = re.compile(r"<loc(\d{4})><loc(\d{4})><loc(\d{4})><loc(\d{4})>\s*([^<;]*)")


def parse_paligemma(text: str) -> ParsedOutput:
    """PaliGemma: ``<locYMIN><locXMIN><locYMAX><locXMAX> label``, 1024 bins, **y first**.

    A coordinate v in [0, 1] is written as ``round(v * 1023)``; we decode ``v = token / 1023``.
    Source: PaliGemma model card (``google/paligemma-3b-mix-224``, "detect": four ``<locXXXX>``
    tokens for y_min, x_min, y_max, x_max normalised to 1024 bins), the 1024 ``<loc0000>`` ..
    ``<loc1023>`` tokens in ``transformers/models/paligemma/processing_paligemma.py``, and the
    project's field notes for the ``round(v * 1023)`` encoding (some third-party decoders divide by
    1024 instead; the difference is below 0.1% of the image size).

    >>> parse_paligemma("<loc0000><loc0000><loc1023><loc0511> cat").boxes
    [(0.0, 0.0, 0.4995112414467253, 1.0)]
    """
    text = str(text)
    result = ParsedOutput(frame=Frame.NORM1)
    for m in _PALI.finditer(text):
        past = [g for g in m.groups()[:4] if int(g) > 1023]
        if past:
            result.issues.append(f"<loc{past[0]}> is past PaliGemma's 1024 location bins")
            continue
        y1, x1, y2, x2 = (int(g) / 1023 for g in m.groups()[:4])
        result.boxes.append((x1, y1, x2, y2))
        label = m.group(5).strip()
        result.box_labels.append(label or None)
    return result


_FLORENCE = re.compile(r"<loc_(\d{1,6})><loc_(\d{1,6})><loc_(\d{1,6})><loc_(\d{1,6})>")


def parse_florence2(text: str) -> ParsedOutput:
    """Florence-2: ``label<loc_x1><loc_y1><loc_x2><loc_y2>``, 1000 bins, x first, bin centres.

    Source: ``transformers/models/florence2/processing_florence2.py``
    (``quantize_bins = (1000, 1000)``; ``dequantize`` returns ``(bin + 0.5) * size / 1000``), so a
    token ``N`` is the normalised coordinate ``(N + 0.5) / 1000``.

    >>> parse_florence2("car<loc_0><loc_499><loc_999><loc_999>").boxes
    [(0.0005, 0.4995, 0.9995, 0.9995)]
    """
    text = str(text)
    result = ParsedOutput(frame=Frame.NORM1)
    prev_end = 0
    for m in _FLORENCE.finditer(text):
        past = [g for g in m.groups() if int(g) > 999]
        if past:
            result.issues.append(f"<loc_{past[0]}> is past Florence-2's 1000 location bins")
            prev_end = m.end()
            continue
        x1, y1, x2, y2 = ((int(g) + 0.5) / 1000 for g in m.groups())
        result.boxes.append((x1, y1, x2, y2))
        # The label is the text after the previous box and after the last "<" before this one
        # (what ``([^<]*)<loc_`` captured; that regex rescanned text without "<" from every
        # position, quadratic).
        label_start = max(prev_end, text.rfind("<", prev_end, m.start()) + 1)
        label = text[label_start : m.start()].strip()
        result.box_labels.append(label or None)
        prev_end = m.end()
    return result


_MOLMO_OPEN = re.compile(r"<(points?)\b([^<>]*)>", re.IGNORECASE)
_MOLMO_CLOSE = re.compile(r"</(points?)>", re.IGNORECASE)


def _molmo_tags(text: str) -> list[tuple[str, str, str]]:
    """``(name, attributes, body)`` of each ``<point ...>body</point>``/``<points>`` element.

    The elements ``<(points?)\\b([^>]*)>(.*?)</\\1>`` finds, in linear time: closing tags are
    located once and looked up with ``bisect`` instead of rescanning from every opening tag.
    """
    closes: dict[str, list[tuple[int, int]]] = {"point": [], "points": []}
    for m in _MOLMO_CLOSE.finditer(text):
        closes[m.group(1).lower()].append((m.start(), m.end()))
    starts = {k: [c[0] for c in v] for k, v in closes.items()}
    out: list[tuple[str, str, str]] = []
    pos = 0
    for m in _MOLMO_OPEN.finditer(text):
        if m.start() < pos:
            continue
        name = m.group(1).lower()
        i = bisect.bisect_left(starts[name], m.end())
        if i == len(starts[name]):
            continue
        close_start, close_end = closes[name][i]
        out.append((m.group(1), m.group(2), text[m.end() : close_start]))
        pos = close_end
    return out


_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def parse_molmo(text: str) -> ParsedOutput:
    """Molmo: ``<point x="61.5" y="40.6" alt="cup">cup</point>`` and
    ``<points x1="..." y1="..." x2="..." y2="..." alt="...">...</points>``, percent (0..100).

    Source: Molmo model card (``allenai/Molmo-7B-D-0924``, pointing example) and the Molmo paper
    (arXiv:2409.17146, §"Pointing": points as plain-text coordinates normalised to 0..100).

    >>> parse_molmo('<points x1="10" y1="20" x2="30.5" y2="40" alt="cups">cups</points>').points
    [(0.1, 0.2), (0.305, 0.4)]
    """
    text = str(text)
    result = ParsedOutput(frame=Frame.NORM1)
    for name, attr_text, body in _molmo_tags(text):
        attrs = {k.lower(): v for k, v in _ATTR.findall(attr_text)}
        label = attrs.get("alt") or (body.strip() or None)
        keys = [("x", "y")] if "x" in attrs else []
        i = 1
        while f"x{i}" in attrs:
            keys.append((f"x{i}", f"y{i}"))
            i += 1
        if not keys:
            result.issues.append(f"<{name}> without x/y attributes")
        for kx, ky in keys:
            try:
                x, y = float(attrs[kx]) / 100, float(attrs[ky]) / 100
            except (KeyError, ValueError):
                result.issues.append(f"<{name}> has unreadable {kx}/{ky}")
                continue
            result.points.append((x, y))
            result.point_labels.append(label)
    return result


_PLAIN = re.compile(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\]", re.I)


def parse_plain(text: str, frame: Frame | str = Frame.ORIGINAL) -> ParsedOutput:
    """Plain ``[x1, y1, x2, y2]`` lists (e.g. CogVLM-style ``[[...]]``); full-width digits,
    brackets and commas are read as ASCII.

    The text carries no frame, so the caller declares it (default: original pixels).

    >>> parse_plain("the box is [1, 2.5, 3, 4]", "norm1").boxes
    [(1.0, 2.5, 3.0, 4.0)]
    """
    text = _half_width(str(text))
    result = ParsedOutput(frame=Frame(frame))
    for m in _PLAIN.finditer(text):
        result.boxes.append(tuple(float(g) for g in m.groups()))  # type: ignore[arg-type]
        result.box_labels.append(None)
    return result


PARSERS: dict[str, Callable[[str], ParsedOutput]] = {
    "qwen2_vl": parse_qwen2_vl,
    "qwen_vl": parse_qwen2_vl,
    "qwen2_5_vl": parse_qwen2_5_vl,
    "qwen3_vl": parse_qwen3_vl,
    "internvl": parse_internvl,
    "glm4v": parse_glm4v,
    "paligemma": parse_paligemma,
    "florence2": parse_florence2,
    "molmo": parse_molmo,
    "plain": parse_plain,
}


FAMILY_PARSERS: dict[str, str] = {
    "qwen3_vl_moe": "qwen3_vl",
    "qwen3_5": "qwen3_vl",
    "qwen3_5_moe": "qwen3_vl",
    "glm46v": "glm4v",
    "glm4v_moe": "glm4v",
}
"""Model families (a config's ``model_type``, as :mod:`vlrollout.families` names them) that write
another family's boxes: Qwen3-VL-MoE and Qwen3.5 Qwen3-VL's JSON (Qwen3.5 assumed to keep it),
GLM-4.5V (``glm4v_moe``) and GLM-4.6V GLM-4.1V's box tokens."""


def parser_name(family: str) -> str:
    """The :data:`PARSERS` key ``family`` names in any spelling (``Qwen3-VL``, ``qwen3_vl_moe``
    and ``qwen3_5`` are ``qwen3_vl``); an unknown name is returned normalised.

    >>> parser_name("Qwen2.5-VL"), parser_name("qwen3_vl_moe")
    ('qwen2_5_vl', 'qwen3_vl')
    """
    key = family.lower().replace("-", "_").replace(".", "_")
    return FAMILY_PARSERS.get(key, key)


def get_parser(
    family: str, plain_frame: Frame | str = Frame.ORIGINAL
) -> Callable[[str], ParsedOutput]:
    """The parser for ``family``: a key of :data:`PARSERS` or of :data:`FAMILY_PARSERS`;
    ``plain_frame`` applies to ``plain``.

    Raises:
        ValueError: an unknown name; a model family with no box convention of its own (LLaVA,
            Gemma 3, Idefics3, ...) is told to name ``plain`` and the frame its boxes are in.
    """
    key = parser_name(family)
    if key not in PARSERS:
        raise ValueError(
            f"unknown box family {family!r}; known: {sorted({*PARSERS, *FAMILY_PARSERS})}. A "
            "model family with no box convention of its own writes plain [x1, y1, x2, y2] "
            "lists: name family='plain' and plain_frame= the frame they are in (original, "
            "model, norm1000 or norm1)"
        )
    if key == "plain":
        return partial(parse_plain, frame=Frame(plain_frame))
    return PARSERS[key]
