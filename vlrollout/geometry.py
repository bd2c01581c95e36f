"""Image geometry, in one place: how original pixels map to the frame the model saw.

Every preprocessor records, per image, an :class:`ImageGeometry`: the original size (decoded, after
EXIF orientation), the model frame's size, and the transform between them,

    x_model = x_original * scale_x + offset_x        y_model = y_original * scale_y + offset_y

which describes a plain resize (Qwen-VL ``smart_resize``: offsets 0), a resize then centre crop
(LLaVA-1.5: negative offsets, part of the original falls outside the frame) and a resize then pad
(LLaVA-OneVision anyres, letterboxing: positive offsets, the frame holds padding). Custom
preprocessors build theirs from :meth:`ImageGeometry.resized`, :meth:`~ImageGeometry.cropped`,
:meth:`~ImageGeometry.padded` and :meth:`~ImageGeometry.then`; rewards (``vlrollout.rewards``) and
tools (``vlrollout.tools``) convert boxes and points with :func:`convert_boxes` /
:func:`convert_points`.

Coordinate frames (where a box ``[x1, y1, x2, y2]`` or point ``[x, y]`` lives):

- ``original``: pixels of the decoded image — where dataset labels live;
- ``model``: pixels of the model frame (Qwen2.5-VL writes absolute pixels in it);
- ``norm1000``: the model frame scaled to 0..1000 on both axes (Qwen2-VL, Qwen3-VL, InternVL, GLM);
- ``norm1``: the model frame scaled to 0..1.

Normalised frames are relative to the model frame (the image the model saw); with a plain resize
that is the same as relative to the original. Geometry travels to rewards as
:meth:`ImageGeometry.to_dict` (the four sizes plus ``scale_*``/``offset_*``); dicts with only the
four sizes mean a plain resize.

>>> g = ImageGeometry.resized(100, 50, 200, 200).then(ImageGeometry.cropped(200, 200, (0, 50, 200, 150)))
>>> g.model_width, g.model_height, g.offset_y
(200, 100, -50.0)
>>> convert_boxes([(0, 25, 100, 50)], "original", "model", g)
[(0.0, 50.0, 200.0, 150.0)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Box = tuple[float, float, float, float]
Point = tuple[float, float]

SIZE_KEYS = ("original_width", "original_height", "model_width", "model_height")
TRANSFORM_KEYS = ("scale_x", "scale_y", "offset_x", "offset_y")


class Frame(StrEnum):
    """Where coordinates live; see the module docstring."""

    ORIGINAL = "original"
    MODEL = "model"
    NORM1000 = "norm1000"
    NORM1 = "norm1"


@dataclass(frozen=True)
class ImageGeometry:
    """One image's original size, model-frame size and the affine map between them.

    Attributes:
        original_width, original_height: Size of the decoded image (after EXIF orientation).
        model_width, model_height: Size of the frame the model saw.
        scale_x, scale_y: Model pixels per original pixel; ``model / original`` when ``None``
            (a plain resize).
        offset_x, offset_y: Model-frame position of the original's top-left corner (negative
            after a crop, positive after padding).

    >>> g = ImageGeometry(640, 480, 644, 476)
    >>> round(g.scale_x, 4), g.offset_x
    (1.0063, 0.0)
    """

    original_width: int
    original_height: int
    model_width: int
    model_height: int
    scale_x: float | None = None
    scale_y: float | None = None
    offset_x: float = 0.0
    offset_y: float = 0.0

    def __post_init__(self) -> None:
        sizes = {k: getattr(self, k) for k in SIZE_KEYS}
        bad = {k: v for k, v in sizes.items() if not v > 0}
        if bad:
            raise ValueError(f"geometry sizes must be positive, got {bad}")
        if self.scale_x is None:
            object.__setattr__(self, "scale_x", self.model_width / self.original_width)
        if self.scale_y is None:
            object.__setattr__(self, "scale_y", self.model_height / self.original_height)
        if not (self.scale_x > 0 and self.scale_y > 0):
            raise ValueError(
                f"geometry scales must be positive, got {self.scale_x}, {self.scale_y}"
            )
        object.__setattr__(self, "offset_x", float(self.offset_x))
        object.__setattr__(self, "offset_y", float(self.offset_y))

    # -- building blocks ------------------------------------------------------------------------

    @classmethod
    def identity(cls, width: int, height: int) -> ImageGeometry:
        """The model sees the image as it is."""
        return cls(width, height, width, height)

    @classmethod
    def resized(cls, width: int, height: int, new_width: int, new_height: int) -> ImageGeometry:
        """A resize of ``width``×``height`` to ``new_width``×``new_height`` (aspect may change)."""
        return cls(width, height, new_width, new_height)

    @classmethod
    def cropped(cls, width: int, height: int, box: tuple[int, int, int, int]) -> ImageGeometry:
        """A crop of ``box = (left, top, right, bottom)`` out of a ``width``×``height`` image."""
        left, top, right, bottom = box
        return cls(width, height, right - left, bottom - top, 1.0, 1.0, -left, -top)

    @classmethod
    def padded(
        cls, width: int, height: int, canvas_width: int, canvas_height: int, left: int, top: int
    ) -> ImageGeometry:
        """The image pasted at ``(left, top)`` on a ``canvas_width``×``canvas_height`` canvas."""
        return cls(width, height, canvas_width, canvas_height, 1.0, 1.0, left, top)

    @classmethod
    def letterboxed(cls, width: int, height: int, side: int) -> ImageGeometry:
        """Resize to fit a ``side``×``side`` square keeping the aspect ratio, centred on padding."""
        scale = side / max(width, height)
        new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
        return cls.resized(width, height, new_w, new_h).then(
            cls.padded(new_w, new_h, side, side, (side - new_w) // 2, (side - new_h) // 2)
        )

    def then(self, after: ImageGeometry) -> ImageGeometry:
        """This transform followed by ``after`` (whose original frame is this one's model frame).

        Raises:
            ValueError: ``after`` starts from a frame of another size.
        """
        if (after.original_width, after.original_height) != (self.model_width, self.model_height):
            raise ValueError(
                f"cannot compose: the first step ends in a {self.model_width}x{self.model_height} "
                f"frame, the next starts from {after.original_width}x{after.original_height}"
            )
        return ImageGeometry(
            self.original_width,
            self.original_height,
            after.model_width,
            after.model_height,
            self.scale_x * after.scale_x,
            self.scale_y * after.scale_y,
            self.offset_x * after.scale_x + after.offset_x,
            self.offset_y * after.scale_y + after.offset_y,
        )

    # -- applying it ----------------------------------------------------------------------------

    @property
    def is_plain_resize(self) -> bool:
        """No crop and no padding: the original fills the model frame exactly."""
        return (
            self.offset_x == 0
            and self.offset_y == 0
            and abs(self.scale_x * self.original_width - self.model_width) < 1e-6
            and abs(self.scale_y * self.original_height - self.model_height) < 1e-6
        )

    def to_model(self, x: float, y: float) -> Point:
        """Original-pixel coordinates → model-frame pixels."""
        return x * self.scale_x + self.offset_x, y * self.scale_y + self.offset_y

    def to_original(self, x: float, y: float) -> Point:
        """Model-frame pixels → original-pixel coordinates."""
        return (x - self.offset_x) / self.scale_x, (y - self.offset_y) / self.scale_y

    def to_dict(self) -> dict[str, float]:
        """As rewards receive it in ``task_data["geometry"]``: the four sizes, plus the transform
        (``scale_*``, ``offset_*``) when it is not a plain resize."""
        out: dict[str, float] = {k: getattr(self, k) for k in SIZE_KEYS}
        if not self.is_plain_resize:
            out.update({k: getattr(self, k) for k in TRANSFORM_KEYS})
        return out

    @classmethod
    def from_any(cls, geometry: Any) -> ImageGeometry:
        """An :class:`ImageGeometry` from itself, its dict, or an object with the size attributes.

        Raises:
            ValueError: a missing size key (named), or non-positive sizes.
        """
        if isinstance(geometry, ImageGeometry):
            return geometry
        if isinstance(geometry, Mapping):
            missing = [k for k in SIZE_KEYS if k not in geometry]
            if missing:
                raise ValueError(
                    f"geometry is missing {missing}; expected a dict with keys {list(SIZE_KEYS)} "
                    f"(ImageGeometry.to_dict()), got keys {sorted(geometry)}"
                )
            get = geometry.get
        else:
            missing = [k for k in SIZE_KEYS if not hasattr(geometry, k)]
            if missing:
                raise ValueError(
                    f"geometry must be a dict or ImageGeometry with {list(SIZE_KEYS)}, "
                    f"got {type(geometry).__name__}"
                )

            def get(k: str, d: Any = None) -> Any:
                return getattr(geometry, k, d)

        sizes = [float(get(k)) for k in SIZE_KEYS]  # __post_init__ checks they are positive
        sx, sy = get("scale_x"), get("scale_y")
        return cls(
            *sizes,  # type: ignore[arg-type]
            scale_x=None if sx is None else float(sx),
            scale_y=None if sy is None else float(sy),
            offset_x=float(get("offset_x", 0.0) or 0.0),
            offset_y=float(get("offset_y", 0.0) or 0.0),
        )


# -- frame conversion -----------------------------------------------------------------------------


def geometry_dict(geometry: Any) -> dict[str, float] | None:
    """Normalise a geometry (dict, :class:`ImageGeometry`-like or ``None``) to its full dict."""
    return None if geometry is None else ImageGeometry.from_any(geometry).to_dict()


def frame_size(frame: Frame | str, geometry: Any = None) -> tuple[float, float]:
    """Width and height of ``frame``'s coordinate range.

    >>> frame_size("model", {"original_width": 640, "original_height": 480,
    ...                      "model_width": 644, "model_height": 476})
    (644.0, 476.0)
    """
    frame = Frame(frame)
    if frame is Frame.NORM1000:
        return 1000.0, 1000.0
    if frame is Frame.NORM1:
        return 1.0, 1.0
    geo = _require(geometry, frame)
    if frame is Frame.ORIGINAL:
        return float(geo.original_width), float(geo.original_height)
    return float(geo.model_width), float(geo.model_height)


def _require(geometry: Any, frame: Frame) -> ImageGeometry:
    if geometry is None:
        raise ValueError(
            f"converting to or from the {frame.value!r} frame needs the image geometry "
            f"(task_data['geometry'], recorded by the preprocessor); none was given"
        )
    return ImageGeometry.from_any(geometry)


def check_conversion(src: Frame | str, dst: Frame | str, geometry: Any = None) -> None:
    """Raise the ``ValueError`` :func:`convert_boxes` from ``src`` to ``dst`` would raise (the
    geometry it needs is missing or malformed), before any box is read."""
    _converter(src, dst, geometry)


def _converter(src: Frame | str, dst: Frame | str, geometry: Any):
    """``(x, y) -> (x, y)`` from ``src`` to ``dst``, through the model frame."""
    src, dst = Frame(src), Frame(dst)
    if src is dst:
        return lambda x, y: (float(x), float(y))
    needs = Frame.ORIGINAL in (src, dst) or Frame.MODEL in (src, dst)
    geo = (
        _require(geometry, src if src in (Frame.ORIGINAL, Frame.MODEL) else dst) if needs else None
    )
    if geo is None or geo.is_plain_resize:
        # Per-axis scaling through the unit square: x_dst = x_src / W_src * W_dst.
        sw, sh = frame_size(src, geo)
        dw, dh = frame_size(dst, geo)
        return lambda x, y: (x / sw * dw, y / sh * dh)

    mw, mh = float(geo.model_width), float(geo.model_height)

    def to_model(x: float, y: float) -> Point:
        if src is Frame.ORIGINAL:
            return geo.to_model(x, y)
        if src is Frame.MODEL:
            return x, y
        w, h = frame_size(src)
        return x / w * mw, y / h * mh

    def from_model(x: float, y: float) -> Point:
        if dst is Frame.ORIGINAL:
            return geo.to_original(x, y)
        if dst is Frame.MODEL:
            return x, y
        w, h = frame_size(dst)
        return x / mw * w, y / mh * h

    return lambda x, y: from_model(*to_model(x, y))


def convert_boxes(
    boxes: Sequence[Sequence[float]], src: Frame | str, dst: Frame | str, geometry: Any = None
) -> list[Box]:
    """Convert ``[x1, y1, x2, y2]`` boxes from frame ``src`` to frame ``dst``.

    Args:
        boxes: Boxes as sequences of four numbers.
        src: Frame the boxes are in.
        dst: Frame to convert to.
        geometry: Needed when either frame is ``original`` or ``model``.

    >>> geo = {"original_width": 640, "original_height": 480, "model_width": 644,
    ...        "model_height": 476}
    >>> convert_boxes([(250, 250, 750, 750)], "norm1000", "original", geo)
    [(160.0, 120.0, 480.0, 360.0)]
    """
    f = _converter(src, dst, geometry)
    out = []
    for b in boxes:
        x1, y1 = f(b[0], b[1])
        x2, y2 = f(b[2], b[3])
        out.append((x1, y1, x2, y2))
    return out


def convert_points(
    points: Sequence[Sequence[float]], src: Frame | str, dst: Frame | str, geometry: Any = None
) -> list[Point]:
    """Convert ``[x, y]`` points from frame ``src`` to frame ``dst`` (see :func:`convert_boxes`)."""
    f = _converter(src, dst, geometry)
    return [f(p[0], p[1]) for p in points]
