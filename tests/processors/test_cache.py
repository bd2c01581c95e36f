import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from vlrollout.processors.base import ENCODE_ENGINE_IMAGES_AHEAD
from vlrollout.processors.cache import PreparedPromptCache, item_key


class Counting:
    """A preprocessor that counts calls, records its thread, and can be held at a gate."""

    tokenizer = processor = None

    def __init__(self, gate: threading.Event | None = None, fail: bool = False):
        self.calls: list[str] = []
        self.threads: set[int] = set()
        self.gate = gate
        self.fail = fail
        self._lock = threading.Lock()

    def prepare(self, data):
        with self._lock:
            self.calls.append(item_key(data))
            self.threads.add(threading.get_ident())
        if self.gate is not None and not self.gate.wait(timeout=10):
            raise TimeoutError("gate never opened")
        if self.fail:
            raise ValueError("boom")
        return {"prepared": item_key(data)}


def _d(name):
    """An item whose content (and so key) is ``name``."""
    return {"messages": [str(name)]}


def test_key_is_content_never_the_id_field():
    # Datasets repeat ids: two items with one id and different content must not share a prompt.
    assert item_key({"id": 3, "messages": ["x"]}) != item_key({"id": 3, "messages": ["y"]})
    assert item_key({"id": 1, "messages": ["x"]}) == item_key({"id": 2, "messages": ["x"]})
    img_a, img_b = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "blue")
    assert item_key({"id": 1, "messages": ["q"], "images": [img_a]}) != item_key(
        {"id": 1, "messages": ["q"], "images": [img_b]}
    )


def test_content_key_is_stable_and_sensitive(tmp_path):
    path = tmp_path / "a.png"
    Image.new("RGB", (4, 4), "red").save(path)
    msgs = [{"role": "user", "content": "<image>Q"}]
    base = {"messages": msgs, "images": [str(path)]}
    assert item_key(base) == item_key({"messages": [dict(msgs[0])], "images": [str(path)]})
    assert item_key(base) != item_key(
        {"messages": [{"role": "user", "content": "<image>R"}], "images": [str(path)]}
    )
    pil_a, pil_b = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "blue")
    assert item_key({"messages": msgs, "images": [pil_a]}) == item_key(
        {"messages": msgs, "images": [pil_a.copy()]}
    )
    assert item_key({"messages": msgs, "images": [pil_a]}) != item_key(
        {"messages": msgs, "images": [pil_b]}
    )
    assert item_key({"messages": msgs, "images": [b"a"]}) != item_key(
        {"messages": msgs, "images": [b"b"]}
    )
    before = item_key(base)
    Image.new("RGB", (5, 5), "red").save(path)  # file changed on disk -> new key
    assert item_key(base) != before


def test_sync_prepare_once():
    pre = Counting()
    cache = PreparedPromptCache(pre, maxsize=4)
    first = cache.prepare(_d(1))
    assert cache.prepare(_d(1)) is first
    assert len(pre.calls) == 1 and cache.hits == 1 and cache.misses == 1


def test_concurrent_group_prepares_once_off_the_loop():
    gate = threading.Event()
    pre = Counting(gate)
    cache = PreparedPromptCache(pre, maxsize=4)

    async def main():
        loop_thread = threading.get_ident()
        tasks = [asyncio.create_task(cache.aprepare(_d("g"))) for _ in range(8)]
        # the loop keeps running while prepare is blocked in its worker thread
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(pre.calls) <= 1 and not any(t.done() for t in tasks)
        gate.set()
        results = await asyncio.gather(*tasks)
        return loop_thread, results

    loop_thread, results = asyncio.run(main())
    assert pre.calls == [item_key(_d("g"))]
    assert all(r is results[0] for r in results)
    assert loop_thread not in pre.threads
    assert cache.misses == 1 and cache.hits == 7


def test_distinct_items_each_prepared_once_with_executor():
    pre = Counting()
    with ThreadPoolExecutor(2) as pool:
        cache = PreparedPromptCache(pre, maxsize=16, executor=pool)

        async def main():
            data = [_d(i % 3) for i in range(12)]
            return await asyncio.gather(*(cache.aprepare(d) for d in data))

        asyncio.run(main())
    assert sorted(pre.calls) == sorted(item_key(_d(i)) for i in range(3))


