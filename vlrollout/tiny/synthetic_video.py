"""Deterministic synthetic video tasks: moving and appearing shapes in short MP4 clips.

Each clip is ``NUM_FRAMES`` frames of ``FRAME_SIZE`` × ``FRAME_SIZE`` pixels at ``FPS`` frames per
second (4 s), encoded as MPEG-4 Part 2 (the ``mpeg4`` encoder every PyAV wheel bundles) in an MP4
container, a few kB each. Two tasks:

- ``temporal``: "When does the red square cross the centre?" A red square moves horizontally at
  a constant speed between a start and an end frame (still before and after) and crosses the
  vertical centre line ``x = FRAME_SIZE / 2``. The label ``segments`` is the time, in seconds,
  during which the square covers that line, computed from the continuous motion: frame ``i`` shows
  the square at its position at ``t = i / FPS``, and between frames it moves linearly. The square
  starts wholly on one side and ends wholly on the other, so the segment lies inside the clip.
  An optional still shape of another colour is a distractor. Scored by ``temporal_iou``.
- ``video_count``: "How many shapes appear in the video?" One to four shapes of distinct colours,
  each in its own quadrant, each visible from some frame to some later frame; ``answer`` is how
  many there are. Scored by ``count``.

Every coordinate, size and step is even, so shape edges fall on the 2 × 2 blocks of the encoder's
4:2:0 chroma and a decoded square's centre is where it was drawn.

Items use the data-item format (``videos`` beside ``images``)::

    {"id": "temporal-2-0", "task": "temporal",
     "messages": [{"role": "user", "content": [{"type": "video"},
                                               {"type": "text", "text": "When does ..."}]}],
     "videos": [b"<mp4 bytes>" or "videos/temporal-2-0.mp4"],
     "segments": [[1.25, 2.0]], "solution": "[1.25, 2.0]", "duration_s": 4.0,
     "clip": {"fps": 4, "num_frames": 16, "size": [64, 64]}, "shapes": [...]}

>>> item = make_video_item("temporal", 0, 0)
>>> item["task"], item["videos"][0][4:8], len(item["segments"])
('temporal', b'ftyp', 1)
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import av
from PIL import Image, ImageDraw

from vlrollout.jsonl import write_jsonl

VIDEO_TASKS = ("temporal", "video_count")
FRAME_SIZE = 64
NUM_FRAMES = 16
FPS = 4
CENTRE = FRAME_SIZE // 2
BACKGROUND = (255, 255, 255)
#: The image tasks' colours and shapes (vlrollout.tiny.synthetic), so one vocabulary covers both;
#: kept here because the image generator imports this module for ``make-samples``.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 40),
}
SHAPES = ("square", "circle", "triangle")
BIT_RATE = 200_000
"""Encoder bit rate, fixed so the bytes do not follow a library default (about 2 kB a clip)."""
VIDEO_PROMPTS = {
    "temporal": "When does the red square cross the centre? Answer with [start, end] in seconds.",
    "video_count": "How many shapes appear in the video? Answer with a number.",
}
VIDEO_DATA_NAME = "video.jsonl"


def _draw(draw: ImageDraw.ImageDraw, kind: str, box: Sequence[int], fill: tuple) -> None:
    """Draw ``kind`` filling the pixel box ``[x1, y1, x2, y2)`` (exclusive right/bottom)."""
    x0, y0, x1, y1 = box[0], box[1], box[2] - 1, box[3] - 1
    if kind == "square":
        draw.rectangle([x0, y0, x1, y1], fill=fill)
    elif kind == "circle":
        draw.ellipse([x0, y0, x1, y1], fill=fill)
    else:
        draw.polygon([((x0 + x1) / 2, y0), (x0, y1), (x1, y1)], fill=fill)


def encode_mp4(frames: Sequence[Image.Image], fps: int = FPS) -> bytes:
    """Encode RGB frames as an MPEG-4 Part 2 MP4 at ``fps``: the same frames give the same bytes.

    One encoder thread and a fixed bit rate keep the output a function of the frames alone (for
    one PyAV/FFmpeg build).
    """
    buf = io.BytesIO()
    width, height = frames[0].size
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.bit_rate = BIT_RATE
        stream.codec_context.thread_count = 1
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_image(frame)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def crossing_segment(x0: int, size: int, step: int, start_frame: int) -> tuple[float, float]:
    """Seconds during which a square ``size`` wide covers ``x = CENTRE``.

    The square's left edge is at ``x0`` until frame ``start_frame``, then moves ``step`` pixels
    per frame (negative: leftwards), linearly between frames; it must not cover the centre before
    it moves (``x0 + size < CENTRE`` or ``x0 > CENTRE``).

    >>> crossing_segment(10, 12, 2, 4)   # left edge reaches 20 at 1.0 + 10/8 s, 32 at 1.0 + 22/8 s
    (2.25, 3.75)
    """
    speed = step * FPS  # pixels per second
    t0 = start_frame / FPS
    if step > 0:
        return t0 + (CENTRE - size - x0) / speed, t0 + (CENTRE - x0) / speed
    return t0 + (CENTRE - x0) / speed, t0 + (CENTRE - size - x0) / speed


def _square_motion(rng: random.Random) -> dict[str, int]:
    """Size, row, start column, step and moving frames of a square that crosses the centre."""
    size = rng.choice((8, 10, 12))
    step = rng.choice((2, 4))

    def frames_range(x0: int) -> tuple[int, int]:
        # Moving this many frames leaves it wholly right of the line and still inside the frame.
        lo = -(-(CENTRE + 2 - x0) // step)
        return lo, min((FRAME_SIZE - 2 - size - x0) // step, NUM_FRAMES - 1)

    # Starts wholly left of the centre line, at a column from which it can get across in time.
    starts = [x for x in range(2, CENTRE - size - 1, 2) if frames_range(x)[0] <= frames_range(x)[1]]
    x0 = rng.choice(starts)
    frames = rng.randint(*frames_range(x0))
    start_frame = rng.randint(0, NUM_FRAMES - 1 - frames)
    y = rng.randrange(2, FRAME_SIZE - size - 1, 2)
    motion = {"size": size, "y": y, "x0": x0, "step": step, "start_frame": start_frame,
              "end_frame": start_frame + frames}  # fmt: skip
    if rng.random() < 0.5:  # leftwards: mirror the columns
        motion.update(x0=FRAME_SIZE - x0 - size, step=-step)
    return motion


def square_left(motion: dict[str, int], frame: int) -> int:
    """The square's left column in ``frame``."""
    moved = min(max(frame, motion["start_frame"]), motion["end_frame"]) - motion["start_frame"]
    return motion["x0"] + motion["step"] * moved


