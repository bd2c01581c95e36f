"""Tiny images written in code, for the processors tests."""

from __future__ import annotations

import io

from PIL import Image


def png_bytes(image: Image.Image, fmt: str = "PNG", **save_kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **save_kwargs)
    return buf.getvalue()


def halves(size=(40, 20), left=(255, 0, 0), right=(0, 0, 255)) -> Image.Image:
    """An RGB image whose left half is ``left`` and right half ``right``."""
    w, h = size
    image = Image.new("RGB", size, right)
    image.paste(Image.new("RGB", (w // 2, h), left), (0, 0))
    return image


def bomb_png(width: int, height: int) -> bytes:
    """A valid 1-bit grey PNG of ``width`` × ``height`` black pixels that is a few kilobytes long
    (its zero rows compress away): a decompression bomb when the size is large. Written chunk by
    chunk, so making it never allocates the pixels."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte, then the packed bits
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
