"""Temporal grounding reward: read ``[start, end]`` from the output, score by temporal IoU.

The answer is a time segment in seconds or, when the task says so, in frame indices of the frames
the model was shown (converted to seconds with their timestamps). It is scored against one or
several labelled segments, taking the best match: temporal IoU (``iou``, as in the temporal
sentence grounding benchmarks Charades-STA and ActivityNet Captions: intersection over union of
the two time intervals) or its thresholded form (``acc``, "R@1, IoU >= m").

``task_data`` fields read:

- ``segments`` (name configurable): the label ``[start, end]`` in seconds, or a list of them;
- ``answer_unit`` (optional, per item): ``"seconds"`` or ``"frames"``, the unit of bare numbers
  in the answer (default: the reward's ``unit``). Numbers written with a unit (``2.5s``,
  ``0:02``, ``frame 3``) keep their own;
- ``video_timing``: the sampled frames of each video in prompt order, one dict per video (or one
  dict) with ``timestamps_s`` (seconds of each sampled frame, ascending), ``fps`` (rate of the
  sampled frames) and optionally ``duration_s``. Needed for frame answers; it also bounds the
  answer to the video (``duration_s``, else the last frame's timestamp plus one frame);
- ``duration_s`` (optional): the clip's length when there is no ``video_timing``.

Frame ``i`` (counted from ``first_frame``) covers ``[t_i, t_i + 1 / fps)``; frames ``a`` to ``b``
cover ``[t_a, t_b + 1 / fps]``, so ``frame 3 to frame 3`` is one frame long, not empty.

Failure rules (each returns ``failure_value``, default 0, with the reason):

=========================  ======================================================================
reason                     when
=========================  ======================================================================
``no_segment``             the parser found no two values joined as a segment
``multiple_segments``      several segments and ``on_multiple="zero"``
``non_finite_segment``     an end is infinite (a huge number)
``frames_without_timing``  a frame answer (``frame 3``) in a seconds task with no ``video_timing``
``non_integer_frame``      a frame index with a fraction
``frame_out_of_range``     a frame index before the first or after the last sampled frame
``inverted_segment``       ``end < start`` (not swapped: the order is part of what is learned)
``segment_outside_video``  nothing of the segment is left after clipping to the video
``degenerate_segment``     zero length after clipping
=========================  ======================================================================

A segment partly outside the video is clipped and scored (``details["clipped"] = True``).
"""

from __future__ import annotations

import math
from typing import Any

from .result import Reward, RewardResult, label_number, option_index, require_field
from .temporal_parsing import FRAMES, SECONDS, Endpoint, parse_segments
from .text_extract import answer_region

TEMPORAL_METRICS = ("iou", "acc")
UNITS = (SECONDS, FRAMES)
Segment = tuple[float, float]


