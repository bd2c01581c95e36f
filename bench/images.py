"""Real photos for benchmarks: resized/cropped JPEG copies of one sample photo, plus our samples.

The only photo shipped on this machine is matplotlib's ``sample_data/grace_hopper.jpg`` (512×600,
RGB JPEG). :func:`bench_photos` derives photos of the requested sizes from it (scale to cover,
centre crop, Lanczos, JPEG quality 90) into a directory, and adds ``assets/samples/*`` images when
that folder exists. Without matplotlib a smooth seeded synthetic image stands in (and
:attr:`Photo.source` says so), so the benchmarks still run.

    >>> import tempfile
    >>> photos = bench_photos(tempfile.mkdtemp(), sizes=[(64, 48)], include_samples=False)
    >>> photos[0].width, photos[0].height
    (64, 48)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "assets" / "samples"
DEFAULT_SIZES: tuple[tuple[int, int], ...] = ((640, 480), (1024, 768), (1411, 1411), (2048, 1536))
QUICK_SIZES: tuple[tuple[int, int], ...] = ((640, 480), (1024, 768))
JPEG_QUALITY = 90
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp"}


@dataclass(frozen=True)
class Photo:
    """One benchmark image on disk.

    Attributes:
        path: The encoded file.
        width, height: Pixel size of the decoded image.
        source: ``"grace_hopper"``, ``"synthetic"`` or ``"assets/samples"``.
    """

    path: Path
    width: int
    height: int
    source: str

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6

    @property
    def label(self) -> str:
        if self.source == "assets/samples":
            return f"{self.path.name} {self.width}x{self.height}"
        return f"{self.width}x{self.height}"


def grace_hopper_path() -> Path | None:
    """matplotlib's sample photo, located without importing matplotlib (its import is slow)."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "mpl-data" / "sample_data" / "grace_hopper.jpg"
        if path.is_file():
            return path
    return None


def synthetic_photo(width: int = 512, height: int = 600, seed: int = 0) -> Image.Image:
    """A smooth, photo-like RGB image (gradients + low-frequency noise), for when no photo exists."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 32 + 2, width // 32 + 2, 3), dtype=np.uint8)
    smooth = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    yy, xx = np.mgrid[0:height, 0:width]
    grad = ((xx / width + yy / height) * 64).astype(np.int16)[..., None]
    pixels = np.clip(np.asarray(smooth, dtype=np.int16) + grad - 32, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, mode="RGB")


def derive(source: Image.Image, width: int, height: int) -> Image.Image:
    """``source`` scaled to cover ``width``×``height`` (Lanczos), then centre-cropped to it."""
    src = source.convert("RGB")
    scale = max(width / src.width, height / src.height)
    w, h = max(width, round(src.width * scale)), max(height, round(src.height * scale))
    resized = src.resize((w, h), Image.Resampling.LANCZOS)
    left, top = (w - width) // 2, (h - height) // 2
    return resized.crop((left, top, left + width, top + height))


def sample_images() -> list[Path]:
    """``assets/samples`` images, searched recursively and sorted; ``[]`` without the folder."""
    if not SAMPLES.is_dir():
        return []
    return sorted(p for p in SAMPLES.rglob("*") if p.suffix.lower() in _IMAGE_SUFFIXES)


def bench_photos(
    out_dir: str | Path,
    sizes: tuple[tuple[int, int], ...] | list[tuple[int, int]] = DEFAULT_SIZES,
    include_samples: bool = True,
) -> list[Photo]:
    """Write one JPEG (quality 90) per size into ``out_dir``; add ``assets/samples`` images.

    Samples are taken once per distinct size and format (the committed samples are a dozen tiny
    synthetic PNGs in three sizes: more of the same size measure nothing new).

    Returns:
        The photos, derived ones first in the order of ``sizes``, then the samples.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src_path = grace_hopper_path()
    if src_path is not None:
        with Image.open(src_path) as im:
            source, kind = im.convert("RGB"), "grace_hopper"
    else:
        source, kind = synthetic_photo(), "synthetic"
    photos = []
    for width, height in sizes:
        path = out / f"{kind}_{width}x{height}.jpg"
        derive(source, width, height).save(path, format="JPEG", quality=JPEG_QUALITY)
        photos.append(Photo(path, width, height, kind))
    if include_samples:
        seen = set()
        for path in sample_images():
            with Image.open(path) as im:
                key = (im.width, im.height, im.format)
                if key not in seen:
                    seen.add(key)
                    photos.append(Photo(path, im.width, im.height, "assets/samples"))
    return photos
