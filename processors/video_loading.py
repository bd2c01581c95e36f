"""Load one video from any supported source into its sampled RGB frames, with limits.

Sources, resolved like images (:mod:`.image_loading`): a file path (also ``file://``), raw
``bytes``, a base64 string or ``data:video/...;base64,`` URL (decoded with PyAV, the decoder
transformers' video processors use by default), or a list of frames (each any image source: PIL,
path, bytes, data URL). Remote URLs are refused (``video_source``). Errors use the image reasons with
``video_`` in place of ``image_``: ``video_source``, ``video_not_found``, ``video_too_large``,
``video_empty``, ``video_decode``.

Decompression-bomb guards, all checked before any pixel is decoded: encoded size (``max_bytes``),
the stream's frame size (``max_frame_pixels``, the header's width × height; decoded frames are
checked again) and the frame count (``max_source_frames``, counted from the demuxed packets). Only
the sampled frames (:mod:`.video_sampling`) are kept; the others are decoded and dropped.

A frame list is taken as already sampled at the sampling ``fps`` (its frame ``k`` is at
``k / fps`` seconds) and kept whole (the processor pads an odd count to its temporal patch as it
does for any clip); more frames than ``max_frames`` are sampled down by the same rule. The sampled
frames of one video may hold at most :data:`DEFAULT_MAX_SAMPLED_PIXELS` pixels together.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from PIL import Image

from .base import VideoClip
from .errors import PreprocessError
from .image_loading import load_image, peek_source, read_source
from .video_limits import (
    DEFAULT_MAX_FRAME_PIXELS,
    DEFAULT_MAX_SAMPLED_PIXELS,
    DEFAULT_MAX_SOURCE_FRAMES,
    DEFAULT_MAX_VIDEO_BYTES,
)
from .video_sampling import VideoSampling

THUMBNAILS = 8
THUMBNAIL_HEIGHT = 56


SHORT_OF_DECLARED = 0.75
"""A file whose frames cover less than this share of its container's declared length is refused
as cut short (VFR clips, whose frame count over their average rate is near their length, pass)."""
LATE_FRAMES, LATE_SECONDS = 2, 0.1
"""A first decodable frame later than this many frames (and seconds) after the stream's start is
refused: the frames before it are lost."""


@dataclass(frozen=True)
class LoadedVideo:
    """One video's sampled frames and their timing.

    Attributes:
        frames: ``uint8`` RGB frames, ``[num_frames, height, width, 3]``.
        clip: The timing record the prepared prompt carries.
    """

    frames: np.ndarray
    clip: VideoClip

    def metadata(self) -> dict[str, Any]:
        """``transformers.video_utils.VideoMetadata`` fields for the processor."""
        c = self.clip
        return {
            "total_num_frames": c.total_frames,
            "fps": c.source_fps,
            "width": c.width,
            "height": c.height,
            "duration": c.duration_s,
            "frames_indices": list(c.frame_indices),
        }


@dataclass(frozen=True)
class VideoLimits:
    """The decompression-bomb guards of the module docstring, checked before any pixel is decoded.

    Attributes:
        max_bytes: Largest encoded video (or frame of a frame list) accepted.
        max_source_frames: Most frames the source may have.
        max_frame_pixels: Largest frame (width × height) accepted.
    """

    max_bytes: int = DEFAULT_MAX_VIDEO_BYTES
    max_source_frames: int = DEFAULT_MAX_SOURCE_FRAMES
    max_frame_pixels: int = DEFAULT_MAX_FRAME_PIXELS


_IMAGE_WORD = re.compile(r"(?<![\w/\\.-])image(?![\w/\\.-])")
"""The word "image" in a loading error, not inside a path or a name the user wrote."""


def _as_video_error(e: PreprocessError, item: str) -> PreprocessError:
    """An image loading error of a video source, in video words; the source as written."""
    reason = e.reason.replace("image_", "video_")
    detail = e.detail.replace("or PIL image", "or a list of frames")
    return PreprocessError(item, reason, _IMAGE_WORD.sub("video", detail))


def read_video_bytes(source: Any, item: str, max_bytes: int) -> tuple[str, bytes]:
    """``(source_kind, encoded bytes)`` of a path / bytes / base64 / ``data:`` URL source."""
    if isinstance(source, Image.Image):
        raise PreprocessError(
            item, "video_source", "a PIL image is not a video; give a list of frames"
        )
    try:
        return read_source(source, item, max_bytes)
    except PreprocessError as e:
        raise _as_video_error(e, item) from None


def check_frame_size(size: tuple[int, int], item: str, max_frame_pixels: int) -> None:
    """Refuse frames of zero size (``video_empty``) and frames over ``max_frame_pixels``
    (``video_too_large``, naming the setting that raises the limit)."""
    width, height = size
    if width <= 0 or height <= 0:
        raise PreprocessError(item, "video_empty", f"frames have zero size {width}x{height}")
    if width * height > max_frame_pixels:
        raise PreprocessError(
            item,
            "video_too_large",
            f"a frame of {width}x{height} = {width * height} pixels exceeds the decode limit "
            f"max_video_frame_pixels={max_frame_pixels} (a guard against decompression bombs, "
            "not the resize budget video_max_pixels); downscale the video or raise the limit (a "
            "run's config: preprocessor: {name: auto, max_video_frame_pixels: N}; vlrollout "
            "serve --max-video-frame-pixels N)",
        )


def _frame_limits(stream: Any, item: str, max_frame_pixels: int) -> tuple[int, int]:
    ctx = stream.codec_context
    size = (int(ctx.width), int(ctx.height))
    if size[0] <= 0 or size[1] <= 0:  # the header gave no size: FFmpeg cannot read the stream
        raise PreprocessError(
            item,
            "video_decode",
            f"FFmpeg reads no frame size from the {ctx.name or 'unknown'} stream (animated WebP "
            "is one it cannot decode); convert the clip to mp4 or webm",
        )
    check_frame_size(size, item, max_frame_pixels)
    return size


STILL_IMAGE_MAGIC = {
    b"\x89PNG": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
}
"""How still images start: FFmpeg opens one as a one-frame clip of made-up timing (25 fps,
0.04 s), so a picture given as a video is refused. An animated GIF is a video, and so is an
animated PNG (:func:`is_animated_png`)."""


def is_animated_png(raw: bytes) -> bool:
    """Whether PNG bytes are an animated PNG: its ``acTL`` chunk comes before the first image
    data (``IDAT``), which FFmpeg decodes frame by frame."""
    head = raw[: raw.find(b"IDAT")] if b"IDAT" in raw else raw
    return b"acTL" in head


def _open(raw: bytes, item: str) -> tuple[Any, Any]:
    for magic, kind in STILL_IMAGE_MAGIC.items():
        if raw.startswith(magic) and not (kind == "PNG" and is_animated_png(raw)):
            raise PreprocessError(
                item, "video_decode", f"a {kind} image, not a video; give it in images"
            )
    try:
        container = av.open(io.BytesIO(raw), mode="r")
    except (av.FFmpegError, ValueError, OSError) as e:
        raise PreprocessError(
            item, "video_decode", f"cannot open video ({len(raw)} bytes): {e}"
        ) from None
    if not container.streams.video:
        container.close()
        raise PreprocessError(item, "video_decode", "the file has no video stream")
    return container, container.streams.video[0]


def _check_length(count: int, rate: Any, declared_us: int | None, item: str) -> None:
    """Refuse a file whose frames cover well under the length its container declares (a file
    cut short: sampled from what is left, its timestamps would describe another clip)."""
    if not (rate and declared_us and declared_us > 0):
        return
    declared, held = declared_us / 1e6, count / float(rate)
    if held < SHORT_OF_DECLARED * declared:
        raise PreprocessError(
            item,
            "video_decode",
            f"the container declares {declared:.3g} s but the file holds {count} frames "
            f"({held:.3g} s at {float(rate):.3g} fps): it is cut short; give the whole file",
        )


def _declared_us(container: Any, stream: Any) -> int | None:
    """The video stream's own declared length in microseconds: its header's duration, else the
    container's less the time before the stream starts (a longer audio track, or a cut that
    kept its timestamps, is not video the file lacks)."""
    if stream.duration and stream.time_base:
        return int(stream.duration * stream.time_base * 1_000_000)
    if container.duration is None:
        return None
    start = float(stream.start_time * stream.time_base) if stream.start_time else 0.0
    origin = (container.start_time or 0) / 1e6
    return int(container.duration - max(0.0, start - origin) * 1_000_000)


def _count_frames(raw: bytes, item: str, max_source_frames: int) -> tuple[int, float | None]:
    """Frames (packets) in the video stream and its frame rate, without decoding: the container's
    average rate, or the one its frames' timestamps give where they disagree (FFmpeg gives a raw
    stream, such as ``.m4v``, a made-up 25 fps). A stream whose timestamps go back (files joined
    end to end) is refused: its frames' times would name other frames."""
    container, stream = _open(raw, item)
    with container:
        declared = _declared_us(container, stream)
        rate = stream.average_rate or stream.guessed_rate
        count, times = 0, _PacketTimes(item)
        try:
            for packet in container.demux(stream):
                if not packet.size:
                    continue
                count += 1
                times.add(packet)
                if count > max_source_frames:
                    raise PreprocessError(
                        item,
                        "video_too_large",
                        f"more than max_source_frames={max_source_frames} frames",
                    )
        except av.FFmpegError as e:
            raise PreprocessError(item, "video_decode", f"corrupt video: {e}") from None
    timed = times.rate(count, stream.time_base)
    if timed and (not rate or abs(timed / float(rate) - 1) > RATE_DISAGREEMENT):
        rate = timed
    _check_length(count, rate, declared, item)
    return count, float(rate) if rate else None


