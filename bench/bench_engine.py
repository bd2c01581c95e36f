"""Tokens/s of the embedded engine against plain ``model.generate``, and HTTP overhead.

Tiny-model vision requests, greedy, one run, the same requests for both:

- **equal**: 16 requests, every one the same prompt length and 64 new tokens;
- **mixed**: 16 requests, images of different sizes (prompt lengths vary) and 8..64 new tokens;
- **sampled**: the mixed requests sampled at temperature 1 (no top-k/top-p) on both sides, as RL
  rollouts are; no target, and the tokens differ (each side draws its own);
- **queued**: 64 such mixed requests, more than fit at once (``--batch`` rows): the workload
  continuous batching exists for (an RL rollout batch of prompts x group size).

``model.generate`` is what a user would write instead, on a model of its own that the engine
never wrapped (the engine encodes a group's images once and embeds pre-cut patches with a matrix
product: ``generate`` on the engine's model would share both): the requests in arrival order, ``--batch``
at a time (the same row budget the engine gets), each chunk one left-padded batch run to its
longest request (``max_new_tokens`` = the longest, each row cut to its own length afterwards; in
RL the lengths are unknown until EOS, so chunks cannot be sorted by them), EOS suppressed for that
many tokens (``min_new_tokens``) and the vision placeholders suppressed as the engine does, so both
produce the same greedy tokens; the table says how many requests agree. Processor batches (for
``generate``) and request tensors (for the engine) are built before the clock starts. The engine
gets all requests concurrently (continuous batching: a finished row's place goes to the next
request at once). HTTP overhead: the same requests (1 new token, so fixed costs show) one at a
time through ``vlrollout serve`` (SGLang protocol, PNG ``image_data`` decoded by the server)
against in-process ``agenerate`` with the processor's tensors.

Targets: engine/generate >= 1.0x on equal lengths, >= 1.5x on mixed lengths.

``bound``: ``generate``'s time over the time the engine spent inside the model's forward calls
(prefills and decode steps) in the same run, i.e. the ratio an engine with no overhead of its own
would reach with the same forward calls. On **mixed** the engine already makes the fewest calls
the workload allows (one prefill, as many decode steps as the longest request, only live rows in
each), so where that bound is under the target no scheduling can reach it with this model's
transformers forward; the row then says ``MISS (bound)``.

Two tables: the engine as it starts by default (uncompiled decode steps), then the engine with
``compile_decode=True`` (``vlrollout serve --compile``), whose decode steps run the decoder
through ``torch.compile`` (compiled when the engine is built, timed separately and not in the
table; each case runs ``generate`` alongside it again, and both tables use ``generate``'s best
time of either phase). The headline names both worst cases.

    .venv/bin/python bench/bench_engine.py            # ~2 min on 2 shared CPU cores
    .venv/bin/python bench/bench_engine.py --quick    # smaller, for the test suite
    .venv/bin/python bench/bench_engine.py --no-compile   # the default engine only, ~1 min
    .venv/bin/python bench/bench_engine.py --device cuda --threads 8

The last line is the headline (the worst engine/generate ratio of each engine).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import record
import requests as http
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from entry import positive_int
from PIL import Image
from transformers import AutoModelForImageTextToText

from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.step_forward import CompiledStep
from vlrollout.testing.tiny_model import tiny_qwen2vl

TARGET_EQUAL, TARGET_MIXED = 1.0, 1.5
ASSET = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen2vl"


@dataclass
class Case:
    image: Image.Image
    question: str
    new_tokens: int


def build_cases(n: int, new_tokens: int, mixed: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    cases = []
    for i in range(n):
        w, h = (56 + 28 * (i % 3), 56 + 28 * ((i // 3) % 3)) if mixed else (112, 84)
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        question = "How many shapes are there?" + (
            " Answer with a number." * (i % 4) if mixed else ""
        )
        length = int(rng.integers(max(1, new_tokens // 8), new_tokens + 1)) if mixed else new_tokens
        cases.append(Case(image, question, length))
    return cases


def prompt_text(processor, case: Case) -> str:
    content = [{"type": "image"}, {"type": "text", "text": case.question}]
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


def engine_requests(processor, cases: list[Case], sample: bool = False) -> list[ModelRequest]:
    """One request per case: greedy, or sampled at temperature 1 (no top-k/top-p)."""
    reqs = []
    for case in cases:
        out = processor(
            text=[prompt_text(processor, case)], images=[case.image], return_tensors="pt"
        )
        mm = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        g = GenerationHyperparameters(
            max_new_tokens=case.new_tokens,
            min_new_tokens=case.new_tokens,
            greedy=not sample,
            temperature=1.0,
        )
        reqs.append(
            ModelRequest(
                input_ids=out["input_ids"][0].tolist(),
                metadata={"multi_modal_input": mm},
                gconfig=g,
            )
        )
    return reqs


def generate_batches(
    processor, cases: list[Case], rows: int, device: str = "cpu"
) -> list[tuple[list[Case], dict]]:
    """What a user hands ``model.generate``: the cases in arrival order, ``rows`` at a time, each
    chunk one left-padded processor batch on ``device`` (built before the clock starts, as the
    engine's requests are)."""
    processor.tokenizer.padding_side = "left"
    chunks = [cases[i : i + rows] for i in range(0, len(cases), rows)]
    return [
        (
            chunk,
            processor(
                text=[prompt_text(processor, c) for c in chunk],
                images=[c.image for c in chunk],
                padding=True,
                return_tensors="pt",
            ).to(device),
        )
        for chunk in chunks
    ]


def run_generate(
    model,
    processor,
    batches: list[tuple[list[Case], dict]],
    banned: list[int],
    sample: bool = False,
) -> tuple[list[list[int]], float]:
    """Each chunk through ``model.generate`` in turn (a static batch runs until its longest
    request is done), greedy or sampled as the engine's requests (temperature 1, generate's
    default top-k of 50 switched off); returns every row cut to its own length."""
    tokens: list[list[int]] = []
    start = time.perf_counter()
    for cases, batch in batches:
        longest = max(c.new_tokens for c in cases)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=longest,
                min_new_tokens=longest,
                # Sampling flags only when sampling: generate warns about them otherwise.
                **(
                    {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0}
                    if sample
                    else {"do_sample": False}
                ),
                suppress_tokens=banned,
                pad_token_id=processor.tokenizer.pad_token_id,
            )
        prompt_len = batch["input_ids"].shape[1]
        tokens += [
            out[i, prompt_len : prompt_len + c.new_tokens].tolist() for i, c in enumerate(cases)
        ]
    return tokens, time.perf_counter() - start


