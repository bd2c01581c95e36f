"""Preparations wait until their images' and videos' pixels fit beside those being decoded, in the
order they asked; a preparation larger than the room runs alone; images over the token limit are
refused before any pixel is decoded."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError
from vlrollout.processors.base import prompt_token_limit
from vlrollout.processors.decode_room import (
    DECODE_MEMORY_SHARE,
    RESIDENT_PER_PIXEL,
    DecodeRoom,
    machine_memory_bytes,
    video_cost,
)
from vlrollout.tiny.synthetic_video import encode_mp4


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _room_pixels(env: dict[str, str]) -> int:
    """The default room of a fresh process started with ``env`` (as torchrun starts ranks)."""
    code = "from vlrollout.processors.decode_room import DECODE_ROOM; print(DECODE_ROOM.max_pixels)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.parametrize("local_world_size", ["1", "4"])
def test_the_processes_of_one_machine_share_its_decode_room(local_world_size):
    """torchrun's ranks on one machine each prepare prompts: their rooms add up to the share."""
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_WORLD_SIZE"}
    alone = _room_pixels(env)
    assert alone == int(machine_memory_bytes() * DECODE_MEMORY_SHARE) // RESIDENT_PER_PIXEL
    ranks = int(local_world_size)
    assert _room_pixels({**env, "LOCAL_WORLD_SIZE": local_world_size}) == alone // ranks


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


def _mp4(frames: int, side: int, shade: int) -> bytes:
    """A one-colour MPEG-4 clip of ``frames`` frames of ``side`` pixels square at 2 fps."""
    return encode_mp4([Image.new("RGB", (side, side), (shade,) * 3)] * frames, fps=2)


def _video_item(name: str, video, image: bytes | None = None) -> dict:
    text = "<video>" + ("<image>" if image else "") + "What happens?"
    return {
        "id": name,
        "messages": [{"role": "user", "content": text}],
        "videos": [video],
        **({"images": [image]} if image else {}),
    }


@pytest.fixture
def video_decodes(monkeypatch):
    """The most videos decoded at once."""
    from vlrollout.processors import video_loading

    at_once = {"now": 0, "most": 0}
    lock = threading.Lock()
    real = video_loading._decode_frames

    def spy(*args, **kwargs):
        with lock:
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
        time.sleep(0.2)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                at_once["now"] -= 1

    monkeypatch.setattr(video_loading, "_decode_frames", spy)
    return at_once


def test_videos_count_their_sampled_frames_in_the_room(offline, video_decodes):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"), max_pixels=56 * 56)
    clip_pixels = 8 * 320 * 320  # 8 frames at 2 fps, all sampled at Qwen2-VL's 2 fps
    items = [_video_item(f"v{k}", _mp4(8, 320, 40 * k), _png(100, (k, 0, 0))) for k in range(3)]
    one_item = video_cost(clip_pixels) + 100 * 100
    pre.decode_room = DecodeRoom(max_pixels=one_item + one_item // 2)
    with ThreadPoolExecutor(3) as pool:
        prepared = list(pool.map(pre.prepare, items))
    assert [p.videos[0].num_frames for p in prepared] == [8, 8, 8]
    assert video_decodes["most"] == 1
    assert (pre.decode_room.decoding, pre.decode_room.peak) == (0, one_item)


def test_a_frame_list_counts_its_sampled_frames_from_their_headers(offline):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    pre.decode_room = DecodeRoom(max_pixels=None)
    frames = [_png(200, (k, 0, 0)) for k in range(4)] + [Image.new("RGB", (200, 200))] * 2
    pre.prepare(_video_item("frames", frames))
    assert pre.decode_room.peak == video_cost(6 * 200 * 200)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
@pytest.mark.parametrize(
    ("frames", "side", "budget"),
    [
        (8, 320, {}),
        (1, 200, {}),
        (3, 130, {"video_min_pixels": 32 * 32, "video_max_pixels": 64 * 64}),
        (6, 450, {}),
    ],
)
def test_video_tokens_counted_from_headers_are_the_processors(
    offline, family, frames, side, budget
):
    pre = AutoProcessorPreprocessor(offline(family), **budget)
    clip = _mp4(frames, side, 70)
    prepared = pre.prepare(_video_item("v", clip))
    expected = prepared.input_ids.count(prepared.video_token_id)
    assert pre.media_tokens([], pre.peek_videos([clip], "v")) == expected > 0


def test_videos_over_the_token_limit_are_refused_before_decoding(offline, video_decodes):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    clip = _mp4(4, 640, 30)
    tokens = pre.media_tokens([(100, 100)], pre.peek_videos([clip], "v"))
    with prompt_token_limit(tokens - 1), pytest.raises(PreprocessError) as refused:
        pre.prepare(_video_item("long", clip, _png(100, (1, 2, 3))))
    assert refused.value.reason == "prompt_too_long", refused.value.detail
    assert "1 image(s) (100x100) and 1 video(s) (4 frames of 640x640)" in refused.value.detail
    assert "a lower video_max_frames or video_max_pixels" in refused.value.detail
    assert video_decodes["most"] == 0
    with prompt_token_limit(tokens):
        pre.prepare(_video_item("fits", clip, _png(100, (1, 2, 3))))


def test_a_clip_whose_frames_the_resize_refuses_is_named_by_the_processor_call(offline):
    """Frames of an aspect ratio over 200 cannot be counted: no count, and the processor call
    refuses the item, naming the ratio."""
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    clip = pre.peek_videos([[Image.new("RGB", (2010, 10))] * 2], "wide")
    assert pre.media_tokens([], clip) is None
    with prompt_token_limit(100), pytest.raises(PreprocessError) as refused:
        pre.prepare(_video_item("wide", [Image.new("RGB", (2010, 10))] * 2))
    assert refused.value.reason == "processor_error" and "200" in refused.value.detail
