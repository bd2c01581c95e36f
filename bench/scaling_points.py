"""The engine and transformers ``generate`` measured side by side, each side in its own process.

``run_sides`` (called by ``bench_scaling.py`` once per shape) starts one child process per side
(this file with the side's JSON job on the command line); each loads the shape's folder once
and then runs what the parent asks on stdin, one point at a time (progress goes to stderr).
Each side has its own process, so neither side's allocations, caches or threads are in the
other's peak memory; both stay loaded for the whole shape, so their runs can be interleaved:

1. **peak run**, each side in turn: prepare the point's inputs, free what earlier points left
   (``gc`` and ``malloc_trim``), reset the peak and run once. This run gives the peak memory
   and the images encoded, and is not timed: after the trim it faults its memory back in.
2. **timed runs**: ``repeats`` a side (3; fewer at the largest shapes, as the record's plan
   says), in :func:`run_order`: the sides take turns and swap who goes first every round, so
   load from other work on the machine hits both alike. No trim or peak reset between them.
   Each time is the median over a side's timed runs (:func:`timing_points`).

For one point (``tokens`` image tokens per image, ``images`` images per prompt, a group of
``group`` samples of ``new_tokens`` tokens each, temperature 1):

- **prompt** (engine process): a fresh ``PreparedPromptCache`` acquires the item once per group
  member, concurrently, as a GRPO group's episodes do: seconds for the whole group, how many
  preparations ran (the cache's misses: 1 when the group shares one) and the prepared bytes.
- **engine**: the group's requests (``build_request``, the workflows' request builder) sent at
  once to a ``LocalInferenceEngine``; **generate**: one processor batch of the prompt and
  ``model.generate(num_return_sequences=group)``, what a user writes instead. ``time/total`` is
  the group's wall time; ``time/prefill`` the time until the group's first tokens exist (the
  engine: the latest time-to-first-token of the group's responses; ``generate``: a streamer's
  second call, the first after the prompt); ``time/decode`` the rest, and
  ``time/decode_per_token`` that over ``new_tokens - 1`` steps.
- **peak_rss**: the process's peak resident memory during the peak run (``/proc/self/status``
  VmHWM, reset before the run), and ``peak_rss_extra``: that peak above the resident memory
  just before the run (the model and libraries loaded). On CUDA also ``peak_device``
  (``torch.cuda.max_memory_allocated``).
- **images_encoded**: images the vision tower encoded during the peak run (rows it saw over
  rows per image), which is 1 per distinct image when a group's prefill shares the encoding.

    .venv/bin/python bench/scaling_points.py '{"side": "engine", "shape": "tiny", ...}'
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from areal.api.cli_args import GenerationHyperparameters
from scaling_shapes import image_for_tokens, processor_kwargs, shape

from vlrollout import image_sharing
from vlrollout.engine import LocalInferenceEngine
from vlrollout.processors import AutoProcessorPreprocessor, PreparedPromptCache
from vlrollout.processors.cache import prepared_nbytes
from vlrollout.workflows.steps import build_request

QUESTION = "Describe the picture in one sentence."


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- memory ---------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak(device: str) -> int:
    """Free what earlier points left, reset the peak to the current resident memory (and on CUDA
    ``device``'s allocator peak) and return the resident bytes. ``clear_refs`` 5 resets VmHWM
    (Linux 4.0 and later)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    return _status_kib("VmRSS") * 1024


def peak_rss() -> int:
    return _status_kib("VmHWM") * 1024


# -- inputs ---------------------------------------------------------------------------------------


def item(shape_name: str, tokens: int, images: int) -> dict[str, Any]:
    """A data item of ``images`` distinct pictures of ``tokens`` image tokens each."""
    s = shape(shape_name)
    return {
        "messages": [{"role": "user", "content": "<image>" * images + QUESTION}],
        "images": [image_for_tokens(s, tokens, seed=j) for j in range(images)],
    }


def preprocessor(processor: Any, shape_name: str, tokens: int) -> AutoProcessorPreprocessor:
    return AutoProcessorPreprocessor(
        processor, processor_kwargs=processor_kwargs(shape(shape_name), tokens)
    )


async def prepare_group(pre: AutoProcessorPreprocessor, data: dict, group: int):
    """The group's ``acquire`` calls at once on a fresh cache: (seconds, preparations, prompt)."""
    cache = PreparedPromptCache(pre)
    start = time.perf_counter()
    got = await asyncio.gather(*(cache.acquire(data) for _ in range(group)))
    seconds = time.perf_counter() - start
    for key, _ in got:
        cache.release(key)
    return seconds, cache.misses, got[0][1]


class VisionCounter:
    """Counts the rows the vision tower sees (Qwen2-VL: patches; Idefics3: tiles)."""

    def __init__(self, model: torch.nn.Module) -> None:
        inner = getattr(model, "model", model)
        self.module = getattr(inner, "visual", None) or getattr(inner, "vision_model", None)
        self.rows = 0
        self._handle = None

    def __enter__(self) -> VisionCounter:
        def pre(_module, args, kwargs):
            first = args[0] if args else next(iter(kwargs.values()))
            self.rows += int(first.shape[0])

        if self.module is not None:
            self._handle = self.module.register_forward_pre_hook(pre, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()


def rows_per_image(prepared) -> float:
    """Vision-tower rows per image of a prepared prompt."""
    mm = prepared.multi_modal_input
    rows = mm["pixel_values"].shape[0]
    if mm["pixel_values"].dim() == 5:  # Idefics3: [batch, tiles, 3, H, W]
        rows = mm["pixel_values"].shape[1] * mm["pixel_values"].shape[0]
    return rows / max(1, prepared.num_images)


# -- the two sides --------------------------------------------------------------------------------


def gconfig(new_tokens: int) -> GenerationHyperparameters:
    return GenerationHyperparameters(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, greedy=False, temperature=1.0
    )


class EngineSide:
    def __init__(self, model, processor, device: str, max_batch: int) -> None:
        self.processor = processor
        self.engine = LocalInferenceEngine(
            model, processor, device=device, max_batch_size=max_batch
        ).initialize()
        self.model = self.engine.model

    def run(self, prepared, group: int, new_tokens: int) -> tuple[float, float]:
        """(total seconds, seconds to the group's first tokens). Each run starts without the
        image features an earlier run left in the engine's memo, so it encodes its images as a
        new request does (``generate`` encodes on every run; the points of one axis share
        their pictures)."""
        image_sharing.forget(self.model)
        reqs = [
            build_request(prepared, gconfig(new_tokens), self.processor.tokenizer)
            for _ in range(group)
        ]

        async def go() -> tuple[float, float]:
            start = time.perf_counter()
            resps = await asyncio.gather(*(self.engine.agenerate(r) for r in reqs))
            return time.perf_counter() - start, max(r.ttft for r in resps)

        return asyncio.run(go())

    def close(self) -> None:
        self.engine.destroy()


class StepClock:
    """A ``generate`` streamer that only notes when it is called: once with the prompt, then once
    per sampled step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


class GenerateSide:
    def __init__(self, model, processor, device: str, max_batch: int) -> None:
        self.model, self.processor, self.device = model.to(device).eval(), processor, device

    def run(self, batch: dict, group: int, new_tokens: int) -> tuple[float, float]:
        """(total seconds, seconds to the first sampled tokens)."""
        pad = self.processor.tokenizer.pad_token_id
        clock = StepClock()
        start = time.perf_counter()
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with torch.no_grad():
            self.model.generate(
                **batch,
                num_return_sequences=group,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=1.0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=pad,
                streamer=clock,
            )
        end = time.perf_counter()
        first = clock.times[1] if len(clock.times) > 1 else end
        return end - start, first - start

    def close(self) -> None:
        pass


def generate_batch(pre: AutoProcessorPreprocessor, prepared, data: dict) -> dict:
    """The processor's batch of one prompt (the same chat-templated text and images), as a
    user builds it before calling ``generate``; on the host, as the engine's prepared prompt is
    (each side's timed run copies its inputs to the device)."""
    return dict(
        pre.processor(
            text=[prepared.prompt_text],
            images=[data["images"]],
            return_tensors="pt",
            **pre.processor_kwargs,
        )
    )


# -- one point ------------------------------------------------------------------------------------


def point(path: str, job: dict, spec: dict, metric: str, value: float, unit: str) -> dict:
    fixed = {k: spec[k] for k in ("tokens", "group", "images", "new_tokens") if k != spec["axis"]}
    return {
        "path": path,
        "shape": job["shape"],
        "axis": spec["axis"],
        "x": spec[spec["axis"]] if spec["axis"] != "size" else job["params"],
        "metric": metric,
        "value": value,
        "unit": unit,
        "fixed": fixed,
    }


def run_order(sides: list[str], repeats: int) -> list[str]:
    """The order of the timed runs: the sides take turns, and who goes first swaps every round
    (engine, generate, generate, engine, engine, ...), so a load that rises or falls during a
    point slows both sides alike."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return [s for r in range(repeats) for s in (sides if r % 2 == 0 else sides[::-1])]


def timing_points(job: dict, spec: dict, runs: list[tuple[float, float]]) -> list[dict]:
    """One side's time points of one point from its timed runs' (total, prefill) seconds: each
    time the median over the runs, ``tokens_per_s`` from the median total."""
    if not runs:
        raise ValueError(f"no timed run for {job['side']} at {spec}")
    name, group, new = job["side"], spec["group"], spec["new_tokens"]
    total = statistics.median(t for t, _ in runs)
    decode = statistics.median(max(t - p, 0.0) for t, p in runs)
    return [
        point(name, job, spec, "time/total", total, "s"),
        point(name, job, spec, "tokens_per_s", group * new / total, "tok/s"),
        point(name, job, spec, "time/prefill", statistics.median(p for _, p in runs), "s"),
        point(name, job, spec, "time/decode", decode, "s"),
        point(name, job, spec, "time/decode_per_token", decode / max(1, new - 1), "s"),
    ]


class Worker:
    """One side of one shape, in the child process: the model loaded once, the current point's
    inputs kept between its peak run and its timed runs."""

    def __init__(self, job: dict) -> None:
        if job.get("threads"):
            torch.set_num_threads(job["threads"])
        self.job = job
        model, self.processor = load(job)
        cls = EngineSide if job["side"] == "engine" else GenerateSide
        self.side = cls(model, self.processor, job["device"], job["max_batch"])
        self.pres: dict[int, AutoProcessorPreprocessor] = {}
        self.inputs: tuple[int, Any] | None = None
        self.warm_up()

    def preprocessor_for(self, tokens: int) -> AutoProcessorPreprocessor:
        if tokens not in self.pres:
            self.pres[tokens] = preprocessor(self.processor, self.job["shape"], tokens)
        return self.pres[tokens]

    def warm_up(self) -> None:
        """One run of the smallest point's prompt (group 1, 2 new tokens), neither timed nor
        recorded: a process's first run pays one-time costs (allocator pools, the first
        forward's set-up, lazy kernel loading on CUDA) that would land in its first point's
        peak memory. The engine's memo of its image is dropped by the next run."""
        if not self.job["points"]:
            return
        tokens = min(spec["tokens"] for spec in self.job["points"])
        pre, data = self.preprocessor_for(tokens), item(self.job["shape"], tokens, 1)
        _, _, prepared = asyncio.run(prepare_group(pre, data, 1))
        engine = self.job["side"] == "engine"
        self.side.run(prepared if engine else generate_batch(pre, prepared, data), 1, 2)

    def peak(self, index: int) -> list[dict]:
        """Prepare the point's inputs, reset the peak, run once (untimed: it faults in the
        memory the timed runs reuse) and return the prompt and memory points."""
        job, spec = self.job, self.job["points"][index]
        pre = self.preprocessor_for(spec["tokens"])
        data = item(job["shape"], spec["tokens"], spec["images"])
        seconds, prepares, prepared = asyncio.run(prepare_group(pre, data, spec["group"]))
        name, out = job["side"], []
        if name == "engine":
            out += [
                point("prompt", job, spec, "time/prepare_group", seconds, "s"),
                point("prompt", job, spec, "prepares_per_group", prepares, "count"),
                point("prompt", job, spec, "bytes", prepared_nbytes(prepared), "B"),
            ]
        inputs = prepared if name == "engine" else generate_batch(pre, prepared, data)
        self.inputs = (index, inputs)
        before = reset_peak(job["device"])
        with VisionCounter(self.side.model) as counter:
            self.side.run(inputs, spec["group"], spec["new_tokens"])
        peak = peak_rss()
        encoded = counter.rows / rows_per_image(prepared)
        out += [
            point(name, job, spec, "peak_rss", peak, "B"),
            point(name, job, spec, "peak_rss_extra", max(peak - before, 0), "B"),
            point(name, job, spec, "images_encoded", encoded, "count"),
        ]
        if job["device"].startswith("cuda"):
            peak_device = torch.cuda.max_memory_allocated(job["device"])
            out.append(point(name, job, spec, "peak_device", peak_device, "B"))
        return out

    def timed(self, index: int) -> tuple[float, float]:
        """One timed run of the point whose peak run came last: (total, prefill) seconds."""
        if self.inputs is None or self.inputs[0] != index:
            raise RuntimeError(f"timed run of point {index} before its peak run")
        spec = self.job["points"][index]
        gc.collect()
        return self.side.run(self.inputs[1], spec["group"], spec["new_tokens"])

    def close(self) -> None:
        self.side.close()


def serve(job: dict) -> None:
    """The child's loop: one JSON command a stdin line (``{"op": "peak" | "time", "index": i}``),
    one ``REPLY <json>`` stdout line each; stdin's end closes the side."""
    worker = Worker(job)
    print("REPLY " + json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            got = worker.peak(cmd["index"]) if cmd["op"] == "peak" else worker.timed(cmd["index"])
            print("REPLY " + json.dumps(got), flush=True)
    finally:
        worker.close()


# -- the parent: both sides side by side ----------------------------------------------------------


class SideProcess:
    """A child process running :func:`serve` for one side's job."""

    def __init__(self, job: dict) -> None:
        self.job = job
        self.proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()

    def _read(self) -> Any:
        seen: list[str] = []
        for line in self.proc.stdout:
            if line.startswith("REPLY "):
                return json.loads(line.removeprefix("REPLY "))
            seen.append(line)
        code = self.proc.wait()
        tail = "".join(seen)[-1500:]
        raise RuntimeError(
            f"{self.job['side']} on {self.job['shape']} failed (exit {code}): {tail}"
        )

    def ask(self, op: str, index: int) -> Any:
        try:
            self.proc.stdin.write(json.dumps({"op": op, "index": index}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child has died: _read reports its exit status and output
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


def run_sides(jobs: dict[str, dict], repeats: int, failures: list[str], log=log) -> list[dict]:
    """Every point of one shape on each side in ``jobs`` (engine, generate or both), side by
    side: per point each side's peak run, then ``repeats`` timed runs a side in
    :func:`run_order`. A side that fails is noted in ``failures`` and the other carries on."""
    alive: dict[str, SideProcess] = {}

    def fail(side: str, e: RuntimeError) -> None:
        failures.append(f"{side} on {jobs[side]['shape']}: {e}")
        log(f"FAILED {side} on {jobs[side]['shape']}: {e}")
        if (proc := alive.pop(side, None)) is not None:
            proc.close()

    def ask(side: str, op: str, index: int) -> Any:
        try:
            return alive[side].ask(op, index)
        except RuntimeError as e:
            fail(side, e)
            return None

    for side, job in jobs.items():
        try:
            alive[side] = SideProcess(job)
        except RuntimeError as e:
            fail(side, e)
    out: list[dict] = []
    try:
        for index, spec in enumerate(next(iter(jobs.values()))["points"]):
            start = time.perf_counter()
            for side in list(alive):
                out += ask(side, "peak", index) or []
            runs: dict[str, list[tuple[float, float]]] = {side: [] for side in alive}
            for side in run_order(list(alive), repeats):
                if side in alive and (got := ask(side, "time", index)) is not None:
                    runs[side].append(tuple(got))
            for side in alive:
                out += timing_points(jobs[side], spec, runs[side])
            log(
                f"  {'+'.join(alive) or 'no side':15s} {spec['axis']:6s} tokens={spec['tokens']} "
                f"group={spec['group']} images={spec['images']}: "
                f"{time.perf_counter() - start:.1f} s"
            )
    finally:
        for proc in alive.values():
            proc.close()
    return out


def load(job: dict):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder = Path(job["folder"])
    model = AutoModelForImageTextToText.from_pretrained(
        folder, dtype=getattr(torch, job["dtype"]), local_files_only=True
    )
    processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
    return model, processor


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit("usage: scaling_points.py JOB_JSON  (commands on stdin; see serve)")
    serve(json.loads(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
