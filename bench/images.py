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


# -- varied subjects, drawn in code (the machine ships one photo) ------------------------------

SUBJECTS = ("portrait", "landscape", "city", "document", "fruit", "texture")


def subject_photo(subject: str, width: int, height: int, seed: int = 0) -> Image.Image:
    """An RGB picture of ``subject`` (photo-like statistics differ per subject: smooth regions,
    sharp edges, text strokes, fine texture), so encoders and processors are not measured on
    copies of one image.

    >>> [subject_photo(s, 40, 30).size for s in SUBJECTS[:2]]
    [(40, 30), (40, 30)]
    """
    from PIL import ImageDraw, ImageFilter

    rng = np.random.default_rng(seed + SUBJECTS.index(subject))
    if subject == "portrait":
        path = grace_hopper_path()
        if path is not None:
            with Image.open(path) as im:
                return derive(im, width, height)
        return derive(synthetic_photo(seed=seed), width, height)
    yy, xx = np.mgrid[0:height, 0:width]
    if subject == "landscape":
        sky = np.stack([90 + 80 * yy / height, 140 + 60 * yy / height, 230 - 30 * yy / height], -1)
        ridge = height * (0.55 + 0.1 * np.sin(xx / width * 6 + rng.uniform(0, 6)))
        ground = np.stack([60 + 0 * yy, 120 - 40 * yy / height, 50 + 0 * yy], -1)
        pixels = np.where((yy > ridge)[..., None], ground, sky)
        pixels = pixels + rng.normal(0, 6, pixels.shape)
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).filter(
            ImageFilter.GaussianBlur(1)
        )
    image = Image.new("RGB", (width, height), (235, 235, 230))
    draw = ImageDraw.Draw(image)
    if subject == "city":
        image.paste((120, 160, 210), (0, 0, width, height // 3))
        for _ in range(40):
            x, w = int(rng.integers(0, width)), int(rng.integers(width // 30, width // 8))
            top = int(rng.integers(height // 6, height // 2))
            shade = tuple(int(v) for v in rng.integers(60, 180, 3))
            draw.rectangle([x, top, x + w, height], fill=shade)
            for wy in range(top + 6, height - 6, 14):
                for wx in range(x + 3, x + w - 3, 9):
                    draw.rectangle([wx, wy, wx + 4, wy + 6], fill=(250, 230, 140))
    elif subject == "document":
        for line_y in range(height // 12, height - height // 12, max(8, height // 40)):
            x = width // 12
            while x < width - width // 12:
                w = int(rng.integers(8, 40))
                draw.rectangle(
                    [x, line_y, x + w, line_y + max(2, height // 120)], fill=(20, 20, 30)
                )
                x += w + int(rng.integers(4, 10))
    elif subject == "fruit":
        for _ in range(25):
            r = int(rng.integers(min(width, height) // 20, min(width, height) // 6))
            cx, cy = int(rng.integers(0, width)), int(rng.integers(0, height))
            colour = tuple(int(v) for v in rng.integers(40, 255, 3))
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour, outline=(30, 30, 30))
        image = image.filter(ImageFilter.GaussianBlur(2))
    elif subject == "texture":
        noise = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
        image = Image.fromarray(noise).filter(ImageFilter.GaussianBlur(0.7))
    else:
        raise ValueError(f"unknown subject {subject!r}; known: {SUBJECTS}")
    return image
