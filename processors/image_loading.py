"""Load one image from any supported source into an oriented RGB PIL image, with limits.

Sources: a file path (``str`` or :class:`pathlib.Path`, also ``file://`` URLs), raw ``bytes``, a
base64 string, a ``data:`` URL, or a PIL image. ``http(s)://`` (and any other ``scheme://``) URLs
are refused with ``image_source``: rollouts must not depend on the network. Only regular files are
read (a FIFO or a device is ``image_source``), and never more than ``max_bytes`` of them.

Steps (each a small function, composed by :func:`load_image`):

1. read the source into encoded bytes (or take the PIL image), refusing more than ``max_bytes``;
2. open lazily and check ``width * height`` against ``max_pixels`` *before* decoding the pixels,
   so a decompression bomb never allocates (PIL's own ``DecompressionBombError`` maps to the same
   ``image_too_large`` reason); zero-size images are refused (``image_empty``);
3. take the first frame (animated GIF/WebP/APNG, multi-page TIFF) and decode it fully, so truncated
   or corrupt data fails here (``image_decode``) rather than inside the processor — PIL inputs too
   (lazily opened images, images seeked to a later frame), without moving the caller's image;
4. apply the EXIF orientation (``PIL.ImageOps.exif_transpose``);
5. convert to RGB by :func:`vlrollout.processors.image_mode.to_rgb` (alpha composited on white).

**What the engine receives** (:meth:`LoadedImage.to_base64`): the engine and the trainer must see
the same pixels. The original encoded bytes are passed through unchanged whenever an engine that
decodes them with PIL and ``convert("RGB")`` (SGLang, vLLM) gets exactly our pixels: the input was
encoded, its format is PNG, JPEG, WebP or GIF (what AReaL's ``detect_image_mime`` recognises), it has a
single frame and no EXIF rotation, and its mode converts to RGB by PIL's own rule in
:func:`~vlrollout.processors.image_mode.to_rgb` (``RGB``, grey ``L``, ``1``, and palette ``P``
without transparency). Otherwise (PIL input, rotation, alpha or transparency, 16-bit or float grey,
first-frame extraction, other formats) the RGB pixels are re-encoded as lossless WebP at its fastest
effort, which decodes to exactly the trainer's pixels (PNG where a side exceeds WebP's 16,383-pixel
limit). Of PIL's lossless codecs that compress, WebP encodes a photo fastest, is about as small as
PNG and decodes faster on the server. An uncompressed one (BMP) encodes almost for free, but its
body is several times larger, and AReaL's remote client serialises the body once per request:
timed alone, the two cost a group about the same, but WebP's encode can run beside the processor
call (below) and its small body cannot; ``bench/bench_engine_image_codecs.py`` measures each
codec's share per image size. Encoding happens only
when :meth:`LoadedImage.engine_bytes` is called: when an engine reads ``image_data``, or ahead, in
a background thread beside the processor call, for an episode whose engine sends images
(:data:`~vlrollout.processors.base.ENCODE_ENGINE_IMAGES_AHEAD`); once per prepared prompt (every
episode of a group shares it).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import stat
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from .errors import PreprocessError
from .image_mode import has_alpha, to_rgb

DEFAULT_MAX_PIXELS = 64 * 1024 * 1024
"""Largest decoded image accepted (width × height), below PIL's own 89.5 M bomb warning."""
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Largest encoded image accepted, in bytes."""
PASSTHROUGH_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "GIF"})
PASSTHROUGH_MODES = frozenset({"RGB", "L", "1", "P"})
"""Modes whose ``convert("RGB")`` (what servers do) equals ours, when they carry no transparency."""
WEBP_MAX_SIDE = 16383
"""Largest width or height a WebP image can have; larger images are re-encoded as PNG."""
PNG_COMPRESS_LEVEL = 1
"""zlib level of re-encoded PNGs: lossless at any level, level 1 is the fastest that compresses."""
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class LoadedImage:
    """One decoded image and what the engine should receive for it.

    Attributes:
        image: The oriented RGB image the processor (and so the trainer) sees.
        original_size: ``(width, height)`` of ``image`` (after EXIF orientation).
        source_kind: ``"path"``, ``"bytes"``, ``"base64"``, ``"data_url"`` or ``"pil"``.
        format: The encoded format PIL detected (``"JPEG"``, ``"PNG"``, ...); ``None`` for PIL input.
        encoded: The original encoded bytes when they can be passed through (see the module
            docstring); ``None`` when the engine must get a lossless re-encode.
        notes: Why the image was changed (``"exif_transpose"``, ``"mode P->RGB"``, ``"frame 0 of 3"``).
    """

    image: Image.Image
    original_size: tuple[int, int]
    source_kind: str
    format: str | None = None
    encoded: bytes | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passthrough(self) -> bool:
        """Whether :meth:`to_base64` returns the original bytes unchanged."""
        return self.encoded is not None

    @property
    def _re_encode_format(self) -> str:
        return "WEBP" if max(self.image.size) <= WEBP_MAX_SIDE else "PNG"

    @property
    def mime(self) -> str:
        return _MIME[self.format if self.passthrough else self._re_encode_format]

    def engine_bytes(self) -> bytes:
        """Encoded bytes for the engine: the original ones, or a lossless WebP (PNG past WebP's
        size limit) of ``image``."""
        if self.encoded is not None:
            return self.encoded
        buf = io.BytesIO()
        if self._re_encode_format == "WEBP":
            self.image.save(buf, format="WEBP", lossless=True, quality=0, method=0)
        else:
            self.image.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return buf.getvalue()

    def to_base64(self) -> str:
        """Base64 (no ``data:`` prefix) of :meth:`engine_bytes`, for SGLang's ``image_data``."""
        return base64.b64encode(self.engine_bytes()).decode("ascii")

    def to_data_url(self) -> str:
        """``data:<mime>;base64,...`` of :meth:`engine_bytes`, for OpenAI-style messages."""
        return f"data:{self.mime};base64,{self.to_base64()}"