def run_engine(engine, reqs, timed: bool = True) -> tuple[list[list[int]], float, float | None]:
    """All requests at once; timed inside the event loop (creating and closing a loop is not
    the engine's cost). Also returns the seconds spent inside the model's forward calls
    (``timed``; not for a compiled engine, whose compiled decoder the timing hooks would
    break into pieces)."""

    async def go():
        start = time.perf_counter()
        resps = await asyncio.gather(*(engine.agenerate(r) for r in reqs))
        return resps, time.perf_counter() - start

    with ForwardTimer(engine.model) if timed else contextlib.nullcontext() as timer:
        resps, seconds = asyncio.run(go())
    return [r.output_tokens for r in resps], seconds, timer.seconds if timed else None


class ForwardTimer:
    """Sums the wall time of a model's outermost forward calls (hooks, removed on exit): the
    model itself, and its text decoder and LM head, which the engine's decode steps call
    directly (``vlrollout.engine.step_forward``); a call inside another is not counted again.
    On a GPU each outermost call is synchronised at its end, so its kernels are counted."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.modules = [model, model.get_decoder(), model.get_output_embeddings()]
        self.cuda = next(model.parameters()).is_cuda
        self.seconds, self._start, self._depth, self._handles = 0.0, 0.0, 0, []

    def __enter__(self) -> ForwardTimer:
        def pre(*_):
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1

        def post(*_):
            self._depth -= 1
            if self._depth == 0:
                if self.cuda:
                    torch.cuda.synchronize()
                self.seconds += time.perf_counter() - self._start

        for module in self.modules:
            self._handles += [
                module.register_forward_pre_hook(pre),
                module.register_forward_hook(post),
            ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def verdict(ratio: float, bound: float, target: float) -> str:
    """``ok``; ``MISS``; or ``MISS (bound)`` when even an engine with no overhead of its own,
    making the same forward calls, would stay under ``target``."""
    if ratio >= target:
        return "ok"
    return "MISS (bound)" if bound < target else "MISS"


def png_base64(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def http_overhead(engine, cases, reqs, new_tokens: int) -> tuple[float, ...]:
    """Seconds per request, one at a time: median in-process, median over HTTP (SGLang
    protocol), the median of the paired differences (each request runs both ways in turn, so
    load from other processes hits both alike); and the two fixed costs of the HTTP path: a
    ``GET /health`` round trip and the server's PNG decode + image processor per image."""
    from vlrollout.serve.app import build_app
    from vlrollout.serve.background import BackgroundServer

    loop = asyncio.new_event_loop()  # one loop, as a server has: no loop set-up per request

    def local(req):
        g = GenerationHyperparameters(
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, greedy=True
        )
        return loop.run_until_complete(
            engine.agenerate(
                ModelRequest(input_ids=req.input_ids, metadata=req.metadata, gconfig=g)
            )
        )

    payloads = [
        {
            "input_ids": r.input_ids,
            "image_data": [png_base64(c.image)],
            "sampling_params": {
                "max_new_tokens": new_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
            },
            "return_logprob": True,
            "stream": False,
        }
        for c, r in zip(cases, reqs, strict=True)
    ]
    in_process, over_http = [], []
    with BackgroundServer(build_app(engine, "sglang")) as server, http.Session() as session:

        def remote(payload):
            r = session.post(f"{server.url}/generate", json=payload, timeout=60)
            r.raise_for_status()

        remote(payloads[0])  # warm-up
        for i, (req, payload) in enumerate(zip(reqs, payloads, strict=True)):
            # Alternate which goes first, so drifting load from other processes hits both alike.
            for kind in ("local", "http") if i % 2 == 0 else ("http", "local"):
                t = time.perf_counter()
                local(req) if kind == "local" else remote(payload)
                (in_process if kind == "local" else over_http).append(time.perf_counter() - t)
        health = []
        for _ in range(50):
            t = time.perf_counter()
            session.get(f"{server.url}/health", timeout=10).raise_for_status()
            health.append(time.perf_counter() - t)
    loop.close()
    from vlrollout.serve.state import ServerState

    async def decode_time() -> float:  # ServerState needs a running loop (its Event)
        state = ServerState(engine)
        times = []
        for p in payloads:
            t = time.perf_counter()
            raws = state.encoded_images(p["image_data"], "bench")
            sizes = state.image_headers(raws, "bench").sizes
            state.check_image_placeholders(p["input_ids"], sizes, "")
            state.vision_tensors(raws, "bench")
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    diffs = [h - p for h, p in zip(over_http, in_process, strict=True)]
    return (
        statistics.median(in_process),
        statistics.median(over_http),
        statistics.median(diffs),
        statistics.median(health),
        asyncio.run(decode_time()),
    )


