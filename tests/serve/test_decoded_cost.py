"""What a request's images cost once decoded is known from their headers, before any pixel is
decoded: images are decoded at once only up to a bound in pixels (a small PNG of one colour
decodes to hundreds of MB, whatever its body), and ``/generate`` compares placeholders, and chat
counts image tokens, against the images' sizes before decoding them."""

from __future__ import annotations

import asyncio
import base64
import io
import threading
import time

import aiohttp
import pytest
import requests
from PIL import Image

from tests.serve.conftest import ASSET, serving, vision_prompt
from vlrollout.engine.inputs import count_placeholders
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.processors.decode_room import video_cost
from vlrollout.serve.admission import Admission, QueueLimits
from vlrollout.workflows import FrameSampling

SIDE = 3000
"""A flat SIDE x SIDE PNG: a few KB of body, 9 M pixels decoded."""


def flat_png(side: int = SIDE, mode: str = "RGB") -> str:
    buf = io.BytesIO()
    Image.new(mode, (side, side), (40, 160, 90, 255)[: len(mode)]).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def decoding(pixels: int) -> QueueLimits:
    """Bounds whose share of memory decodes ``pixels`` image pixels at once, and no more."""
    limits = QueueLimits(max_requests=4, max_bytes=pixels)
    while Admission(limits).max_decoding > pixels:
        limits = QueueLimits(max_requests=4, max_bytes=limits.max_bytes - 1)
    while Admission(limits).max_decoding < pixels:
        limits = QueueLimits(max_requests=4, max_bytes=limits.max_bytes + 1)
    return limits


class Decodes(list):
    """The sizes of the images the server decoded, and the most it decoded at once."""

    most_at_once = 0


@pytest.fixture
def decodes(monkeypatch):
    """Every image the server decodes, each taking a while (headers read without decoding are
    not counted)."""
    from vlrollout.processors import image_loading

    seen, lock, now = Decodes(), threading.Lock(), [0]
    real = image_loading.open_image

    def spy(raw, item, max_pixels=image_loading.DEFAULT_MAX_PIXELS):
        with lock:
            now[0] += 1
            seen.most_at_once = max(seen.most_at_once, now[0])
        time.sleep(0.3)
        image = real(raw, item, max_pixels)
        with lock:
            now[0] -= 1
            seen.append(image.size)
        return image

    monkeypatch.setattr(image_loading, "open_image", spy)
    return seen


def bodies(protocol: str, processor, image: str, n: int) -> list[tuple[str, dict]]:
    """``n`` generation requests with ``image``, as ``(path, body)`` for ``protocol``."""
    if protocol == "sglang":
        ids, _, _ = vision_prompt(processor, [Image.open(io.BytesIO(base64.b64decode(image)))])
        body = {"input_ids": ids, "image_data": [image], "sampling_params": {"max_new_tokens": 8}}
        return [("/generate", {**body, "rid": f"r{k}"}) for k in range(n)]
    content = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}},
        {"type": "text", "text": "How many shapes?"},
    ]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8}
    return [("/v1/chat/completions", body)] * n


