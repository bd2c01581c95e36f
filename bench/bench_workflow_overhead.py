"""Episode overhead per input class and engine: vlrollout's ``VisionRLVRWorkflow`` vs AReaL's,
against a floor.

Run: ``.venv/bin/python bench/bench_workflow_overhead.py`` (about 10-15 minutes on 2 shared CPU
cores; ``--quick``: fewer repetitions and only the fast processor, a few minutes; ``--json PATH``
for the raw samples). Everything runs in one process and one event loop; every round times each
column once per case in a shuffled order (seeded), so machine noise hits all columns alike.
``torch.set_num_threads(1)``.

Input classes (each a different subject, drawn by ``bench/images.py``: photos of one image measure
one point of the encoder's and processor's space), 800x600 unless noted:

- ``RGB JPEG`` (portrait, quality 90), ``grey PNG`` (document, mode L), ``RGBA PNG`` (fruit, with an
  alpha gradient), ``palette GIF`` (city, 256-colour adaptive palette), ``PIL input`` (landscape,
  handed over decoded, as HF ``datasets`` does), ``small <=336^2`` (texture, 336x252 JPEG: AReaL's
  own loaders shrink images to 336^2 or 512^2).

Processors: Qwen2.5-VL built offline with Qwen2.5-VL's / AReaL's defaults ``min_pixels=3136``,
``max_pixels=12845056``, patch 14, merge 2, once with the **fast** image processor (what
``AutoProcessor`` loads for real checkpoints in transformers 5) and once with the **slow** one.

Engines, each zero latency with a fixed 8-token answer, the same for both workflows:

- ``local``: :class:`vlrollout.testing.scripted_engine.ScriptedEngine`, which reads the tensors
  (as our local engine does) and never ``image_data``: our workflow encodes no engine images.
- ``sglang`` / ``vllm``: :class:`remote_client_stub.RemoteClientStub`, which first does what
  AReaL's remote clients do with a request (``req.copy()``, their backend's
  ``build_generation_request``, ``json.dumps`` of the body): it reads ``image_data`` (and for vLLM
  ``vision_msg_vllm``), so our lazily encoded engine images are encoded inside our time. This is
  the production case.

:func:`zero_reward` runs in a reward process pool in both workflows (ours: ``RewardCaller``;
AReaL's: its ``AsyncRewardWrapper``).

- AReaL gets what its dataset code produces (``areal/dataset/geometry3k.py``): decoded RGB PIL
  images (``convert("RGB")``; decoding is not in its time), the chat-templated string and the
  OpenAI-style ``messages_chat`` its vLLM client needs to send the image at all.
- Ours gets the file path (or the PIL image for ``PIL input``) and chat messages.

Columns: **floor*** = decode the input as ours does (``to_rgb``: alpha composited on white) + the
processor call our preprocessor makes, identically: the same arguments through the same kind of
copy that validates the processor's fixed arguments once
(``vlrollout.processors.merge_kwargs_cache``; transformers 5.3 re-validates them on every call for
~3-6 ms). It is checked to give exactly our prepared tensors, and it is the least any workflow
must spend per distinct image. **floor** = the same decode with a plain processor call (what a
workflow calling the processor naively spends). Both are timed in the event loop's worker thread,
where ours prepares. **ours** = one episode with a cold prepared-prompt cache; **AReaL** = one
episode. Medians over repetitions. The group table wraps both in AReaL's
``GroupedRolloutWorkflow(wf, 8)``. Both workflows' prompts are checked to give identical
``input_ids``, and on the remote engines to send one image each.

On the remote engines a third table splits a group's time beyond floor*: the engine-image encode
(timed alone: the first request of a prompt prepared outside an episode reads the images, so ours
encodes them then, once per group: its client work beyond a later request's), AReaL's client work
on each of the group's requests (``req.copy()``, the backend's body, ``json.dumps``: a later
request of the same prompt) and the rest (the workflow's own work per episode, as on the local
engine). Both parts are timed apart from the episodes, once per group round, in the same shuffled
order. Inside an episode on a remote engine the encode starts in a background thread before the
processor call and overlaps it, so the rest is negative by about the part of the encode hidden.

Targets for every class, processor and engine: a group of 8 <= 1.5x floor*, and one episode >= 2x
ahead of AReaL (AReaL/ours >= 2). The headline is the worst case over classes and engines (the
worse of the local and the remote engines), printed last. The column ``AReaL/floor*`` is the most
any workflow could reach (it must decode and process the image at least once; AReaL is handed
decoded images, so its time holds no decode): where it is below 2 the single-episode target is out
of reach by construction, and the row says ``MISS (bound)``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402
from areal.api.cli_args import GenerationHyperparameters  # noqa: E402
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow  # noqa: E402
from areal.infra.workflow_executor import check_trajectory_format  # noqa: E402
from areal.workflow.vision_rlvr import VisionRLVRWorkflow as ArealVisionRLVRWorkflow  # noqa: E402
from images import subject_photo  # noqa: E402
from PIL import Image  # noqa: E402
from remote_client_stub import RemoteClientStub  # noqa: E402

from vlrollout.processors.image_mode import to_rgb  # noqa: E402
from vlrollout.processors.merge_kwargs_cache import with_merged_kwargs_cache  # noqa: E402
from vlrollout.testing.offline_processors import build_qwen2_5_vl  # noqa: E402
from vlrollout.testing.scripted_engine import ScriptedEngine  # noqa: E402
from vlrollout.workflows import VisionRLVRWorkflow  # noqa: E402
from vlrollout.workflows.steps import build_request  # noqa: E402

MIN_PIXELS, MAX_PIXELS = 3136, 12845056  # Qwen2.5-VL preprocessor_config.json / AReaL defaults
QUESTION = "What is shown in this picture? Answer in one sentence."
ANSWER = "A woman in a naval uniform."
AREAL_IMAGE_TOKEN = "<|vision_start|><|image_pad|><|vision_end|>"  # clevr_count_70k.py
TARGET_GROUP, TARGET_AREAL = 1.5, 2.0
SIZE = (800, 600)
ENGINES = ("local", "sglang", "vllm")


def zero_reward(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """A trivial picklable reward: the workflow's overhead, not the reward's, is measured."""
    return 0.0


@dataclass(frozen=True)
class Case:
    """One input class: what ours gets (a path or a PIL image) and its subject."""

    name: str
    source: object  # Path, or a PIL image for the "PIL input" class
    subject: str


def _opened(source) -> Image.Image:
    image = source if isinstance(source, Image.Image) else Image.open(source)
    image.load()
    return image


def areal_rgb(source) -> Image.Image:
    """Decode to RGB as AReaL's dataset code does (``convert("RGB")``: alpha dropped)."""
    image = _opened(source)
    return image if image.mode == "RGB" else image.convert("RGB")