@dataclass
class Measured:
    """One case on one engine: best seconds over the timed runs, and what they produced."""

    name: str
    requests: int
    useful: int
    target: float | None
    generate_s: float
    engine_s: float
    forward_s: float | None  # inside the model's forward calls (the uncompiled engine only)
    same: int | None  # requests whose greedy tokens equal generate's; None when sampled
    calls: dict


CASES = (  # name, requests (times --requests), mixed lengths, target, sampled
    ("equal", 1, False, TARGET_EQUAL, False),
    ("mixed", 1, True, TARGET_MIXED, False),
    ("sampled", 1, True, None, True),
    ("queued", None, True, TARGET_MIXED, False),
)


def measure(engine, model, processor, args, timed_forwards: bool) -> list[Measured]:
    """Every case on ``engine``, ``generate`` and the engine in turn, ``--repeat`` times each."""
    banned = sorted(engine.banned_token_ids)
    out = []
    for name, times, mixed, target, sample in CASES:
        n = args.requests * (times or args.queued)
        cases = build_cases(n, args.new_tokens, mixed)
        reqs = engine_requests(processor, cases, sample)
        batches = generate_batches(processor, cases, args.batch, args.device)
        run_engine(engine, reqs[:2], timed=False)  # warm-up
        run_generate(
            model, processor, generate_batches(processor, cases[:2], 2, args.device), banned
        )
        gen_s, eng_s, fwd_s, calls = float("inf"), float("inf"), None, {}
        for _ in range(args.repeat):
            gen_tokens, s = run_generate(model, processor, batches, banned, sample)
            gen_s = min(gen_s, s)
            before = engine.stats()
            eng_tokens, s, f = run_engine(engine, reqs, timed=timed_forwards)
            if s < eng_s:
                after = engine.stats()
                calls = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                eng_s, fwd_s = s, f
        same = None if sample else sum(a == b for a, b in zip(gen_tokens, eng_tokens, strict=True))
        useful = sum(c.new_tokens for c in cases)
        out.append(Measured(name, n, useful, target, gen_s, eng_s, fwd_s, same, calls))
    return out