RATE_DISAGREEMENT = 0.1
"""How far the container's average frame rate may stray from its frames' timestamps before the
timestamps' rate is used (a variable-rate clip's two rates differ by about one frame's share)."""


class _PacketTimes:
    """The span of a stream's packet timestamps, and a check that decoding order never goes
    back in time."""

    def __init__(self, item: str) -> None:
        self.item = item
        self.first: int | None = None
        self.last: int | None = None
        self.end: int | None = None  # when the last frame leaves the screen, where packets say
        self.dts: int | None = None

    def add(self, packet: Any) -> None:
        if packet.dts is not None:
            if self.dts is not None and packet.dts < self.dts:
                raise PreprocessError(
                    self.item,
                    "video_decode",
                    "its timestamps go back mid-stream (files joined end to end?), so frame "
                    "times cannot be told: re-encode it as one clip",
                )
            self.dts = packet.dts
        if packet.pts is not None:
            self.first = packet.pts if self.first is None else min(self.first, packet.pts)
            self.last = packet.pts if self.last is None else max(self.last, packet.pts)
            if packet.duration:
                end = packet.pts + packet.duration
                self.end = end if self.end is None else max(self.end, end)

    def rate(self, count: int, time_base: Any) -> float | None:
        """Frames per second the timestamps give (``None``: fewer than two timed frames): the
        frames over the time they are on screen, the last one's included where packets give
        their durations (a GIF's last slide held 2 s is 2 s of its clip)."""
        if count < 2 or self.first is None or self.last is None or self.last <= self.first:
            return None
        if self.end is not None and self.end > self.last:
            return count / float((self.end - self.first) * time_base)
        return (count - 1) / float((self.last - self.first) * time_base)