def _temporal_item(rng: random.Random) -> tuple[list[Image.Image], dict[str, Any]]:
    motion = _square_motion(rng)
    size, y = motion["size"], motion["y"]
    still = None
    if rng.random() < 0.5:  # a still distractor in rows the square never enters
        colour = rng.choice([c for c in COLOURS if c != "red"])
        rows = [r for r in range(2, FRAME_SIZE - 12, 2) if r + 12 <= y - 2 or r >= y + size + 2]
        if rows:
            top, left = rng.choice(rows), rng.randrange(2, FRAME_SIZE - 12, 2)
            kind = rng.choice([s for s in SHAPES if s != "square"])
            still = {"colour": colour, "shape": kind, "box": [left, top, left + 12, top + 12]}
    frames = []
    for i in range(NUM_FRAMES):
        image = Image.new("RGB", (FRAME_SIZE, FRAME_SIZE), BACKGROUND)
        draw = ImageDraw.Draw(image)
        if still is not None:
            _draw(draw, still["shape"], still["box"], COLOURS[still["colour"]])
        x = square_left(motion, i)
        _draw(draw, "square", [x, y, x + size, y + size], COLOURS["red"])
        frames.append(image)
    start, end = crossing_segment(motion["x0"], size, motion["step"], motion["start_frame"])
    square = {"colour": "red", "shape": "square", "motion": motion}
    fields = {
        "segments": [[start, end]],
        "solution": f"[{start}, {end}]",
        "shapes": [square] + ([still] if still else []),
    }
    return frames, fields