def print_table(title: str, rows: list[Measured]) -> None:
    print(title)
    print(
        f"{'lengths':<9}{'requests':>9}{'tokens':>8}{'generate tok/s':>16}{'engine tok/s':>14}{'ratio':>7}{'same tokens':>13}{'bound':>7}{'target':>8}"
    )
    for r in rows:
        ratio = r.generate_s / r.engine_s
        bound = r.generate_s / r.forward_s if r.forward_s else None
        agree = f"{r.same:>9}/{r.requests}" if r.same is not None else f"{'(sampled)':>13}"
        shown = f"{bound:>6.2f}x" if bound else f"{'-':>7}"
        aim = (
            f"{r.target:>7.1f}x {verdict(ratio, bound or float('inf'), r.target)}"
            if r.target
            else f"{'-':>8}"
        )
        print(
            f"{r.name:<9}{r.requests:>9}{r.useful:>8}{r.useful / r.generate_s:>16.1f}{r.useful / r.engine_s:>14.1f}{ratio:>6.2f}x{agree}{shown}{aim}"
        )


def readme_table(title: str, rows: list[Measured]) -> record.Table:
    """The README's copy of :func:`print_table`."""
    out = []
    for r in rows:
        ratio = r.generate_s / r.engine_s
        bound = r.generate_s / r.forward_s if r.forward_s else None
        out.append(
            [
                r.name,
                str(r.requests),
                f"{r.useful / r.generate_s:.1f}",
                f"{r.useful / r.engine_s:.1f}",
                f"{ratio:.2f}x",
                f"{r.same}/{r.requests}" if r.same is not None else "(sampled)",
                f"{bound:.2f}x" if bound else "-",
                f"{r.target:.1f}x {verdict(ratio, bound or float('inf'), r.target)}"
                if r.target
                else "-",
            ]
        )
    columns = ["lengths", "requests", "generate tok/s", "engine tok/s", "engine/generate",
               "greedy tokens equal", "bound", "target"]  # fmt: skip
    return record.Table(columns, out, title=title)