def our_rgb(source) -> Image.Image:
    """Decode to the RGB pixels our preprocessor gives the processor (alpha on white)."""
    return to_rgb(_opened(source))


def make_cases(out: Path) -> list[Case]:
    """One file (or PIL image) per input class, each of a different subject."""
    w, h = SIZE
    cases = []
    jpeg = out / "portrait.jpg"
    subject_photo("portrait", w, h).save(jpeg, quality=90)
    cases.append(Case("RGB JPEG", jpeg, "portrait"))
    grey = out / "document.png"
    subject_photo("document", w, h).convert("L").save(grey)
    cases.append(Case("grey PNG", grey, "document"))
    rgba = subject_photo("fruit", w, h).convert("RGBA")
    alpha = Image.linear_gradient("L").resize((w, h))
    rgba.putalpha(alpha)
    rgba_path = out / "fruit.png"
    rgba.save(rgba_path)
    cases.append(Case("RGBA PNG", rgba_path, "fruit"))
    gif = out / "city.gif"
    subject_photo("city", w, h).convert("P", palette=Image.Palette.ADAPTIVE, colors=256).save(gif)
    cases.append(Case("palette GIF", gif, "city"))
    cases.append(Case("PIL input", subject_photo("landscape", w, h), "landscape"))
    small = out / "texture.jpg"
    subject_photo("texture", 336, 252).save(small, quality=90)
    cases.append(Case("small <=336^2", small, "texture"))
    return cases


def our_messages() -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]