def _frames_on_screen(
    raw: bytes, item: str, wanted: list[int], rate: float, max_frame_pixels: int
) -> Iterator[Any]:
    """The decoded frames on screen at the wanted indices' times (``k / rate`` from the first
    frame), one at a time: each the last frame shown at or before its time, as a player shows
    it. For a constant-rate clip that is frame ``k`` itself; a variable-rate one (a phone clip, a
    GIF of uneven delays) gets the frames of its real time line, not of its frame count. Fewer
    frames if the stream ends first."""
    container, stream = _open(raw, item)
    targets = [k / rate for k in wanted]
    slack = min(0.25 / rate, 0.005)  # timestamp rounding, well under a frame
    taken = 0
    origin = None if stream.start_time is None else float(stream.start_time * stream.time_base)
    with container:
        _frame_limits(stream, item, max_frame_pixels)
        try:
            previous, start = None, None
            for index, frame in enumerate(container.decode(stream)):
                if frame.time is None:
                    shown = index / rate
                else:
                    if start is None:
                        _check_first_frame(frame.time, origin, rate, item)
                    start = frame.time if start is None else start
                    shown = frame.time - start
                while previous is not None and taken < len(targets):
                    if targets[taken] >= shown - slack:
                        break
                    yield previous
                    taken += 1
                if taken == len(targets):
                    break
                previous = frame
            else:  # the stream ended: its last frame stays on screen
                while previous is not None and taken < min(len(targets), index + 1):
                    yield previous
                    taken += 1
        except av.FFmpegError as e:
            raise PreprocessError(item, "video_decode", f"corrupt video: {e}") from None