class _Unscorable(Exception):
    """A rule decided the value: carries the reason (internal to this module)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def temporal_iou(a: Segment, b: Segment) -> float:
    """Intersection over union of two time intervals ``(start, end)`` with ``start <= end``.

    Two zero-length intervals have no union; their IoU is 0.

    >>> temporal_iou((1.0, 3.0), (2.0, 4.0))
    0.3333333333333333
    """
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union > 0 else 0.0


def label_segments(value: Any, field_name: str = "segments") -> list[Segment]:
    """Read label segments from a dataset field: one ``[start, end]`` in seconds or a list of them.

    Raises ``ValueError`` naming the field for anything that is not finite segments with
    ``0 <= start < end`` (a data bug, not a model mistake).

    >>> label_segments([1, 2.5]), label_segments([[0, 1], [2, 3]])
    ([(1.0, 2.5)], [(0.0, 1.0), (2.0, 3.0)])
    """
    try:
        items = list(value)
        if items and not isinstance(items[0], (list, tuple)):
            items = [items]
        segments = [tuple(label_number(v) for v in s) for s in items]
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"task_data[{field_name!r}] must be [start, end] in seconds or a list of them"
        ) from e
    if not segments:
        raise ValueError(
            f"task_data[{field_name!r}] is empty; temporal IoU needs at least one label segment"
        )
    for s in segments:
        if len(s) != 2 or not all(math.isfinite(v) for v in s) or not 0 <= s[0] < s[1]:
            raise ValueError(
                f"task_data[{field_name!r}] has an invalid segment {list(s)}: need two finite "
                f"seconds with 0 <= start < end"
            )
    return segments  # type: ignore[return-value]


def video_timing(task_data: dict[str, Any], video_index: int) -> dict[str, Any] | None:
    """The timing record of video ``video_index`` from ``task_data["video_timing"]``, or None."""
    timing = task_data.get("video_timing")
    if isinstance(timing, (list, tuple)):
        if not timing:
            return None
        if video_index >= len(timing):
            raise ValueError(
                f"video_index={video_index} but task_data['video_timing'] has {len(timing)} "
                f"entries (one per video in the prompt)"
            )
        timing = timing[video_index]
    if timing is not None and not isinstance(timing, dict):
        raise ValueError(f"task_data['video_timing'] entries must be dicts, got {timing!r}")
    return timing


def _frame_times(timing: dict[str, Any]) -> tuple[list[float], float]:
    """``(timestamps, frame duration)`` of a timing record; ``ValueError`` naming what is wrong."""
    stamps = [float(t) for t in timing.get("timestamps_s") or ()]
    if not stamps or not all(math.isfinite(t) for t in stamps):
        raise ValueError(
            "task_data['video_timing'] needs 'timestamps_s': the finite seconds of each sampled "
            f"frame, got {timing.get('timestamps_s')!r}"
        )
    fps = timing.get("fps")
    if fps is not None and float(fps) > 0:
        return stamps, 1.0 / float(fps)
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    if not gaps or gaps[len(gaps) // 2] <= 0:
        raise ValueError(
            "task_data['video_timing'] has no 'fps' and fewer than two distinct timestamps: "
            "the length of one frame is unknown"
        )
    return stamps, gaps[len(gaps) // 2]


def _duration(task_data: dict[str, Any], timing: dict[str, Any] | None) -> float | None:
    """The video's length in seconds, if anything gives it (used to clip answers)."""
    if timing is not None:
        if timing.get("duration_s") is not None:
            return float(timing["duration_s"])
        if timing.get("timestamps_s"):
            stamps, frame = _frame_times(timing)
            return stamps[-1] + frame
    value = task_data.get("duration_s")
    if value is None:
        return None
    try:
        seconds = label_number(value)
    except TypeError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"task_data['duration_s'] = {value!r} is no clip length: give the clip's length in "
            "seconds (> 0), or leave it out"
        )
    return seconds


def _one_unit(segment: tuple[Endpoint, Endpoint]) -> tuple[Endpoint, Endpoint]:
    """A unit written on one end applies to both: a bare end takes the other's unit and its
    scale (``1 to 2 min`` is 60 to 120 seconds)."""
    start, end = segment
    written = start if start.unit else end if end.unit else None
    if written is None:
        return segment
    return tuple(  # type: ignore[return-value]
        e if e.unit else Endpoint(e.value * written.scale, written.unit, written.scale)
        for e in segment
    )


