"""The report holds one full-size image at a time: each image's thumbnail is made as soon as it
is loaded, however many images an item has (an item refused before any of its images was
decoded must not have them all decoded at once for its report)."""

from __future__ import annotations

import gc
import weakref

from PIL import Image

from vlrollout.processors import image_loading
from vlrollout.run.report import render_item


def test_an_items_images_are_loaded_for_the_report_one_at_a_time(tmp_path, monkeypatch):
    paths = []
    for k in range(5):
        paths.append(tmp_path / f"{k}.png")
        Image.new("RGB", (900, 600), (k * 40, 0, 0)).save(paths[-1])
    item = {"id": "many", "messages": "<image>" * 5 + "Count.", "images": [str(p) for p in paths]}
    alive: list[weakref.ref] = []
    held_at_load: list[int] = []
    real = image_loading.load_image

    def spy(source, *args, **kwargs):
        gc.collect()
        held_at_load.append(sum(ref() is not None for ref in alive))
        loaded = real(source, *args, **kwargs)
        alive.append(weakref.ref(loaded.image))
        return loaded

    monkeypatch.setattr(image_loading, "load_image", spy)
    section = render_item(item, {"episodes": []}, None)
    assert held_at_load == [0] * 5
    assert section.count("<figure>") == 5 and "image 5" in section