def _check_first_frame(time: float, origin: float | None, rate: float, item: str) -> None:
    """Refuse a stream whose first decodable frame comes well after the stream starts (a lost
    keyframe: the frames before the next one do not decode), which would shift every sampled
    frame's timestamp."""
    if origin is not None and time - origin > max(LATE_FRAMES / rate, LATE_SECONDS):
        raise PreprocessError(
            item,
            "video_decode",
            f"the first {time - origin:.3g} s of the clip do not decode (its first decodable "
            f"frame is at {time:.3g} s; a keyframe is missing or corrupt): re-encode the file",
        )


def _decode_frames(
    raw: bytes, item: str, wanted: list[int], rate: float, max_frame_pixels: int
) -> list[np.ndarray]:
    """The frames on screen at the wanted indices' times (:func:`_frames_on_screen`), as upright
    RGB, all of the first one's size."""
    out: list[np.ndarray] = []
    for frame in _frames_on_screen(raw, item, wanted, rate, max_frame_pixels):
        out.append(_frame_pixels(frame, out, wanted, item, max_frame_pixels))
    return out


def _frame_pixels(
    frame: Any, out: list[np.ndarray], wanted: list[int], item: str, max_frame_pixels: int
) -> np.ndarray:
    """``frame`` as upright RGB (:func:`_upright`), checked against the frame limit and the
    clip's first kept frame."""
    check_frame_size((frame.width, frame.height), item, max_frame_pixels)
    pixels = _upright(frame.to_ndarray(format="rgb24"), getattr(frame, "rotation", 0) or 0)
    if out:
        _check_same_size(
            pixels.shape[1::-1],
            out[0],
            f"frame {wanted[len(out)] + 1}",
            f"frame {wanted[0] + 1}",
            item,
        )
    return pixels


def _upright(pixels: np.ndarray, rotation: float) -> np.ndarray:
    """``pixels`` turned by the stream's display matrix (``rotation``: degrees counterclockwise,
    as PyAV reads it), so a phone clip is the picture a player shows, as an image's EXIF
    orientation is applied; labels are in that upright frame."""
    turns = round(rotation / 90) % 4
    return np.ascontiguousarray(np.rot90(pixels, k=turns)) if turns else pixels


@dataclass(frozen=True)
class PeekedVideo:
    """One video source read and measured before any frame is decoded: its frame size and the
    frames that will be sampled, so what decoding them costs (:attr:`pixels`) is known first and
    a decode room (:mod:`.decode_room`) can be held for it. :meth:`decode` decodes them.

    Attributes:
        item: How errors name the video.
        source: The encoded bytes, or the list of frames (each any image source).
        kind: How the source was given (``"path"``, ``"bytes"``, ... or ``"frames"``).
        size: A source frame's (width, height) as stored.
        total: Frames in the source.
        source_fps: Its frame rate (a frame list's: the sampling ``fps``).
        wanted: The source frame indices to sample.
        sampling: The sampling settings (a clip with fewer decodable frames than packets is
            sampled again from those that decode).
        limits: The limits decoding checks each frame against.
    """

    item: str
    source: bytes | list[Any]
    kind: str
    size: tuple[int, int]
    total: int
    source_fps: float
    wanted: list[int]
    sampling: VideoSampling
    limits: VideoLimits

    @property
    def pixels(self) -> int:
        """The sampled frames' pixels together."""
        return len(self.wanted) * self.size[0] * self.size[1]

    @property
    def shown(self) -> str:
        """The clip as a message names it: ``"8 frames of 1200x1200"``."""
        return f"{len(self.wanted)} frames of {self.size[0]}x{self.size[1]}"

    def decode(self) -> LoadedVideo:
        """The sampled frames, decoded (a frame list's loaded as images)."""
        if isinstance(self.source, list):
            return _load_frames(self)
        return _decode_sampled(self, self.source)

    def thumbnails(self) -> list[Image.Image]:
        """The thumbnails of the sampled frames (:func:`thumbnails`), each made as its frame is
        decoded: only the frames they show are decoded, one at a time."""
        shown = [self.wanted[k] for k in thumbnail_picks(len(self.wanted))]
        if isinstance(self.source, list):
            images = (_list_frame(self, k) for k in shown)
        else:
            limit = self.limits.max_frame_pixels
            frames = _frames_on_screen(self.source, self.item, shown, self.source_fps, limit)
            images = (
                Image.fromarray(_frame_pixels(f, [], shown, self.item, limit)) for f in frames
            )
        return [thumbnail(image) for image in images]