async def send_all(url: str, requests_: list[tuple[str, dict]]) -> list[tuple[int, str]]:
    async with aiohttp.ClientSession() as session:

        async def one(path, body):
            async with session.post(url + path, json=body) as r:
                return r.status, await r.text()

        return await asyncio.gather(*(one(p, b) for p, b in requests_))


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_images_that_could_never_be_decoded_at_once_are_refused_undecoded(protocol, decodes):
    image = flat_png()
    limits = decoding(SIDE * SIDE - 1)
    assert len(image) * 100 < limits.max_bytes  # the body alone fits the bound many times over
    with serving(protocol, limits=limits) as (server, engine):
        ((path, body),) = bodies(protocol, engine.processor, image, 1)
        r = requests.post(server.url + path, json=body, timeout=60)
        queue = requests.get(server.url + "/health", timeout=10).json()["queue"]
    assert r.status_code == 413, r.text
    message = r.json()["error"]["message"]
    assert f"1 image(s) count for {SIDE * SIDE} pixels" in message, message
    assert "--max-queued-mb" in message
    assert decodes == []
    assert (queue["admitted"], queue["refused"], queue["bytes"], queue["requests"]) == (0, 1, 0, 0)


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_images_wait_for_room_to_decode(protocol, decodes, monkeypatch):
    """Two requests whose bodies fit the bound many times over, but whose images can be decoded
    one request at a time: the second waits for the first's decode, and both are answered.
    Each such large decode is followed by handing freed memory back."""
    trims = []
    monkeypatch.setattr("vlrollout.serve.memory.TRIM_DELAY_S", 60.0)  # no trim after the drain
    monkeypatch.setattr("vlrollout.serve.memory.release_free_memory", lambda: trims.append(1))
    image = flat_png()
    limits = decoding(SIDE * SIDE * 3 // 2)
    with serving(protocol, limits=limits) as (server, engine):
        answers = asyncio.run(send_all(server.url, bodies(protocol, engine.processor, image, 2)))
        queue = requests.get(server.url + "/health", timeout=10).json()["queue"]
    assert [status for status, _ in answers] == [200, 200], answers
    assert decodes == [(SIDE, SIDE)] * 2 and decodes.most_at_once == 1
    assert (queue["admitted"], queue["refused"], queue["requests"]) == (2, 0, 0)
    assert (queue["peak_decoding_pixels"], queue["decoding_pixels"]) == (SIDE * SIDE, 0)
    assert len(trims) == 2


def test_generate_checks_placeholders_against_image_sizes_before_decoding(decodes):
    """``input_ids`` built for a small image, sent with a large one: the placeholder count the
    large image's size implies disagrees, and the answer names both without decoding it."""
    small = Image.new("RGB", (56, 56), (10, 20, 30))
    with serving("sglang") as (server, engine):
        ids, _, _ = vision_prompt(engine.processor, [small])
        body = {"input_ids": ids, "image_data": [flat_png()], "sampling_params": {}}
        r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "image placeholders and images disagree" in message
    assert f"{SIDE}x{SIDE}" in message and "--max-pixels" in message, message
    assert decodes == []


def test_chat_images_that_fill_the_context_are_refused_before_decoding(decodes, monkeypatch):
    monkeypatch.setattr("vlrollout.serve.state.context_length", lambda config: 20)
    with serving("vllm") as (server, engine):
        ((path, body),) = bodies("vllm", engine.processor, flat_png(), 1)
        image = body["messages"][0]["content"][0]
        body["messages"][0]["content"].insert(0, image)  # two images: 32 tokens
        r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "prompt_too_long" in message and f"({SIDE}x{SIDE}, {SIDE}x{SIDE})" in message, message
    assert decodes == []


def test_a_served_image_budget_matches_clients_built_with_it():
    """``vlrollout serve --max-pixels`` resizes as a client's preprocessor with the same budget
    does: its ``input_ids`` are accepted on ``/generate`` and chat prompts have their length;
    a server at the processor's own budget refuses them, naming its bounds."""

    budget = 28 * 28 * 32
    buf = io.BytesIO()
    Image.effect_noise((400, 300), 60).convert("RGB").save(buf, "PNG")
    image = base64.b64encode(buf.getvalue()).decode()
    content = [{"type": "image"}, {"type": "text", "text": "How many shapes?"}]
    client = AutoProcessorPreprocessor(str(ASSET), max_pixels=budget)
    item = {"messages": [{"role": "user", "content": content}], "images": [buf.getvalue()]}
    ids = client.prepare(item).input_ids
    body = {"input_ids": ids, "image_data": [image], "sampling_params": {"max_new_tokens": 2}}
    with serving("sglang") as (server, _):
        refused = requests.post(server.url + "/generate", json=body, timeout=60)
    with serving("sglang", max_pixels=budget) as (server, _):
        answered = requests.post(server.url + "/generate", json=body, timeout=60)
    assert refused.status_code == 400 and "longest_edge=12544" in refused.text, refused.text
    assert answered.status_code == 200, answered.text
    assert answered.json()["meta_info"]["prompt_tokens"] == len(ids)
    ((path, chat),) = bodies("vllm", None, image, 1)
    with serving("vllm", max_pixels=budget) as (server, _):
        r = requests.post(server.url + path, json=chat, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(ids)


def test_chat_images_that_leave_no_room_for_max_tokens_are_refused_before_decoding(
    decodes, monkeypatch
):
    monkeypatch.setattr("vlrollout.serve.state.context_length", lambda config: 40)
    with serving("vllm") as (server, engine):
        ((path, body),) = bodies("vllm", engine.processor, flat_png(), 1)
        image = body["messages"][0]["content"][0]
        body["messages"][0]["content"].insert(0, image)  # two images: 32 tokens
        r = requests.post(server.url + path, json={**body, "max_tokens": 20}, timeout=60)
    assert r.status_code == 400, r.text
    assert "prompt_too_long" in r.text and "more than the 20 a prompt may hold" in r.text, r.text
    assert decodes == []


def test_requests_wait_for_room_to_decode_in_the_order_they_came():
    """A request that does not fit waits, and those after it wait behind it even when they would
    fit (a stream of small requests must not overtake a large one for ever); one whose client
    goes away while it waits gives up its turn."""

    async def scenario() -> list[str]:
        gate, entered, go = Admission(QueueLimits(max_bytes=100)), [], asyncio.Event()
        assert gate.max_decoding == 100

        async def hold(name: str, pixels: int) -> None:
            async with gate.decoding_room(pixels, "1 image(s)", "/generate"):
                entered.append(name)
                await go.wait()

        first = asyncio.create_task(hold("a", 60))
        await asyncio.sleep(0.01)
        gone = asyncio.create_task(hold("gone", 50))
        await asyncio.sleep(0.01)
        tasks = [asyncio.create_task(hold(n, p)) for n, p in (("b", 50), ("c", 10))]
        await asyncio.sleep(0.01)
        assert entered == ["a"]  # c would fit beside a, but comes after b
        gone.cancel()
        await asyncio.sleep(0.01)
        assert entered == ["a"]
        go.set()
        await asyncio.wait_for(asyncio.gather(first, *tasks), 10)  # the line moved on
        assert gate.decoding == 0
        return entered

    assert asyncio.run(scenario()) == ["a", "b", "c"]


def test_placeholders_in_fewer_runs_than_images_are_named_as_such():
    """The right number of placeholder tokens in one run for two images: the answer says one
    run per image was expected, not only the token counts (which agree)."""
    image = Image.new("RGB", (1200, 900), (5, 6, 7))
    with serving("sglang") as (server, engine):
        ids, _, _ = vision_prompt(engine.processor, [image, image])
        token = engine.model.config.image_token_id
        first = ids.index(token)
        merged = [t for k, t in enumerate(ids) if t != token or k < first + ids.count(token) // 2]
        run = ids.count(token)
        merged[first : first + run // 2] = [token] * run  # both images' tokens in the first run
        buf = io.BytesIO()
        image.save(buf, "PNG")
        png = base64.b64encode(buf.getvalue()).decode()
        body = {"input_ids": merged, "image_data": [png, png], "sampling_params": {}}
        r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert f"hold {run} image placeholder tokens in 1 run(s)" in message, message
    assert f"take {run} tokens in 2 run(s), one per image" in message, message


def test_images_sent_in_another_order_than_their_placeholders_are_refused(decodes):
    """``input_ids`` built for a small then a large image, sent with the large one first: the
    totals agree, but each image's run of placeholders is the other's size."""
    small, large = Image.new("RGB", (56, 56), (10, 20, 30)), Image.new("RGB", (112, 56), (1, 2, 3))
    pngs = []
    for image in (large, small):
        buf = io.BytesIO()
        image.save(buf, "PNG")
        pngs.append(base64.b64encode(buf.getvalue()).decode())
    with serving("sglang") as (server, engine):
        ids, _, _ = vision_prompt(engine.processor, [small, large])
        body = {"input_ids": ids, "image_data": pngs, "sampling_params": {}}
        r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "runs of 4, 8 tokens" in message and "take 8, 4 tokens" in message, message
    assert decodes == []


@pytest.mark.parametrize("mode, status", [("RGB", 200), ("RGBA", 413)])
def test_a_pixel_with_alpha_counts_for_more(mode, status):
    """Decoding an image with alpha and compositing it on white costs about twice an RGB
    image's memory: an RGBA image counts for more pixels than it has."""
    limits = decoding(SIDE * SIDE * 2)
    with serving("sglang", limits=limits) as (server, engine):
        ((path, body),) = bodies("sglang", engine.processor, flat_png(mode=mode), 1)
        r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == status, r.text


VIDEO_SIDE = 1200
"""A clip of VIDEO_FRAMES flat VIDEO_SIDE-square frames: a few KB, millions of pixels sampled."""
VIDEO_FRAMES = 4
SMALL_FRAMES = FrameSampling(min_pixels=56 * 56, max_pixels=56 * 56)
"""Each sampled frame resized to 56x56: a few tokens, whatever the source frame's size."""


@pytest.fixture(scope="module")
def flat_clip(tmp_path_factory) -> str:
    from tests.processors.test_decode_room import _mp4

    return base64.b64encode(_mp4(VIDEO_FRAMES, VIDEO_SIDE, 90)).decode()


@pytest.fixture
def video_decodes(monkeypatch):
    """How many videos the server decoded, and the most it decoded at once."""
    from vlrollout.processors import video_loading

    seen, lock, now = Decodes(), threading.Lock(), [0]
    real = video_loading._decode_frames

    def spy(*args, **kwargs):
        with lock:
            now[0] += 1
            seen.most_at_once = max(seen.most_at_once, now[0])
        time.sleep(0.3)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                now[0] -= 1
                seen.append(1)

    monkeypatch.setattr(video_loading, "_decode_frames", spy)
    return seen


def video_bodies(protocol: str, processor, clip: str, n: int) -> list[tuple[str, dict]]:
    """``n`` generation requests with the video ``clip``, as ``(path, body)`` for ``protocol``."""
    url = "data:video/mp4;base64," + clip
    if protocol == "sglang":
        item = {"messages": [{"role": "user", "content": "<video>Shapes?"}], "videos": [clip]}
        ids = AutoProcessorPreprocessor(processor, **SMALL_FRAMES.options()).prepare(item).input_ids
        body = {"input_ids": ids, "video_data": [url], "sampling_params": {"max_new_tokens": 4}}
        return [("/generate", {**body, "rid": f"r{k}"}) for k in range(n)]
    content = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "?"}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4}
    return [("/v1/chat/completions", body)] * n


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_videos_wait_for_room_to_decode_their_sampled_frames(protocol, flat_clip, video_decodes):
    """A video's sampled frames count in the pixels decoded at once, as images do: two requests
    whose clips can be decoded one at a time are decoded one after the other."""
    pixels = video_cost(VIDEO_FRAMES * VIDEO_SIDE * VIDEO_SIDE)  # all 4 frames sampled at 2 fps
    limits = decoding(pixels * 3 // 2)
    with serving(protocol, limits=limits, frames=SMALL_FRAMES) as (server, engine):
        requests_ = video_bodies(protocol, engine.processor, flat_clip, 2)
        video_decodes.clear()  # the client's own preparation of input_ids
        answers = asyncio.run(send_all(server.url, requests_))
        queue = requests.get(server.url + "/health", timeout=10).json()["queue"]
    assert [status for status, _ in answers] == [200, 200], answers
    assert len(video_decodes) == 2 and video_decodes.most_at_once == 1
    assert (queue["peak_decoding_pixels"], queue["decoding_pixels"]) == (pixels, 0)


@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_a_video_that_could_never_be_decoded_at_once_is_refused_undecoded(
    protocol, flat_clip, video_decodes
):
    pixels = video_cost(VIDEO_FRAMES * VIDEO_SIDE * VIDEO_SIDE)
    with serving(protocol, limits=decoding(pixels - 1), frames=SMALL_FRAMES) as (server, engine):
        ((path, body),) = video_bodies(protocol, engine.processor, flat_clip, 1)
        video_decodes.clear()  # the client's own preparation of input_ids
        r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 413, r.text
    message = r.json()["error"]["message"]
    assert f"count for {pixels} pixels" in message and "1 video(s)" in message, message
    assert video_decodes == []


def test_a_chat_video_too_long_for_the_context_is_refused_undecoded(flat_clip, video_decodes):
    """The tiny model's 512-token context less the 4 new tokens asked: a clip whose sampled
    frames take more is refused from its header, naming ``prompt_too_long``, before a frame is
    decoded; with a smaller budget per frame it is prepared and run."""
    big = FrameSampling(min_pixels=256 * 256, max_pixels=256 * 256)  # 4 frames: 2 x 81 tokens
    with serving("vllm", frames=big) as (server, engine):
        ((path, body),) = video_bodies("vllm", engine.processor, flat_clip, 1)
        body = {**body, "messages": body["messages"] * 4}  # four of them: 648 tokens
        r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "prompt_too_long" in message and "4 video(s) (4 frames of 1200x1200" in message
    assert "alone take 648 tokens, more than the 508" in message
    assert video_decodes == []


def test_the_served_frame_limit_is_the_one_the_refusal_names(flat_clip):
    """``build_app(max_video_frame_pixels=...)`` (``--max-video-frame-pixels``) sets the largest
    frame a request's video may have, and its refusal names that setting."""
    limit = VIDEO_SIDE * VIDEO_SIDE - 1
    with serving("vllm", frames=SMALL_FRAMES, max_video_frame_pixels=limit) as (server, engine):
        ((path, body),) = video_bodies("vllm", engine.processor, flat_clip, 1)
        refused = requests.post(server.url + path, json=body, timeout=60)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert f"max_video_frame_pixels={limit}" in message and "video 1" in message, message
    with serving("vllm", frames=SMALL_FRAMES, max_video_frame_pixels=limit + 1) as (server, _):
        assert requests.post(server.url + path, json=body, timeout=60).status_code == 200


def test_generate_checks_video_placeholders_against_the_clip_before_decoding(
    flat_clip, video_decodes
):
    """``input_ids`` built for a clip of 4 frames, sent with one of 8: the placeholders its
    sampled frames imply disagree, and the answer names both without decoding a frame."""
    from tests.processors.test_decode_room import _mp4

    longer = base64.b64encode(_mp4(2 * VIDEO_FRAMES, VIDEO_SIDE, 90)).decode()
    with serving("sglang", frames=SMALL_FRAMES) as (server, engine):
        ((path, body),) = video_bodies("sglang", engine.processor, flat_clip, 1)
        video_decodes.clear()  # the client's own preparation of input_ids
        body = {**body, "video_data": ["data:video/mp4;base64," + longer]}
        r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "video placeholders and videos disagree" in message, message
    held = body["input_ids"].count(engine.model.config.video_token_id)
    assert f"input_ids hold {held} video placeholder tokens" in message
    assert f"1 video(s) (8 frames of 1200x1200) take {2 * held} under" in message
    assert video_decodes == []


def test_generate_takes_a_qwen3_vl_clip_whose_placeholders_are_split_by_timestamps(flat_clip):
    """Qwen3-VL writes a clip as one placeholder run per group of frames, between their
    timestamps: ``input_ids`` built by its own processor pass the check and are answered, and
    the same ids with a longer clip are refused before decoding."""
    import torch

    from tests.processors.test_decode_room import _mp4
    from vlrollout.engine import LocalInferenceEngine

    model = str(ASSET.parent / "tiny-qwen3vl-count")
    engine = LocalInferenceEngine.from_pretrained(model, dtype=torch.float32).initialize()
    item = {"messages": [{"role": "user", "content": "<video>Shapes?"}], "videos": [flat_clip]}
    ids = AutoProcessorPreprocessor(engine.processor, **SMALL_FRAMES.options()).prepare(item)
    ids = ids.input_ids
    video_id = engine.model.config.video_token_id
    assert ids.count(video_id) > 0 and count_placeholders(ids, video_id)[1] > 1
    url = "data:video/mp4;base64,"
    longer = base64.b64encode(_mp4(2 * VIDEO_FRAMES, VIDEO_SIDE, 90)).decode()
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}
    with serving("sglang", engine, frames=SMALL_FRAMES) as (server, _):
        answered = requests.post(
            server.url + "/generate", json={**body, "video_data": [url + flat_clip]}, timeout=60
        )
        refused = requests.post(
            server.url + "/generate", json={**body, "video_data": [url + longer]}, timeout=60
        )
    engine.destroy()
    assert answered.status_code == 200, answered.text
    assert refused.status_code == 400 and "video placeholders and videos disagree" in refused.text
