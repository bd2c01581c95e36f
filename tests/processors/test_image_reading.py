"""Only regular files are read, and never past the byte limit."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest
from PIL import Image

from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image


def _png(tmp_path, name="a b.png"):
    path = tmp_path / name
    Image.new("RGB", (6, 4), (1, 2, 3)).save(path)
    return path


def _reason(source, **kw) -> str:
    with pytest.raises(PreprocessError) as e:
        load_image(source, "item t, image 1", **kw)
    return e.value.reason


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    result: list[str] = []
    for source in (str(fifo), f"file://{fifo}"):
        thread = threading.Thread(target=lambda s=source: result.append(_reason(s)), daemon=True)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), f"reading {source} blocked"
    assert result == ["image_source", "image_source"]


_DEV_ZERO = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a regression fails, not the machine
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import load_image
for source in ("file:///dev/zero", "/dev/zero"):
    try:
        load_image(source, "item t")
    except PreprocessError as e:
        print(e.reason)
"""


def test_a_device_is_refused_and_the_limit_holds_while_reading(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _DEV_ZERO], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["image_source", "image_source"], done.stderr[-2000:]
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG" + b"0" * 5000)
    assert _reason(str(big), max_bytes=1000) == "image_too_large"


def test_file_urls_are_decoded(tmp_path):
    path = _png(tmp_path)
    loaded = load_image(f"file://{str(path).replace(' ', '%20')}", "item t, image 1")
    assert loaded.original_size == (6, 4)


@pytest.mark.parametrize("url", ["http://example.com/a.png", "https://x/y.jpg", "s3://b/k.png"])
def test_remote_urls_are_image_source(url):
    with pytest.raises(PreprocessError, match="not fetched") as e:
        load_image(url, "item t, image 1")
    assert e.value.reason == "image_source"


def test_short_base64_is_decoded():
    buf = io.BytesIO()
    Image.new("RGB", (3, 3)).save(buf, format="PNG")
    import base64

    text = base64.b64encode(buf.getvalue()).decode()
    assert len(text) < 4096
    assert load_image(text, "item t, image 1").original_size == (3, 3)


@pytest.mark.parametrize("name", ["DSC04417", "scan_page_3"])
def test_a_file_named_without_folder_or_extension_is_read_from_the_working_folder(
    tmp_path, monkeypatch, name
):
    """Camera and scanner names: no "/" and no extension, and valid base64 letters. The file
    exists, so it is the file (a relative path, as "photo.png" is)."""
    Image.new("RGB", (30, 20), (200, 40, 10)).save(tmp_path / name, format="PNG")
    monkeypatch.chdir(tmp_path)
    loaded = load_image(name, "item 1")
    assert loaded.source_kind == "path" and loaded.original_size == (30, 20)
    assert loaded.image.getpixel((3, 3)) == (200, 40, 10)