def _peek_encoded(
    raw: bytes, kind: str, item: str, sampling: VideoSampling, limits: VideoLimits
) -> PeekedVideo:
    """An encoded video's header read and its packets counted, without decoding a frame."""
    container, stream = _open(raw, item)
    with container:
        size = _frame_limits(stream, item, limits.max_frame_pixels)
    total, rate = _count_frames(raw, item, limits.max_source_frames)
    if total == 0:
        raise PreprocessError(item, "video_empty", "the video stream has no frames")
    source_fps = rate or sampling.fps
    wanted = sampling.indices(total, source_fps)
    check_sampled_pixels(len(wanted), size, item)
    return PeekedVideo(item, raw, kind, size, total, source_fps, wanted, sampling, limits)


def _decode_sampled(video: PeekedVideo, raw: bytes) -> LoadedVideo:
    item, wanted, limit = video.item, video.wanted, video.limits.max_frame_pixels
    total, rate = video.total, video.source_fps
    frames = _decode_frames(raw, item, wanted, rate, limit)
    if len(frames) < len(wanted):  # fewer decodable frames than packets: sample what there is
        total = _decoded_count(raw, item)
        if total == 0:
            raise PreprocessError(item, "video_empty", "no frame of the video decodes")
        wanted = video.sampling.indices(total, rate)
        frames = _decode_frames(raw, item, wanted, rate, limit)
    return _loaded(np.stack(frames), wanted, total, rate, video.kind)


def _decoded_count(raw: bytes, item: str) -> int:
    container, stream = _open(raw, item)
    with container:
        try:
            return sum(1 for _ in container.decode(stream))
        except av.FFmpegError as e:
            raise PreprocessError(item, "video_decode", f"corrupt video: {e}") from None


def _peek_frames(
    frames: list[Any], item: str, sampling: VideoSampling, limits: VideoLimits
) -> PeekedVideo:
    """A frame list, taken at ``sampling.fps``: its sampled frames, and the first one's size from
    its header."""
    if not frames:
        raise PreprocessError(item, "video_empty", "the frame list is empty")
    n = len(frames)
    if n > limits.max_source_frames:
        raise PreprocessError(
            item,
            "video_too_large",
            f"{n} frames exceed max_source_frames={limits.max_source_frames}",
        )
    wanted = list(range(n)) if n <= sampling.max_frames else sampling.indices(n, sampling.fps)
    label = f"{item}, frame {wanted[0] + 1}"
    first = peek_source(
        frames[wanted[0]], label, max_pixels=sys.maxsize, max_bytes=limits.max_bytes
    )
    check_frame_size(first.size, item, limits.max_frame_pixels)  # headers only: nothing decoded
    check_sampled_pixels(len(wanted), first.size, item)
    return PeekedVideo(
        item, frames, "frames", first.size, n, sampling.fps, wanted, sampling, limits
    )


def _list_frame(video: PeekedVideo, k: int) -> Image.Image:
    """Frame ``k`` of a frame list, loaded as an image under the video's limits."""
    return load_image(
        video.source[k],
        f"{video.item}, frame {k + 1}",
        max_pixels=video.limits.max_frame_pixels,
        max_bytes=video.limits.max_bytes,
    ).image


def _load_frames(video: PeekedVideo) -> LoadedVideo:
    """A frame list's sampled frames, each loaded as an image, all of the first one's size."""
    wanted = video.wanted
    out: list[np.ndarray] = []
    for k in wanted:
        image = _list_frame(video, k)
        if out:
            this, that = f"frame {k + 1}", f"frame {wanted[0] + 1}"
            _check_same_size(image.size, out[0], this, that, video.item)
        out.append(np.asarray(image))
    return _loaded(np.stack(out), wanted, video.total, video.source_fps, "frames")