def has_scheme(text: str, scheme: str) -> bool:
    """Whether ``text`` starts with the URL scheme ``scheme`` (``"data:"``, ``"file://"``),
    matched without regard to case as RFC 3986 says schemes are.

    >>> has_scheme("DATA:image/png;base64,AA", "data:"), has_scheme("img/data:1.png", "data:")
    (True, False)
    """
    return text[: len(scheme)].lower() == scheme


IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")
"""How PNG, JPEG, GIF, BMP and TIFF files start (WebP: a RIFF file, see
:func:`starts_like_media`)."""

VIDEO_MAGIC = (b"\x1a\x45\xdf\xa3",)
"""How WebM/Matroska files start (MP4/MOV: see :func:`starts_like_media`)."""


def starts_like_media(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts as an image or video file does: a signature
    of :data:`IMAGE_MAGIC` or :data:`VIDEO_MAGIC`, a RIFF file (WebP, AVI) or an ISO media
    ``ftyp`` box (MP4, MOV, HEIC, AVIF).

    >>> starts_like_media(b"GIF89a"), starts_like_media(b"photo0")
    (True, False)
    """
    return head.startswith((*IMAGE_MAGIC, *VIDEO_MAGIC, b"RIFF")) or head[4:8] == b"ftyp"


def standard_base64(payload: str) -> str:
    """``payload`` in the standard base64 alphabet: base64url (``-`` and ``_``, as JavaScript's
    and JWT encoders write it, often without ``=`` padding) is translated and padded. Other text,
    including text that mixes both alphabets, is left as it is, for the decoder to refuse.

    >>> standard_base64("YW-_Yg")
    'YW+/Yg=='
    """
    if ("-" in payload or "_" in payload) and not ("+" in payload or "/" in payload):
        payload = payload.replace("-", "+").replace("_", "/")
        return payload + "=" * (-len(payload) % 4)
    return payload


def decode_inline(text: str, item: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The encoded bytes of a base64 string or a ``data:...;base64,`` URL, at most ``max_bytes``.

    The one decoder of inline images: :func:`load_image` uses it for strings, and the engine and
    the server use it for what clients send, so every inline image meets the same rules. It never
    reads a file or the network. Whitespace in the payload is ignored, base64url is read
    (:func:`standard_base64`); anything else that is not base64 is refused. A payload whose
    base64 text alone implies more than ``max_bytes`` is refused before it is decoded.

    Raises:
        PreprocessError: ``image_source`` (a data URL that is not base64-encoded, invalid base64)
            or ``image_too_large`` (more than ``max_bytes`` encoded bytes).

    >>> decode_inline("data:image/png;base64,YWJj", "image 1")
    b'abc'
    """
    what = "base64"
    if has_scheme(text, "data:"):
        header, sep, payload = text.partition(",")
        if not sep or not header.lower().endswith(";base64"):
            raise PreprocessError(
                item, "image_source", f"data URL must be base64-encoded: {text[:40]!r}..."
            )
        text, what = payload, "base64 of the data URL"
    payload = "".join(text.split())
    at_least = len(payload) // 4 * 3 - 2  # 4 characters carry 3 bytes; padding takes up to 2
    if at_least > max_bytes:
        raise PreprocessError(
            item, "image_too_large", f"{at_least} encoded bytes exceed max_bytes={max_bytes}"
        )
    try:
        raw = base64.b64decode(standard_base64(payload), validate=True)
    except (binascii.Error, ValueError) as e:
        raise PreprocessError(item, "image_source", f"invalid {what}: {e}") from None
    if len(raw) > max_bytes:
        raise PreprocessError(
            item, "image_too_large", f"{len(raw)} encoded bytes exceed max_bytes={max_bytes}"
        )
    return raw


def read_source(source: Any, item: str, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, Any]:
    """Classify ``source`` and return ``(kind, bytes_or_pil_image)``.

    Strings are tried in this order: ``data:`` URL, ``file://`` URL, an existing file path, base64.
    A string that is none of these is reported as a missing file (``image_not_found``).

    >>> read_source(b"abc", "item 0, image 1")
    ('bytes', b'abc')
    """
    if isinstance(source, Image.Image):
        return "pil", source
    if isinstance(source, bytearray | memoryview):
        source = bytes(source)
    if isinstance(source, bytes):
        kind, raw = "bytes", source
    elif isinstance(source, os.PathLike):
        kind, raw = "path", _read_file(Path(source), item, max_bytes)
    elif isinstance(source, str):
        kind, raw = _read_string(source, item, max_bytes)
    elif isinstance(source, dict) and ("bytes" in source or "path" in source):
        # HF ``datasets`` Image feature rows: {"bytes": ..., "path": ...}
        src = source.get("bytes") or source.get("path")
        return read_source(src, item, max_bytes)
    else:
        raise PreprocessError(
            item,
            "image_source",
            f"unsupported image source of type {type(source).__name__}; use a path, bytes, "
            "base64 string, data: URL or PIL image",
        )
    if len(raw) > max_bytes:
        raise PreprocessError(
            item, "image_too_large", f"{len(raw)} encoded bytes exceed max_bytes={max_bytes}"
        )
    return kind, raw


def _read_file(path: Path, item: str, max_bytes: int) -> bytes:
    """Read a regular file, never more than ``max_bytes + 1`` bytes (the size ``stat`` reports
    is 0 for devices and pipes, so the limit is enforced while reading)."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise PreprocessError(item, "image_not_found", f"{path} is a directory")
            raise PreprocessError(
                item, "image_source", f"{path} is not a regular file (a pipe, socket or device)"
            )
        # O_NONBLOCK: a file swapped for a FIFO after the check cannot block the open.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise PreprocessError(item, "image_source", f"{path} is not a regular file")
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise PreprocessError(item, "image_not_found", f"no such file: {path}") from None
    except IsADirectoryError:
        raise PreprocessError(item, "image_not_found", f"{path} is a directory") from None
    except OSError as e:  # name too long, permission denied, ...
        raise PreprocessError(
            item, "image_not_found", f"cannot read {str(path)[:120]!r}: {e.strerror}"
        ) from None
    if len(data) > max_bytes:
        raise PreprocessError(
            item, "image_too_large", f"{path} has more than max_bytes={max_bytes} bytes"
        )
    return data


def file_url_path(url: str, item: str) -> Path:
    """The local path of a ``file:`` URL (``file:///a/b%20c.png`` and ``file:/a/b%20c.png`` →
    ``/a/b c.png``).

    Raises:
        PreprocessError: ``image_source`` for a URL naming a host other than ``localhost``
            (``file://media/a.png`` is the file ``/a.png`` on the host ``media``, not a relative
            path), or a relative one (``file:imgs/a.png``: a file URL's path is absolute, and
            read against the working folder the same line would name another file in each).
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.netloc not in ("", "localhost"):
        raise PreprocessError(
            item,
            "image_source",
            f"file URL {url[:80]!r} names the host {parsed.netloc!r}: a local file is "
            "file:///absolute/path, and a relative path is written without file://",
        )
    path = Path(urllib.request.url2pathname(parsed.path))
    if not path.is_absolute():
        raise PreprocessError(
            item,
            "image_source",
            f"file URL {url[:80]!r} holds a relative path: a file URL names an absolute path "
            "(file:///absolute/path); write a relative path without file: (then it is read "
            "against the data file's folder)",
        )
    return path


def _exists(text: str) -> bool:
    """``Path(text).exists()`` (a file, folder, pipe or device), false for names the OS rejects
    (too long, NUL bytes)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _padded(text: str) -> str:
    """Base64 text in a data file with its ``=`` padding restored (encoders often leave it out);
    the server's decoder stays strict."""
    compact = "".join(text.split())
    if "=" in compact or len(compact) % 4 not in (2, 3):
        return text
    return compact + "=" * (-len(compact) % 4)


_NAME_MAX = 255
"""The longest file name (Linux, macOS, Windows): longer base64 text is no name, so it is read
as base64 whatever its bytes start with, and a damaged image is image_decode."""


def _read_string(text: str, item: str, max_bytes: int) -> tuple[str, bytes]:
    if has_scheme(text.strip(), "data:") or has_scheme(text.strip(), "file:"):
        text = text.strip()  # a URL does not hold the whitespace around it
    if has_scheme(text, "data:"):
        return "data_url", decode_inline(text, item, max_bytes)
    if has_scheme(text, "file:"):
        return "path", _read_file(file_url_path(text, item), item, max_bytes)
    if _URL.match(text):
        raise PreprocessError(
            item,
            "image_source",
            f"remote URL {text[:80]!r} not fetched (no network in rollouts); download the image "
            "and give its path",
        )
    looks_like_path = len(text) < 4096 and ("/" in text[:256] or "\\" in text or "." in text[-6:])
    if (looks_like_path or len(text) <= _NAME_MAX) and _exists(text):  # "DSC04417" too
        return "path", _read_file(Path(text), item, max_bytes)
    missing = PreprocessError(
        item, "image_not_found", f"not a file, data: URL or base64 string: {text[:120]!r}"
    )
    try:
        raw = decode_inline(_padded(text), item, max_bytes)
    except PreprocessError as e:
        if e.reason != "image_source":
            raise
        raise missing from None
    if (looks_like_path or len(text) <= _NAME_MAX) and not starts_like_media(raw[:16]):
        raise missing  # a missing file whose name happens to be base64 ("photo001", an md5)
    return "base64", raw


def peek_image(raw: bytes, item: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open encoded bytes lazily (headers only, no pixel decoded) and enforce the size limits:
    what an image will cost once decoded is known here.

    Raises:
        PreprocessError: ``image_too_large`` (over ``max_pixels`` or a PIL decompression bomb),
            ``image_empty`` (zero width or height) or ``image_decode`` (not image data).
    """
    try:
        image = Image.open(io.BytesIO(raw))
    except Image.DecompressionBombError as e:
        raise PreprocessError(item, "image_too_large", f"decompression bomb: {e}") from None
    except UnidentifiedImageError:
        raise PreprocessError(
            item, "image_decode", f"cannot identify image data ({len(raw)} bytes)"
        ) from None
    except Exception as e:  # PIL's plug-ins raise many kinds on corrupt data (TIFF: TypeError)
        raise PreprocessError(item, "image_decode", f"cannot open image: {e}") from None
    check_size(image.size, item, max_pixels)
    return image


def peek_source(
    source: Any, item: str, max_pixels: int = DEFAULT_MAX_PIXELS, max_bytes: int = DEFAULT_MAX_BYTES
) -> Image.Image:
    """Any image source opened lazily (:func:`peek_image`; a PIL image is itself), with the size
    limits enforced: its size and mode are known, no pixel is decoded."""
    kind, raw = read_source(source, item, max_bytes)
    if kind == "pil":
        check_size(raw.size, item, max_pixels)
        return raw
    return peek_image(raw, item, max_pixels)


def open_image(raw: bytes, item: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """:func:`peek_image`, then decode the first frame fully (a corrupt or truncated image is
    ``image_decode``)."""
    image = peek_image(raw, item, max_pixels)
    try:
        image.seek(0)
        image.load()
    except Exception as e:  # as above: whatever a corrupt file makes the decoder raise
        raise PreprocessError(item, "image_decode", f"corrupt or truncated image: {e}") from None
    return image


def first_frame(image: Image.Image, item: str) -> Image.Image:
    """Frame 0 of a PIL image, fully decoded, leaving the caller's image where it was.

    PIL images are often lazy (HF ``datasets`` opens files without decoding), so a truncated file
    fails here as ``image_decode`` instead of inside the processor; a multi-frame image seeked to
    frame k still gives frame 0, the frame the geometry and every file input use.
    """
    try:
        if getattr(image, "n_frames", 1) > 1:
            where = image.tell()
            try:
                image.seek(0)
                image.load()
                return image.copy()
            finally:
                image.seek(where)
        image.load()
        return image
    except Exception as e:  # whatever a corrupt file makes PIL's decoder raise
        raise PreprocessError(item, "image_decode", f"corrupt or truncated image: {e}") from None


def frame_count(image: Image.Image, item: str) -> int:
    """How many frames ``image`` has. Counting walks the file (TIFF reads every frame's
    header), so a corrupt later frame fails here as ``image_decode``."""
    try:
        return getattr(image, "n_frames", 1)
    except Exception as e:  # whatever a corrupt file makes PIL's plug-in raise
        raise PreprocessError(item, "image_decode", f"corrupt frames: {e}") from None


def check_size(size: tuple[int, int], item: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
    """Refuse zero-size images and images over ``max_pixels`` (width × height)."""
    width, height = size
    if width <= 0 or height <= 0:
        raise PreprocessError(item, "image_empty", f"image has zero size {width}x{height}")
    if width * height > max_pixels:
        raise PreprocessError(
            item,
            "image_too_large",
            f"{width}x{height} = {width * height} pixels exceed the decode limit "
            f"max_image_pixels={max_pixels} (a guard against decompression bombs, not the resize "
            "budget --max-pixels); downscale the images or raise the limit (a run's config: "
            "preprocessor: {name: auto, max_image_pixels: N}; vlrollout serve "
            "--max-image-pixels N)",
        )


def shown_sizes(sizes: list[tuple[int, int]] | tuple[tuple[int, int], ...], most: int = 4) -> str:
    """Image sizes as a message names them: the first ``most`` as ``WxH``, then how many more.

    >>> shown_sizes([(640, 480)] * 6)
    '640x480, 640x480, 640x480, 640x480, and 2 more'
    """
    shown = ", ".join(f"{w}x{h}" for w, h in sizes[:most])
    return shown + (f", and {len(sizes) - most} more" if len(sizes) > most else "")


def exif_orientation(image: Image.Image) -> int:
    """The EXIF orientation tag (1 = upright; 2–8 need a flip/rotation)."""
    try:
        return int(image.getexif().get(ExifTags.Base.Orientation, 1) or 1)
    except Exception:  # malformed EXIF is treated as upright, like exif_transpose does
        return 1


def load_image(
    source: Any,
    item: str = "image",
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> LoadedImage:
    """Load, orient and convert one image; see the module docstring for the rules.

    Args:
        source: Path, bytes, base64 string, ``data:`` URL or PIL image.
        item: How errors name the image, e.g. ``"item 17, image 2"``.
        max_pixels: Largest accepted ``width * height`` of the decoded image.
        max_bytes: Largest accepted encoded size.

    Returns:
        A :class:`LoadedImage` whose ``image`` is RGB and upright.

    Raises:
        PreprocessError: With reason ``image_source``, ``image_not_found``, ``image_too_large``,
            ``image_empty`` or ``image_decode``.

    >>> from PIL import Image
    >>> loaded = load_image(Image.new("RGBA", (4, 2)), "item 0, image 1")
    >>> loaded.image.mode, loaded.original_size, loaded.passthrough
    ('RGB', (4, 2), False)
    """
    kind, raw = read_source(source, item, max_bytes)
    if kind == "pil":
        image = raw
        check_size(image.size, item, max_pixels)
        n_frames = frame_count(image, item)
        image = first_frame(image, item)
        fmt = None
    else:
        image = open_image(raw, item, max_pixels)
        n_frames = frame_count(image, item)
        fmt = image.format
    notes: list[str] = []
    if n_frames > 1:
        notes.append(f"frame 0 of {n_frames}")
    if exif_orientation(image) != 1:
        image = ImageOps.exif_transpose(image)
        notes.append("exif_transpose")
    same_as_servers = image.mode in PASSTHROUGH_MODES and not has_alpha(image)
    if image.mode != "RGB":
        notes.append(f"mode {image.mode}->RGB")
    rgb = to_rgb(image)
    if rgb is image and kind != "pil":
        rgb = image.copy() if n_frames > 1 else image  # detach from the multi-frame file
    changed = n_frames > 1 or "exif_transpose" in notes
    passthrough = kind != "pil" and not changed and same_as_servers and fmt in PASSTHROUGH_FORMATS
    return LoadedImage(
        image=rgb,
        original_size=rgb.size,
        source_kind=kind,
        format=fmt,
        encoded=raw if passthrough else None,
        notes=tuple(notes),
    )