def our_item(case: Case) -> dict:
    """Our item for ``case``. A PIL input is a new image object at every call, as each dataset
    row is (copied before any timer starts): our prompt cache keys a PIL image by its pixels,
    hashed once per image object, and that hash belongs in our time."""
    if isinstance(case.source, Image.Image):
        source: Image.Image | str = case.source.copy()
    else:
        source = str(case.source)
    return {"messages": our_messages(), "images": [source], "answer": ANSWER}


def areal_item(tokenizer, case: Case) -> dict:
    """What AReaL's workflow gets from its dataset code (``geometry3k.py``): decoded RGB images,
    the templated text, and ``messages_chat`` (its vLLM client sends no image without it)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": AREAL_IMAGE_TOKEN + QUESTION}],
        add_generation_prompt=True,
        tokenize=False,
    )
    messages_chat = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": ""}},
                {"type": "text", "text": QUESTION},
            ],
        }
    ]
    return {
        "messages": text,
        "messages_chat": messages_chat,
        "images": [areal_rgb(case.source)],
        "answer": ANSWER,
    }


def build_processor(fast: bool):
    proc = build_qwen2_5_vl(MIN_PIXELS, MAX_PIXELS)
    if fast:
        from transformers import Qwen2VLImageProcessorFast

        proc.image_processor = Qwen2VLImageProcessorFast(
            size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}, patch_size=14
        )
    return proc


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def clear(engine: ScriptedEngine) -> None:
    """Forget what an engine recorded (its requests, and a stub's request bodies)."""
    if isinstance(engine, RemoteClientStub):
        engine.clear()
    else:
        engine.requests.clear()


class Bench:
    """The workflows, engines and processor under test; all timing happens on one event loop."""

    def __init__(self, fast: bool, group_size: int, engines: tuple[str, ...]) -> None:
        self.processor = build_processor(fast)
        self.tokenizer = self.processor.tokenizer
        self.gconfig = gconfig = GenerationHyperparameters(max_new_tokens=16)
        answer = self.tokenizer.encode(ANSWER, add_special_tokens=False)[:7]
        script = [answer + [self.tokenizer.eos_token_id]]
        self.engines: dict[str, ScriptedEngine] = {
            e: ScriptedEngine(script) if e == "local" else RemoteClientStub(e, script)
            for e in engines
        }
        self.ours = VisionRLVRWorkflow(zero_reward, gconfig, self.tokenizer, self.processor)
        self.areal = ArealVisionRLVRWorkflow(
            zero_reward, gconfig, self.tokenizer, self.processor, enable_thinking=False
        )
        log = logging.getLogger("bench_workflow_overhead")
        self.ours_group = GroupedRolloutWorkflow(self.ours, group_size, log)
        self.areal_group = GroupedRolloutWorkflow(self.areal, group_size, log)
        # The processor call our preprocessor makes: its own kind of copy (fixed arguments
        # validated once) with its arguments. check_floor proves the outputs are ours.
        self.ours_processor = with_merged_kwargs_cache(self.processor)
        self.floor_text = self.processor.apply_chat_template(
            our_messages(), tokenize=False, add_generation_prompt=True
        )

    def _floor_call(self, processor, case: Case) -> tuple[float, dict]:
        t0 = time.perf_counter()
        # Our decode + the call our preprocessor makes (nested images, a batch of one text).
        out = processor(
            text=[self.floor_text], return_tensors="pt", images=[[our_rgb(case.source)]]
        )
        return time.perf_counter() - t0, out

    async def floor(self, case: Case, ours_call: bool = True) -> float:
        """Decode + one processor call (the call ours makes, or a plain one), in the loop's
        worker thread (where ours prepares)."""
        gc.collect()
        processor = self.ours_processor if ours_call else self.processor
        seconds, _ = await asyncio.to_thread(self._floor_call, processor, case)
        return seconds

    async def episode(self, workflow, engine: ScriptedEngine, item: dict) -> float:
        """Seconds for one ``arun_episode`` (ours starts from an empty prompt cache)."""
        self.ours.ctx.prompts.clear()
        gc.collect()
        t0 = time.perf_counter()
        out = await workflow.arun_episode(engine, item)
        elapsed = time.perf_counter() - t0
        del out
        clear(engine)
        return elapsed

    def _client_work(self, engine: RemoteClientStub, req) -> float:
        """Seconds of what :class:`RemoteClientStub` does with a request before answering (AReaL's
        remote client: ``req.copy()``, its backend's body, ``json.dumps``)."""
        t0 = time.perf_counter()
        http_req = engine.backend.build_generation_request(req.copy(), with_lora=False, version=0)
        json.dumps(http_req.payload)
        return time.perf_counter() - t0

    async def remote_cost(self, case: Case, engine: RemoteClientStub) -> RemoteCost:
        """AReaL's client work on two requests from one freshly prepared prompt: the first reads
        the engine images, so ours encodes them then (once per group); the second finds them
        encoded. The prompt is not kept (the next episode starts from a cold cache)."""
        self.ours.ctx.prompts.clear()
        prepared = await self.ours.ctx.prepare(our_item(case))
        self.ours.ctx.prompts.clear()
        requests = [
            build_request(prepared, self.gconfig, self.tokenizer, self.processor) for _ in range(2)
        ]
        gc.collect()
        first, later = (self._client_work(engine, req) for req in requests)
        return RemoteCost(encode_ms=(first - later) * 1e3, body_ms=later * 1e3)

    async def check_floor(self, case: Case) -> None:
        """floor* computes exactly our prepared tensors: the same processor call on the same
        pixels, so ours/floor* measures the workflow, not a different call."""
        _, out = self._floor_call(self.ours_processor, case)
        prepared = await self.ours.ctx.prepare(our_item(case))
        same = out["input_ids"][0].tolist() == list(prepared.input_ids) and all(
            torch.equal(out[k], v) for k, v in prepared.multi_modal_input.items()
        )
        self.ours.ctx.prompts.clear()
        if not same:
            raise RuntimeError(f"{case.name}: the floor's processor call is not the one ours makes")

    async def check_same_prompt(self, case: Case) -> None:
        """Both workflows send the same tokens (and, to a remote engine, one image each); ours
        passes AReaL's trajectory check."""
        for name, engine in self.engines.items():
            traj = await self.ours.arun_episode(engine, our_item(case))
            self.ours.ctx.prompts.clear()
            if traj is None or not check_trajectory_format(traj):
                raise RuntimeError(f"our workflow returned no valid trajectory: {self.ours.ledger}")
            await self.areal.arun_episode(engine, areal_item(self.tokenizer, case))
            ours, areal = (list(r.input_ids) for r in engine.requests[-2:])
            if ours != areal:
                raise RuntimeError(
                    f"{case.name}: prompts differ ({len(ours)} vs {len(areal)} tokens)"
                )
            if isinstance(engine, RemoteClientStub):
                sent = [_images_sent(endpoint, body) for endpoint, body in engine.payloads]
                if sent != [1, 1]:
                    raise RuntimeError(f"{case.name} on {name}: images sent {sent}, not one each")
            clear(engine)


@dataclass(frozen=True)
class RemoteCost:
    """What AReaL's remote client work adds to one group of ours, in ms (medians).

    Attributes:
        encode_ms: The first request's extra: reading the engine images makes ours encode them
            (a lossless re-encode, or base64 of the file's own bytes), once per group.
        body_ms: One request's client work once the images are encoded (copy, body, json.dumps),
            paid by every request of the group.
    """

    encode_ms: float
    body_ms: float


def _images_sent(endpoint: str, payload: dict) -> int:
    """How many images a request body carries (SGLang ``image_data``, vLLM ``data:`` URLs)."""
    if endpoint == "/generate":
        return len(payload.get("image_data") or [])
    return sum(
        1
        for msg in payload.get("messages", [])
        if isinstance(msg["content"], list)
        for part in msg["content"]
        if part.get("type") == "image_url" and part["image_url"]["url"].startswith("data:")
    )


def fresh(item: dict) -> dict:
    """The item with its own ``messages_chat`` (AReaL's vLLM client writes the image URLs into
    it in place), as a dataset hands each episode its own row; the images are shared."""
    return {**item, "messages_chat": copy.deepcopy(item["messages_chat"])}


@dataclass(frozen=True)
class Reps:
    single: int
    areal: int
    group: int
    areal_group: int


def spread(n: int, total: int) -> set[int]:
    """``n`` round indices spread evenly over ``range(total)`` (where the costly AReaL runs go)."""
    n = min(n, total)
    return {round(i * (total - 1) / max(1, n - 1)) for i in range(n)} if n else set()


async def measure(bench: Bench, cases: list[Case], reps: Reps) -> dict[str, dict[str, list]]:
    """Samples (seconds) per column and case: ``floor``, ``floor_min`` (floor*), per engine
    ``ours:<engine>``, ``areal:<engine>``, ``g_ours:<engine>``, ``g_areal:<engine>``, and per
    remote engine (once per group round) ``encode:<engine>``, ``body:<engine>`` (ms, see
    :class:`RemoteCost`)."""
    order = random.Random(0)
    for case in cases:
        await bench.check_floor(case)
        await bench.check_same_prompt(case)
    areal_items = {c.name: areal_item(bench.tokenizer, c) for c in cases}
    gc.collect()
    gc.freeze()
    remote = [e for e, engine in bench.engines.items() if isinstance(engine, RemoteClientStub)]
    keys = (
        ["floor", "floor_min"]
        + [f"{k}:{e}" for e in bench.engines for k in ("ours", "areal", "g_ours", "g_areal")]
        + [f"{k}:{e}" for e in remote for k in ("encode", "body")]
    )
    out: dict[str, dict[str, list]] = {k: {c.name: [] for c in cases} for k in keys}

    async def one_round(c: Case, grouped: bool, with_areal: bool) -> None:
        ours_wf, areal_wf = (
            (bench.ours_group, bench.areal_group) if grouped else (bench.ours, bench.areal)
        )
        ok, ak = ("g_ours", "g_areal") if grouped else ("ours", "areal")
        steps = [
            ("floor", lambda: bench.floor(c, ours_call=False)),
            ("floor_min", lambda: bench.floor(c)),
        ]
        for name, engine in bench.engines.items():
            steps.append((f"{ok}:{name}", lambda e=engine: bench.episode(ours_wf, e, our_item(c))))
            if with_areal:
                steps.append(
                    (
                        f"{ak}:{name}",
                        lambda e=engine: bench.episode(areal_wf, e, fresh(areal_items[c.name])),
                    )
                )
        if grouped:
            steps += [
                (f"cost:{e}", lambda e=e: bench.remote_cost(c, bench.engines[e])) for e in remote
            ]
        order.shuffle(steps)
        for key, run in steps:
            value = await run()
            if isinstance(value, RemoteCost):
                engine = key.split(":", 1)[1]
                out[f"encode:{engine}"][c.name].append(value.encode_ms)
                out[f"body:{engine}"][c.name].append(value.body_ms)
            else:
                out[key][c.name].append(value)

    for grouped, total, n_areal in (
        (False, reps.single, reps.areal),
        (True, reps.group, reps.areal_group),
    ):
        areal_rounds = spread(n_areal, total)
        for r in range(total):
            for c in cases:
                await one_round(c, grouped, r in areal_rounds)
    return out


def verdict_vs_areal(areal_over_ours: float, areal_over_floor: float) -> str:
    """``ok``/``MISS`` for one episode; a miss where AReaL/floor* is itself under the target says
    so: every workflow pays at least floor*, so AReaL/floor* bounds AReaL/ours from above and no
    workflow could reach the target on that input."""
    if areal_over_ours >= TARGET_AREAL:
        return "ok"
    return "MISS (bound)" if areal_over_floor < TARGET_AREAL else "MISS"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """First column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    for cells in [header, *rows]:
        padded = (c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))  # fmt: skip
        print("  ".join(padded))


@dataclass(frozen=True)
class Result:
    """Medians (ms) of one input class, processor and engine."""

    label: str
    subject: str
    engine: str
    floor: float
    floor_min: float
    ours: float
    areal: float
    g_ours: float
    g_areal: float
    encode: float | None = None
    body: float | None = None

    @property
    def group_ratio(self) -> float:
        return self.g_ours / self.floor_min

    @property
    def areal_ratio(self) -> float:
        return self.areal / self.ours

    @property
    def bound(self) -> float:
        return self.areal / self.floor_min


def results_of(res: dict[str, dict[str, list]], cases: list[Case], kind: str, engines) -> list:
    out = []
    for c in cases:
        f, fm = median_ms(res["floor"][c.name]), median_ms(res["floor_min"][c.name])
        for e in engines:
            o, a, go, ga = (
                median_ms(res[f"{k}:{e}"][c.name]) for k in ("ours", "areal", "g_ours", "g_areal")
            )
            remote = {
                k: statistics.median(res[f"{k}:{e}"][c.name])
                for k in ("encode", "body")
                if f"{k}:{e}" in res
            }
            out.append(Result(f"{c.name} ({kind})", c.subject, e, f, fm, o, a, go, ga, **remote))
    return out


def beyond_floor(r: Result, cost: RemoteCost, g: int) -> tuple[float, float, float, float]:
    """A group's ms beyond floor*, split: the engine-image encode (once), AReaL's client work on
    ``g`` requests, and the rest (the workflow's own per-episode work)."""
    beyond, bodies = r.g_ours - r.floor_min, g * cost.body_ms
    return beyond, cost.encode_ms, bodies, beyond - cost.encode_ms - bodies


def client_bound(r: Result, cost: RemoteCost, g: int) -> float:
    """(floor* + AReaL's client work on ``g`` requests) / floor*: the least ours/floor* a group
    can reach while every request carries the image in the body ours sends (no encode, no
    workflow work)."""
    return (r.floor_min + g * cost.body_ms) / r.floor_min


def readme_table(results: list[Result], engines: tuple[str, ...], g: int) -> record.Table:
    """One row per input class and processor: the target ratios on every engine."""
    by_label: dict[str, dict[str, Result]] = {}
    for r in results:
        by_label.setdefault(r.label, {})[r.engine] = r
    rows = []
    for label, per_engine in by_label.items():
        rows.append(
            [label]
            + [fmt_ratio(per_engine[e].group_ratio) for e in engines]
            + [fmt_ratio(per_engine[e].areal_ratio) for e in engines]
            + [fmt_ratio(per_engine["local" if "local" in engines else engines[0]].bound)]
        )
    columns = (
        ["input class (image processor)"]
        + [f"group of {g}: ours/floor* ({e})" for e in engines]
        + [f"one episode: AReaL/ours ({e})" for e in engines]
        + ["AReaL/floor* (local)"]
    )
    return record.Table(
        columns,
        rows,
        title=f"targets: group ours/floor* <= {TARGET_GROUP}x, one episode AReaL/ours >= "
        f"{TARGET_AREAL}x; AReaL/floor* bounds AReaL/ours for any workflow",
    )


def beyond_floor_table(results: list[Result], g: int) -> record.Table:
    """Per input class, processor and remote engine: where a group's ms beyond floor* go."""
    rows = []
    for r in results:
        if r.encode is None or r.body is None:
            continue
        parts = beyond_floor(r, RemoteCost(r.encode, r.body), g)
        bound = client_bound(r, RemoteCost(r.encode, r.body), g)
        rows.append([r.label, r.engine, f"{r.floor_min:.1f}", f"{r.g_ours:.1f}"]
                    + [f"{x:.1f}" for x in parts] + [fmt_ratio(r.group_ratio)]
                    + [fmt_ratio(bound)])  # fmt: skip
    columns = ["input class (image processor)", "engine", "floor*", "ours", "ours - floor*",
               "engine images encoded (once)", f"client work x {g} requests", "rest",
               "ours/floor*", "floor* + client work, over floor*"]  # fmt: skip
    return record.Table(
        columns,
        rows,
        title=f"group of {g} on the remote engines, ms: ours - floor* = the engine-image encode "
        f"(once per group) + AReaL's client work on each request (copy, body, json.dumps; "
        f"measured apart, medians) + the rest (the workflow's own work); the last column is the "
        f"least ours/floor* with these request bodies, were encode and rest free",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions, fast processor only")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--processors", default=None, help="fast,slow (default both)")
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help=f"some of {','.join(ENGINES)} (default all)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write raw samples (s) here")
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("workflow_overhead", argv)
    torch.set_num_threads(1)
    logging.getLogger("bench_workflow_overhead").setLevel(logging.ERROR)
    kinds = (args.processors or ("fast" if args.quick else "fast,slow")).split(",")
    if not kinds or any(k not in ("fast", "slow") for k in kinds):
        parser.error(f"--processors takes fast, slow or fast,slow; got {args.processors!r}")
    engines = tuple(args.engines.split(","))
    if not engines or any(e not in ENGINES for e in engines) or len(set(engines)) < len(engines):
        parser.error(f"--engines takes some of {','.join(ENGINES)}; got {args.engines!r}")
    reps = Reps(3, 2, 2, 1) if args.quick else Reps(7, 4, 5, 2)
    g = args.group_size
    raw: dict[str, dict] = {}
    results: list[Result] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_inputs_") as tmp:
        cases = make_cases(Path(tmp))
        for kind in kinds:
            bench = Bench(kind == "fast", g, engines)
            res = asyncio.run(measure(bench, cases, reps))
            gc.unfreeze()
            raw[kind] = res
            results += results_of(res, cases, kind, engines)
    elapsed = time.perf_counter() - t_start
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    setting = (
        f"Qwen2.5-VL processor (min_pixels={MIN_PIXELS}, max_pixels={MAX_PIXELS}, patch 14, "
        f"merge 2), {SIZE[0]}x{SIZE[1]} inputs unless noted, zero-latency engines "
        f"({', '.join(engines)}), trivial reward in a process pool; torch threads=1; medians "
        f"of {reps.single} (AReaL {reps.areal}) episodes and {reps.group} (AReaL "
        f"{reps.areal_group}) groups"
    )
    print(f"{setting}; {elapsed:.0f} s")
    print_table(
        f"One episode, ms (target AReaL/ours >= {TARGET_AREAL}x)",
        ["input class (processor)", "subject", "engine", "floor", "floor*", "ours", "AReaL",
         "ours/floor*", "AReaL/ours", "AReaL/floor*", "target"],
        [[r.label, r.subject, r.engine, f"{r.floor:.1f}", f"{r.floor_min:.1f}", f"{r.ours:.1f}",
          f"{r.areal:.1f}", fmt_ratio(r.ours / r.floor_min), fmt_ratio(r.areal_ratio),
          fmt_ratio(r.bound), verdict_vs_areal(r.areal_ratio, r.bound)] for r in results],
    )  # fmt: skip
    print_table(
        f"Group of {g} (GroupedRolloutWorkflow), ms per group (target ours/floor* <= "
        f"{TARGET_GROUP}x)",
        ["input class (processor)", "engine", "floor*", "ours", "AReaL", "ours/floor*",
         "AReaL/ours", "target"],
        [[r.label, r.engine, f"{r.floor_min:.1f}", f"{r.g_ours:.1f}", f"{r.g_areal:.1f}",
          fmt_ratio(r.group_ratio), fmt_ratio(r.g_areal / r.g_ours),
          "ok" if r.group_ratio <= TARGET_GROUP else "MISS"] for r in results],
    )  # fmt: skip
    split = beyond_floor_table(results, g)
    if split.rows:
        print_table(split.title, split.columns, split.rows)
    worst_group = max(results, key=lambda r: r.group_ratio)
    worst_areal = min(results, key=lambda r: r.areal_ratio)
    print()
    headline = (
        f"headline (worst class and engine): group of {g} ours/floor* "
        f"{worst_group.group_ratio:.2f}x [{worst_group.label}, {worst_group.engine}]; one "
        f"episode AReaL/ours {worst_areal.areal_ratio:.2f}x [{worst_areal.label}, "
        f"{worst_areal.engine}, bound AReaL/floor* {worst_areal.bound:.2f}x]"
    )
    print(headline)
    mode = (
        f"quick: {reps.single} episodes ({reps.areal} for AReaL) and {reps.group} groups "
        f"({reps.areal_group} for AReaL) per case, the {' and '.join(kinds)} processor"
        if args.quick
        else "default"
    )
    rec = started.record(
        [readme_table(results, engines, g)] + ([split] if split.rows else []),
        headline,
        {"results": [r.__dict__ for r in results], "reps": reps.__dict__},
        mode=mode,
        notes=[setting],
    )
    record.write(rec, args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