def worst(rows: list[Measured]) -> Measured:
    """The case furthest below (or closest to) its target."""
    return min((r for r in rows if r.target), key=lambda r: r.generate_s / r.engine_s / r.target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=positive_int, default=16)
    parser.add_argument("--new-tokens", type=positive_int, default=64)
    parser.add_argument(
        "--batch",
        type=positive_int,
        default=16,
        help="rows at a time: engine max_batch_size, generate chunk",
    )
    parser.add_argument(
        "--queued",
        type=positive_int,
        default=4,
        help="the queued case sends this many times --requests",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--repeat", type=positive_int, default=5, help="timed runs; the best is reported"
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure the engine with compile_decode=True (compiles for ~30 s first)",
    )
    parser.add_argument("--quick", action="store_true", help="8 requests, 16 tokens, 1 run")
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("engine")
    if args.quick:
        args.requests, args.new_tokens, args.repeat = 8, 16, 1
    torch.set_num_threads(args.threads)

    if ASSET.exists():
        base = LocalInferenceEngine.from_pretrained(
            str(ASSET), device=args.device, dtype=torch.float32
        )
        model, processor = base.model, base.processor
        plain = AutoModelForImageTextToText.from_pretrained(ASSET, dtype=torch.float32)
        source = str(ASSET.relative_to(ASSET.parents[1]))
    else:
        model, processor = tiny_qwen2vl(seed=0)
        plain, _ = tiny_qwen2vl(seed=0)
        source = "random tiny Qwen2-VL (vlrollout.testing.tiny_model)"
    # generate runs on a model the engine never wrapped (image sharing, the patch embedding):
    # what a user writes instead of the engine.
    plain = plain.to(args.device).eval()

    with LocalInferenceEngine(
        model, processor, device=args.device, max_batch_size=args.batch
    ) as engine:
        eager = measure(engine, plain, processor, args, timed_forwards=True)
        cases = build_cases(args.requests, args.new_tokens, True)
        reqs = engine_requests(processor, cases)
        in_proc, over_http, overhead, round_trip, decode = http_overhead(
            engine, cases * 2, reqs * 2, new_tokens=1
        )
    compiled, compile_s, compiled_step = None, 0.0, False
    if args.compile:
        start = time.perf_counter()  # the constructor compiles
        with LocalInferenceEngine(
            model, processor, device=args.device, max_batch_size=args.batch, compile_decode=True
        ) as engine:
            compile_s = time.perf_counter() - start
            compiled_step = isinstance(engine._worker._step_forward, CompiledStep)
            compiled = measure(engine, plain, processor, args, timed_forwards=False)

    if compiled is not None:  # both tables against generate's best time in either phase
        for a, b in zip(eager, compiled, strict=True):
            a.generate_s = b.generate_s = min(a.generate_s, b.generate_s)
    print(
        f"model: {source}; device {args.device}; torch threads {args.threads}; engine batch {args.batch}"
    )
    print_table("engine (default: uncompiled decode steps)", eager)
    print(
        "engine forward calls: "
        + "; ".join(
            f"{r.name} {r.calls.get('prefill_batches', 0)} prefills + "
            f"{r.calls.get('decode_steps', 0)} decode steps "
            f"({r.calls.get('decode_rows', 0) / max(1, r.calls.get('decode_steps', 0)):.1f} rows each)"
            for r in eager
        )
    )
    if compiled is not None:
        state = "compiled" if compiled_step else "NOT compiled (see the warning above)"
        print_table(
            f"engine with compile_decode=True (vlrollout serve --compile): decode steps "
            f"{state}; building the engine took {compile_s:.1f} s (compiling)",
            compiled,
        )
    print(
        "HTTP (SGLang /generate with a PNG image, one at a time, 1 new token): in-process "
        f"{in_proc * 1e3:.1f} ms, over HTTP {over_http * 1e3:.1f} ms, overhead "
        f"{overhead * 1e3:.1f} ms/request (medians of {2 * args.requests} paired requests)"
    )
    print(
        f"HTTP fixed costs: GET /health round trip {round_trip * 1e3:.2f} ms; server-side PNG "
        f"decode + image processor {decode * 1e3:.2f} ms per image"
    )
    w = worst(eager)
    line = (
        f"default {w.generate_s / w.engine_s:.2f}x against {w.target:.1f}x ({w.name}; "
        f"forward-call bound {w.generate_s / w.forward_s:.2f}x)"
    )
    if compiled is not None:
        c = worst(compiled)
        line = (
            f"compile_decode {c.generate_s / c.engine_s:.2f}x against {c.target:.1f}x "
            f"({c.name}); " + line
        )
    headline = (
        "headline engine/generate tokens/s, the case furthest below or closest to its target: "
        + line
    )
    print(headline)
    tables = [readme_table("default engine (uncompiled decode steps)", eager)]
    if compiled is not None:
        tables.append(
            readme_table(
                f"compile_decode=True (vlrollout serve --compile): decode steps {state}; "
                f"building the engine (compiling) took {compile_s:.1f} s",
                compiled,
            )
        )
    tables.append(
        record.Table(
            ["HTTP (SGLang /generate, PNG image, 1 new token)", "ms"],
            [
                ["in-process agenerate, per request", f"{in_proc * 1e3:.1f}"],
                ["over HTTP, per request", f"{over_http * 1e3:.1f}"],
                ["overhead per request (median of paired differences)", f"{overhead * 1e3:.1f}"],
                ["of it: GET /health round trip", f"{round_trip * 1e3:.2f}"],
                ["of it: server-side PNG decode + image processor", f"{decode * 1e3:.2f}"],
            ],
            title=f"medians of {2 * args.requests} paired requests",
        )
    )
    numbers = {
        "default": [vars(r) for r in eager],
        "compiled": [vars(r) for r in compiled] if compiled is not None else None,
        "compile_s": compile_s,
        "http_ms": {
            "in_process": in_proc * 1e3,
            "over_http": over_http * 1e3,
            "overhead": overhead * 1e3,
            "health": round_trip * 1e3,
            "decode": decode * 1e3,
        },
    }
    mode = (
        f"quick: {args.requests} requests, {args.new_tokens} new tokens, {args.repeat} run"
        if args.quick
        else "default"
    )
    notes = [
        f"model: {source}; device {args.device}; torch threads {args.threads}; engine batch "
        f"{args.batch}; best of {args.repeat} timed runs per case; both tables use generate's "
        "best time of either phase"
    ]
    record.write(started.record(tables, headline, numbers, mode=mode, notes=notes), args.record_dir)


if __name__ == "__main__":
    from entry import run

    run(main)