def _count_item(rng: random.Random) -> tuple[list[Image.Image], dict[str, Any]]:
    n = rng.randint(1, 4)
    colours = rng.sample(list(COLOURS), n)
    cells = rng.sample(range(4), n)
    half = FRAME_SIZE // 2
    shapes = []
    for colour, cell in zip(colours, cells, strict=True):
        size = rng.choice((10, 12, 14, 16))
        left = (cell % 2) * half + rng.randrange(2, half - size - 1, 2)
        top = (cell // 2) * half + rng.randrange(2, half - size - 1, 2)
        first = rng.randint(0, NUM_FRAMES - 4)
        last = rng.randint(first + 3, NUM_FRAMES - 1)
        shapes.append({"colour": colour, "shape": rng.choice(SHAPES),
                       "box": [left, top, left + size, top + size], "frames": [first, last]})  # fmt: skip
    frames = []
    for i in range(NUM_FRAMES):
        image = Image.new("RGB", (FRAME_SIZE, FRAME_SIZE), BACKGROUND)
        draw = ImageDraw.Draw(image)
        for s in shapes:
            if s["frames"][0] <= i <= s["frames"][1]:
                _draw(draw, s["shape"], s["box"], COLOURS[s["colour"]])
        frames.append(image)
    return frames, {"answer": n, "solution": str(n), "shapes": shapes}


def make_video_item(task: str, seed: int, index: int) -> dict[str, Any]:
    """Video item ``index`` of ``task`` for ``seed`` (MP4 bytes in ``videos``); depends only on
    (task, seed, index)."""
    if task not in VIDEO_TASKS:
        raise ValueError(f"unknown video task {task!r}; expected one of {VIDEO_TASKS}")
    # str seeds are hashed with SHA-512 by random.Random: stable across processes and versions.
    rng = random.Random(f"vlrollout-video:{task}:{seed}:{index}")
    frames, fields = (_temporal_item if task == "temporal" else _count_item)(rng)
    text = {"type": "text", "text": VIDEO_PROMPTS[task]}
    return {
        "id": f"{task}-{seed}-{index}",
        "task": task,
        **fields,
        "messages": [{"role": "user", "content": [{"type": "video"}, text]}],
        "videos": [encode_mp4(frames)],
        "duration_s": NUM_FRAMES / FPS,
        "clip": {"fps": FPS, "num_frames": NUM_FRAMES, "size": [FRAME_SIZE, FRAME_SIZE]},
    }


def generate_video_items(n: int, seed: int, tasks: Sequence[str] = VIDEO_TASKS) -> list[dict]:
    """``n`` deterministic video items, cycling through ``tasks``; same seed, same bytes.

    >>> [it["id"] for it in generate_video_items(3, seed=0)]
    ['temporal-0-0', 'video_count-0-1', 'temporal-0-2']
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [make_video_item(tasks[i % len(tasks)], seed, i) for i in range(n)]


def write_media_dataset(
    items: Sequence[dict[str, Any]],
    out_dir: str | Path,
    name: str,
    field: str,
    suffix: str,
    save: Callable[[Any, Path], None],
) -> Path:
    """Write ``items`` as ``out_dir/name`` (JSONL) with each entry of ``item[field]`` saved by
    ``save`` as ``out_dir/<field>/<id>[-k]<suffix>``; the JSONL holds those paths, relative to its
    own folder. Returns the JSONL path."""
    out = Path(out_dir)
    (out / field).mkdir(parents=True, exist_ok=True)
    rows = []
    for item in items:
        paths = []
        for k, media in enumerate(item[field]):
            tail = "" if len(item[field]) == 1 else f"-{k}"
            path = f"{field}/{item['id']}{tail}{suffix}"
            save(media, out / path)
            paths.append(path)
        rows.append({**item, field: paths})
    return write_jsonl(out / name, rows)


def write_video_dataset(
    items: Sequence[dict[str, Any]], out_dir: str | Path, name: str = VIDEO_DATA_NAME
) -> Path:
    """Write ``items`` as ``out_dir/name`` (JSONL) plus ``out_dir/videos/<id>.mp4``.

    Video paths in the JSONL are relative to the JSONL file's folder. Returns the JSONL path.
    """
    return write_media_dataset(items, out_dir, name, "videos", ".mp4", _write_bytes)


def _write_bytes(data: bytes, path: Path) -> None:
    path.write_bytes(data)
