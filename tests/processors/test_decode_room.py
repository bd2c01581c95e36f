"""Preparations wait until their images' pixels fit beside those being decoded, in the order they
asked; a preparation larger than the room runs alone; images over the token limit are refused
before any pixel is decoded."""

from __future__ import annotations

import io
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError
from vlrollout.processors.base import prompt_token_limit
from vlrollout.processors.decode_room import DecodeRoom


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_holders_enter_in_turn_when_they_fit_and_a_large_one_alone():
    room, entered, release = DecodeRoom(max_pixels=100), [], {}

    def holder(name: str, pixels: int) -> None:
        with room.hold(pixels):
            entered.append(name)
            release[name].wait()

    pool = ThreadPoolExecutor(4)
    try:
        for name, pixels in (("a", 60), ("b", 50), ("c", 10), ("d", 150)):
            release[name] = threading.Event()
            pool.submit(holder, name, pixels)
            time.sleep(0.1)  # each asks after the one before
        assert entered == ["a"]  # b does not fit beside a; c fits but comes after b
        release["a"].set()
        _wait_until(lambda: entered == ["a", "b", "c"])
        assert room.decoding == 60
        release["b"].set()
        time.sleep(0.1)
        assert entered == ["a", "b", "c"]  # d, larger than the room, waits for it to empty
        release["c"].set()
        _wait_until(lambda: entered[-1:] == ["d"])
        assert room.decoding == 150
    finally:  # a failed check must not leave holders waiting forever
        for event in release.values():
            event.set()
        pool.shutdown()
    assert (room.decoding, room.peak) == (0, 150)


def _hold_in_thread(room: DecodeRoom, pixels: int, release: threading.Event) -> threading.Event:
    entered = threading.Event()

    def hold() -> None:
        with room.hold(pixels):
            entered.set()
            release.wait()

    threading.Thread(target=hold, daemon=True).start()
    return entered


@pytest.mark.parametrize("behind", [False, True], ids=["its-turn", "behind-another"])
def test_a_holder_interrupted_while_waiting_does_not_hold_up_the_line(behind):
    """The main thread waits for room (its turn but no fit, or behind another waiter) and is
    interrupted by a signal; those after it still enter."""
    room, go = DecodeRoom(max_pixels=100), threading.Event()
    assert _hold_in_thread(room, 60, go).wait(5)
    if behind:
        waiting = _hold_in_thread(room, 50, go)  # does not fit beside the first: waits
        time.sleep(0.1)

    def interrupt(*_):
        raise TimeoutError("interrupted")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(TimeoutError), room.hold(50 if not behind else 10):
            pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    go.set()
    if behind:
        assert waiting.wait(5)
    assert _hold_in_thread(room, 10, go).wait(5), "the line waited for the interrupted holder"
    _wait_until(lambda: room.decoding == 0)


def _png(side: int, colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), colour).save(buf, "PNG")
    return buf.getvalue()


def _item(name: str, *images: bytes) -> dict:
    text = "".join("<image>" for _ in images) + "Colour?"
    return {"id": name, "messages": [{"role": "user", "content": text}], "images": list(images)}


@pytest.fixture
def decodes(monkeypatch):
    """Each image decoded (its size), and the most decoded at once."""
    from vlrollout.processors import image_loading

    seen: list[tuple[int, int]] = []
    at_once = {"now": 0, "most": 0}
    lock = threading.Lock()
    real = image_loading.open_image

    def spy(raw, item, max_pixels=image_loading.DEFAULT_MAX_PIXELS):
        with lock:
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
        time.sleep(0.2)
        image = real(raw, item, max_pixels)
        with lock:
            at_once["now"] -= 1
            seen.append(image.size)
        return image

    monkeypatch.setattr(image_loading, "open_image", spy)
    return seen, at_once


def test_prompts_prepared_at_once_decode_within_the_room(offline, decodes):
    seen, at_once = decodes
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"), max_pixels=56 * 56)
    pre.decode_room = DecodeRoom(max_pixels=1500 * 1500)  # one item of two 1000x1000 images
    items = [_item(f"i{k}", _png(1000, (k, 0, 0)), _png(1000, (0, k, 0))) for k in range(3)]
    with ThreadPoolExecutor(3) as pool:
        prepared = list(pool.map(pre.prepare, items))
    assert [p.multi_modal_input["image_grid_thw"].tolist() for p in prepared] == [
        [[1, 4, 4]] * 2
    ] * 3
    assert len(seen) == 6 and at_once["most"] == 1
    assert (pre.decode_room.decoding, pre.decode_room.peak) == (0, 2 * 1000 * 1000)


def test_images_over_the_token_limit_are_refused_before_decoding(offline, decodes):
    seen, _ = decodes
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    tokens = pre.image_tokens([(2000, 2000)])
    with prompt_token_limit(tokens - 1), pytest.raises(PreprocessError) as refused:
        pre.prepare(_item("big", _png(2000, (1, 2, 3))))
    assert refused.value.reason == "prompt_too_long" and "(2000x2000)" in refused.value.detail
    assert seen == []