def _check_same_size(
    size: tuple[int, int], first: np.ndarray, this: str, that: str, item: str
) -> None:
    """Refuse a frame whose ``(width, height)`` differs from the clip's first frame's."""
    height, width = first.shape[:2]
    if size != (width, height):
        raise PreprocessError(
            item,
            "video_frames",
            f"{this} is {size[0]}x{size[1]}, {that} {width}x{height}: a clip's frames must be "
            "one size (re-encode or resize them to one)",
        )


def check_sampled_pixels(
    count: int, size: tuple[int, int] | None, item: str, cap: int = DEFAULT_MAX_SAMPLED_PIXELS
) -> None:
    """Refuse sampling ``count`` frames of ``size`` when they would hold more than ``cap``
    pixels together (checked before decoding them)."""
    if size is None:
        return
    total = count * size[0] * size[1]
    if total > cap:
        raise PreprocessError(
            item,
            "video_too_large",
            f"{count} sampled frames of {size[0]}x{size[1]} hold {total} pixels, over {cap}; "
            "lower video_max_frames or downscale the video",
        )


def _loaded(
    frames: np.ndarray, wanted: list[int], total: int, source_fps: float, kind: str
) -> LoadedVideo:
    height, width = int(frames.shape[1]), int(frames.shape[2])
    clip = VideoClip(
        frame_indices=list(wanted),
        timestamps_s=[k / source_fps for k in wanted],
        fps=len(wanted) / total * source_fps,
        source_fps=source_fps,
        total_frames=total,
        width=width,
        height=height,
        source_kind=kind,
        thumbnails=thumbnails(frames),
    )
    return LoadedVideo(frames=frames, clip=clip)


def thumbnail_picks(n: int, count: int = THUMBNAILS) -> list[int]:
    """Which of ``n`` frames the thumbnails show: up to ``count``, evenly spaced.

    >>> thumbnail_picks(20)
    [0, 2, 5, 7, 10, 12, 15, 17]
    """
    return list(range(n)) if n <= count else [k * n // count for k in range(count)]


def thumbnail(image: Image.Image) -> Image.Image:
    """``image`` scaled to ``THUMBNAIL_HEIGHT`` pixels high, for the report."""
    width = max(1, round(image.width * THUMBNAIL_HEIGHT / image.height))
    return image.resize((width, THUMBNAIL_HEIGHT), Image.Resampling.BILINEAR)


def thumbnails(frames: np.ndarray, count: int = THUMBNAILS) -> list[Image.Image]:
    """Up to ``count`` evenly spaced frames as thumbnails (:func:`thumbnail`)."""
    return [thumbnail(Image.fromarray(frames[k])) for k in thumbnail_picks(len(frames), count)]


def peek_video(
    source: Any, item: str, sampling: VideoSampling, limits: VideoLimits = VideoLimits()
) -> PeekedVideo:
    """Read one video source and measure it without decoding a frame: its frame size from the
    stream's header (or a frame list's first sampled frame's) and the frames to sample, from the
    demuxed packets.

    Args:
        source: Path, bytes, base64 string, ``data:`` URL, or a list/tuple of frames.
        item: How errors name the video, e.g. ``"item 17, video 1"``.
        sampling: Which frames to keep (:class:`~.video_sampling.VideoSampling`).
        limits: The decompression-bomb guards.

    Raises:
        PreprocessError: ``video_source``, ``video_not_found``, ``video_too_large``,
            ``video_empty`` or ``video_decode``.
    """
    if isinstance(source, list | tuple):
        return _peek_frames(list(source), item, sampling, limits)
    kind, raw = read_video_bytes(source, item, limits.max_bytes)
    return _peek_encoded(raw, kind, item, sampling, limits)


def load_video(
    source: Any, item: str, sampling: VideoSampling, limits: VideoLimits = VideoLimits()
) -> LoadedVideo:
    """Load one video source and decode its sampled frames (:func:`peek_video`, then
    :meth:`PeekedVideo.decode`).

    Raises:
        PreprocessError: those of :func:`peek_video`, and ``video_decode`` or ``video_frames``
            (frames of different sizes) while decoding.
    """
    return peek_video(source, item, sampling, limits).decode()