@pytest.mark.parametrize("with_executor", [False, True])
def test_prepare_sees_the_callers_context(with_executor):
    """A workflow tells the preprocessor about its engine through a context variable
    (``ENCODE_ENGINE_IMAGES_AHEAD``): it must reach ``prepare`` on either kind of thread."""
    seen = []

    class Reading(Counting):
        def prepare(self, data):
            seen.append(ENCODE_ENGINE_IMAGES_AHEAD.get())
            return super().prepare(data)

    with ThreadPoolExecutor(1) as pool:
        cache = PreparedPromptCache(Reading(), maxsize=4, executor=pool if with_executor else None)

        async def main():
            ENCODE_ENGINE_IMAGES_AHEAD.set(True)
            await cache.aprepare(_d("x"))

        asyncio.run(main())
    assert seen == [True]


def test_lru_eviction_at_the_bound():
    pre = Counting()
    cache = PreparedPromptCache(pre, maxsize=2)

    async def main():
        for i in (1, 2):
            await cache.aprepare(_d(i))
        await cache.aprepare(_d(1))  # 1 becomes most recent
        await cache.aprepare(_d(3))  # evicts 2, the least recent
        await cache.aprepare(_d(1))  # still cached
        await cache.aprepare(_d(2))  # prepared again

    asyncio.run(main())
    k = {i: item_key(_d(i)) for i in (1, 2, 3)}
    assert pre.calls == [k[1], k[2], k[3], k[2]]
    assert len(cache) == 2 and cache.evictions == 2
    assert k[2] in cache and k[1] in cache and k[3] not in cache  # 3 was least recent


def test_failure_reaches_every_waiter_and_is_not_cached():
    pre = Counting(fail=True)
    cache = PreparedPromptCache(pre, maxsize=4)

    async def main():
        return await asyncio.gather(
            *(cache.aprepare(_d(9)) for _ in range(3)), return_exceptions=True
        )

    results = asyncio.run(main())
    assert all(isinstance(r, ValueError) for r in results) and len(pre.calls) == 1
    with pytest.raises(ValueError):
        asyncio.run(cache.aprepare(_d(9)))
    assert len(pre.calls) == 2 and len(cache) == 0


def test_cancelling_one_waiter_does_not_cancel_the_group():
    gate = threading.Event()
    pre = Counting(gate)
    cache = PreparedPromptCache(pre)

    async def main():
        a = asyncio.create_task(cache.aprepare(_d(1)))
        b = asyncio.create_task(cache.aprepare(_d(1)))
        await asyncio.sleep(0)
        a.cancel()
        gate.set()
        return await b

    assert asyncio.run(main()) == {"prepared": item_key(_d(1))}
    assert len(pre.calls) == 1


def test_with_real_preprocessor(offline, rgb_png):
    from vlrollout.processors import AutoProcessorPreprocessor

    pre = AutoProcessorPreprocessor(offline("qwen2_vl"))
    calls = []
    original = pre.prepare

    def counted(data):
        calls.append(1)
        return original(data)

    pre.prepare = counted
    cache = PreparedPromptCache(pre)
    data = {"messages": [{"role": "user", "content": "<image>Q"}], "images": [str(rgb_png)]}

    async def main():
        return await asyncio.gather(*(cache.aprepare(data) for _ in range(4)))

    results = asyncio.run(main())
    assert len(calls) == 1 and results[0].num_images == 1


def test_negative_maxsize_rejected():
    with pytest.raises(ValueError):
        PreparedPromptCache(Counting(), maxsize=-1)


def _prepared(n_floats):
    import torch

    from vlrollout.processors.base import PreparedPrompt

    return PreparedPrompt(
        input_ids=[1, 2], prompt_text="", multi_modal_input={"pixel_values": torch.zeros(n_floats)}
    )


class Sized:
    tokenizer = processor = None

    def __init__(self):
        self.calls = 0

    def prepare(self, data):
        self.calls += 1
        return _prepared(int(data["messages"][0]) * 256)  # 1 KiB per unit


def test_unpinned_entries_are_bounded_in_bytes():
    cache = PreparedPromptCache(Sized(), max_bytes=3000)

    async def main():
        for k in range(4):  # four distinct items of ~1 KiB each
            await cache.aprepare({"messages": ["1", k]})

    asyncio.run(main())
    assert cache.nbytes <= 3000 and len(cache) == 2 and cache.evictions == 2


def test_pinned_entries_are_dropped_when_their_group_is_done():
    pre = Sized()
    cache = PreparedPromptCache(pre, max_bytes=10)  # far smaller than one entry

    async def main():
        got = await asyncio.gather(*(cache.acquire({"messages": ["4"]}) for _ in range(8)))
        assert len(cache) == 1 and cache.nbytes >= 4096  # in use: kept despite the bound
        late_key, late = await cache.acquire({"messages": ["4"]})  # a late member still hits
        assert late is got[0][1]
        for key, _ in got:
            cache.release(key)
        assert len(cache) == 1
        cache.release(late_key)
        return got

    asyncio.run(main())
    assert pre.calls == 1 and len(cache) == 0 and cache.nbytes == 0
    assert cache.peak_bytes >= 4096