class TemporalIoUReward(Reward):
    """Temporal grounding reward: the answer's ``[start, end]`` against labelled segments.

    Args:
        metric: ``iou`` (temporal IoU with the best-matching label) or ``acc`` (1.0 when that IoU
            is at least ``iou_threshold``).
        unit: Unit of bare numbers in the answer, ``"seconds"`` or ``"frames"``; an item's
            ``answer_unit`` field overrides it.
        segments_key: ``task_data`` field holding the label segments (seconds).
        video_index: Which video's timing converts frames (prompt order).
        first_frame: The number the prompt gives the first sampled frame (0 or 1).
        iou_threshold: Threshold for ``acc``.
        on_multiple: ``"first"`` scores the first of several segments; ``"zero"`` returns the
            failure value with reason ``multiple_segments``.
        use_answer_tag: Parse only ``<answer>...</answer>`` when present.
        failure_value: Value when a rule decides (no segment, inverted, ...).

    >>> r = TemporalIoUReward()
    >>> r("p", "<answer>from 1.0s to 3.0s</answer>", [], [], segments=[2.0, 3.0])
    0.5
    >>> timing = [{"timestamps_s": [0.0, 0.5, 1.0, 1.5], "fps": 2.0}]
    >>> r("p", "frames 2-3", [], [], segments=[1.0, 2.0], video_timing=timing)
    1.0
    """

    def __init__(
        self,
        metric: str = "iou",
        *,
        unit: str = SECONDS,
        segments_key: str = "segments",
        video_index: int = 0,
        first_frame: int = 0,
        iou_threshold: float = 0.5,
        on_multiple: str = "first",
        use_answer_tag: bool = True,
        failure_value: float = 0.0,
    ) -> None:
        if metric not in TEMPORAL_METRICS:
            raise ValueError(f"metric must be one of {TEMPORAL_METRICS}, got {metric!r}")
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        if on_multiple not in ("first", "zero"):
            raise ValueError(f"on_multiple must be 'first' or 'zero', got {on_multiple!r}")
        if not 0.0 < iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
        if type(first_frame) is not int or first_frame not in (0, 1):
            raise ValueError(f"first_frame must be 0 or 1, got {first_frame!r}")
        option_index(video_index, "video_index")
        self.metric = metric
        self.unit = unit
        self.segments_key = segments_key
        self.video_index = video_index
        self.first_frame = first_frame
        self.iou_threshold = iou_threshold
        self.on_multiple = on_multiple
        self.use_answer_tag = use_answer_tag
        self.failure_value = float(failure_value)
        self.name = f"temporal_{metric}"

    def _answer_unit(self, task_data: dict[str, Any]) -> str:
        unit = task_data.get("answer_unit") or self.unit
        if unit not in UNITS:
            raise ValueError(f"task_data['answer_unit'] must be one of {UNITS}, got {unit!r}")
        return unit

    def _seconds(
        self, segment: tuple[Endpoint, Endpoint], task_unit: str, timing: dict[str, Any] | None
    ) -> Segment:
        """The segment in seconds; :class:`_Unscorable` when a rule decides."""
        segment = _one_unit(segment)
        start, end = segment
        units = [e.unit or task_unit for e in segment]
        if not all(math.isfinite(e.value) for e in segment):
            raise _Unscorable("non_finite_segment")
        if units[0] == units[1] and end.value < start.value:
            raise _Unscorable("inverted_segment")  # frames [3, 2] too (their spans touch)
        if FRAMES not in units:
            return start.value, end.value
        if timing is None:
            if task_unit == FRAMES:
                raise KeyError(
                    "TemporalIoUReward: a frame answer needs task_data['video_timing'] (the "
                    "sampled frames' timestamps, which the workflows add for items with videos)"
                )
            raise _Unscorable("frames_without_timing")
        stamps, frame = _frame_times(timing)
        out = []
        for k, (endpoint, unit) in enumerate(zip(segment, units, strict=True)):
            if unit == SECONDS:
                out.append(endpoint.value)
                continue
            if not float(endpoint.value).is_integer():
                raise _Unscorable("non_integer_frame")
            index = int(endpoint.value) - self.first_frame
            if not 0 <= index < len(stamps):
                raise _Unscorable("frame_out_of_range")
            out.append(stamps[index] + (frame if k == 1 else 0.0))
        return out[0], out[1]

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        labels = label_segments(
            require_field(task_data, self.segments_key, type(self).__name__), self.segments_key
        )
        task_unit = self._answer_unit(task_data)
        timing = video_timing(task_data, self.video_index)
        duration = _duration(task_data, timing)
        for label in labels:
            if duration is not None and label[0] >= duration:
                raise ValueError(
                    f"task_data[{self.segments_key!r}]: segment {list(label)} starts past the "
                    f"{float(duration)} s clip, so no answer in the video can score it"
                )
        parsed = parse_segments(answer_region(completions, self.use_answer_tag))
        details: dict[str, Any] = {"num_segments": len(parsed.segments)}
        if parsed.issues:
            details["issues"] = parsed.issues
        if not parsed.segments:
            return RewardResult(self.failure_value, "no_segment", details)
        if len(parsed.segments) > 1 and self.on_multiple == "zero":
            return RewardResult(self.failure_value, "multiple_segments", details)
        try:
            start, end = self._seconds(parsed.segments[0], task_unit, timing)
            if end < start:
                raise _Unscorable("inverted_segment")
            segment = _clip((start, end), duration, details)
        except _Unscorable as e:
            return RewardResult(self.failure_value, e.reason, details)
        details["segment_s"] = list(segment)
        if duration is not None:  # the part of each label the video shows, as the answer is
            labels = [(start, min(end, duration)) for start, end in labels]
        best = max(temporal_iou(segment, label) for label in labels)
        if self.metric == "acc":
            details["iou"] = best
            return RewardResult(1.0 if best >= self.iou_threshold else 0.0, None, details)
        return RewardResult(best, None, details)


def _clip(segment: Segment, duration: float | None, details: dict[str, Any]) -> Segment:
    """``segment`` clipped to ``[0, duration]`` (``[0, inf)`` when unknown); records ``clipped``."""
    start, end = segment
    upper = math.inf if duration is None else duration
    if end == start:
        raise _Unscorable("degenerate_segment")
    if end <= 0 or start >= upper:
        raise _Unscorable("segment_outside_video")
    clipped = (max(start, 0.0), min(end, upper))
    details["clipped"] = clipped != segment
    if clipped[1] <= clipped[0]:
        raise _Unscorable("degenerate_segment")
    return clipped