def test_a_failed_acquire_releases_its_pin():
    cache = PreparedPromptCache(Counting(fail=True))
    with pytest.raises(ValueError):
        asyncio.run(cache.acquire(_d(5)))
    assert cache.stats()["pinned"] == 0


class _HashedImage(Image.Image):
    """A PIL image that records each read of its pixels (``tobytes``) and the reading thread."""

    reads: list[int]

    def tobytes(self, *args, **kwargs):
        self.reads.append(threading.get_ident())
        time.sleep(0.05)  # a large image's read: the group's other episodes ask meanwhile
        return super().tobytes(*args, **kwargs)


def _hashed_image(size: tuple[int, int] = (1200, 900)) -> _HashedImage:
    image = Image.new("RGB", size, (10, 20, 30))
    image.__class__ = _HashedImage
    image.reads = []
    return image


@pytest.mark.parametrize("method", ["aprepare", "acquire"])
def test_a_new_pil_image_is_hashed_once_per_group_off_the_loop(method, monkeypatch):
    """The key of an item holding a large PIL image hashes its pixels (12 MP: tens of ms):
    in a worker thread, so the loop serves other groups meanwhile, and once for the 8 episodes
    of its group however they interleave, in one thread hop (the others await it: a thread
    each would crowd the pool that prepares)."""
    image = _hashed_image()
    item = {"messages": [{"role": "user", "content": "x"}], "images": [image]}
    cache = PreparedPromptCache(Counting(), maxsize=4)
    hops = []
    to_thread = asyncio.to_thread

    def counted(fn, *args, **kwargs):
        hops.append(getattr(fn, "__name__", fn))
        return to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)

    async def main():
        group = [getattr(cache, method)(item) for _ in range(8)]
        return threading.get_ident(), await asyncio.gather(*group)

    loop_thread, _ = asyncio.run(main())
    assert hops.count("item_key") == 1, hops
    assert len(image.reads) == 1, image.reads
    assert loop_thread not in image.reads
    assert item_key(item) == item_key({**item, "images": [image.copy()]})  # the same content


def test_a_small_new_pil_image_is_hashed_on_the_loop(monkeypatch):
    """Below ``OFF_LOOP_PIXELS`` the hash costs less than a thread hop: the loop hashes it."""
    image = _hashed_image((800, 600))
    item = {"messages": [{"role": "user", "content": "x"}], "images": [image]}
    cache = PreparedPromptCache(Counting(), maxsize=4)

    async def main():
        group = [cache.aprepare(item) for _ in range(8)]
        return threading.get_ident(), await asyncio.gather(*group)

    loop_thread, _ = asyncio.run(main())
    assert image.reads == [loop_thread]


def test_pil_images_that_differ_only_in_palette_or_orientation_do_not_share_a_key():
    """Two palette images with one index array and other colours, or one stored pixel array with
    another EXIF orientation, are other images to the model: they must not share a preparation."""
    import io

    from PIL import Image

    from vlrollout.processors.cache import item_key

    indices = Image.new("P", (8, 8), 0)
    red, green = indices.copy(), indices.copy()
    red.putpalette([255, 0, 0] * 256)
    green.putpalette([0, 255, 0] * 256)

    def with_orientation(value: int) -> Image.Image:
        exif = Image.Exif()
        exif[0x0112] = value
        buf = io.BytesIO()
        Image.new("RGB", (12, 8), "blue").save(buf, format="JPEG", exif=exif)
        return Image.open(io.BytesIO(buf.getvalue()))

    def key(image: Image.Image) -> str:
        return item_key({"messages": "<image>?", "images": [image]})

    assert key(red) != key(green)
    assert key(with_orientation(1)) != key(with_orientation(6))
    assert key(with_orientation(6)) == key(with_orientation(6))


def test_a_file_url_is_keyed_by_the_file_it_names(tmp_path):
    """A ``file://`` URL names a file as a path does: a file rewritten in place is new content
    (a resumed run redoes its item), and the URL and the path are one source."""
    path = tmp_path / "clip a.png"
    Image.new("RGB", (4, 4), "red").save(path)
    url = path.as_uri()
    item = {"messages": ["<image>Q"], "images": [url]}
    before = item_key(item)
    assert before == item_key({"messages": ["<image>Q"], "images": [str(path)]})
    time.sleep(0.01)
    Image.new("RGB", (5, 5), "red").save(path)
    assert item_key(item) != before
