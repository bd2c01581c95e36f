"""Episode overhead on real photos: vlrollout's ``VisionRLVRWorkflow`` vs AReaL's, against a floor.

Run: ``.venv/bin/python bench/bench_workflow_overhead.py`` (about 2 min on 2 shared CPU cores;
``--quick``: one photo, about 25 s; ``--sizes 640x480,2048x1536``, ``--no-samples``, ``--json PATH``
for the raw samples). Everything runs in one process and one event loop; every round times each
column once per photo in a shuffled order (seeded), so machine noise and after-effects (AReaL's
episode frees hundreds of MB) hit all columns alike. ``torch.set_num_threads(1)``: the processor
and packing use one core, the reward process pool (one worker on a 2-core machine) the other.

Set-up, identical for both workflows:

- processor: Qwen2.5-VL built offline (:func:`vlrollout.testing.offline_processors.build_qwen2_5_vl`) with
  Qwen2.5-VL's / AReaL's defaults ``min_pixels=3136``, ``max_pixels=12845056``, patch 14, merge 2;
- engine: :class:`vlrollout.testing.scripted_engine.ScriptedEngine`, zero latency, a fixed 8-token answer;
- reward: :func:`zero_reward` (module level, picklable), through AReaL's ``AsyncRewardWrapper``
  process pool in both workflows (ours wraps the same pool).

Inputs: photos derived from matplotlib's ``grace_hopper.jpg`` (see ``bench/images.py``) saved as
JPEG quality 90, plus ``assets/samples`` images when present.

- AReaL gets what its dataset code produces (``areal/dataset/clevr_count_70k.py``): ``images`` as
  already-decoded PIL images (decoding is not in its time) and ``messages`` as the chat-templated
  string with ``<|vision_start|><|image_pad|><|vision_end|>`` in it.
- Ours gets the file path and chat messages; it decodes the file inside the episode.

Columns: **floor** = decode the file + one processor call with the same settings (what any
workflow must spend per distinct image), timed in the event loop's worker thread where ours
prepares too (see :meth:`Bench.floor`); **ours** = one episode with a cold prepared-prompt cache
(``wf.ctx.prompts.clear()`` before every repetition); **AReaL** = one episode. Each value is the
median over repetitions (AReaL runs in fewer rounds: its groups take seconds). The group table
wraps both in AReaL's ``GroupedRolloutWorkflow(wf, 8)`` and times one whole group. Both
workflows' prompts are checked to give identical ``input_ids``.

Targets (photos >= 0.3 MP): one episode <= 1.5x floor, a group of 8 <= 2x floor.
"""

from __future__ import annotations

import argparse
import asyncio
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

from areal.api.cli_args import GenerationHyperparameters  # noqa: E402
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow  # noqa: E402
from areal.infra.workflow_executor import check_trajectory_format  # noqa: E402
from areal.workflow.vision_rlvr import VisionRLVRWorkflow as ArealVisionRLVRWorkflow  # noqa: E402
from images import DEFAULT_SIZES, QUICK_SIZES, Photo, bench_photos  # noqa: E402
from PIL import Image  # noqa: E402

from vlrollout.testing.offline_processors import build_qwen2_5_vl  # noqa: E402
from vlrollout.testing.scripted_engine import ScriptedEngine  # noqa: E402
from vlrollout.workflows import VisionRLVRWorkflow  # noqa: E402

MIN_PIXELS, MAX_PIXELS = 3136, 12845056  # Qwen2.5-VL preprocessor_config.json / AReaL defaults
QUESTION = "What is shown in this picture? Answer in one sentence."
ANSWER = "A woman in a naval uniform."
AREAL_IMAGE_TOKEN = "<|vision_start|><|image_pad|><|vision_end|>"  # clevr_count_70k.py
TARGET_MP = 0.3
TARGET_SINGLE, TARGET_GROUP = 1.5, 2.0


def zero_reward(prompt, completions, prompt_ids, completion_ids, **task_data) -> float:
    """A trivial picklable reward: the workflow's overhead, not the reward's, is measured."""
    return 0.0


def our_messages() -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]


def our_item(photo: Photo) -> dict:
    """What our workflow gets: the file path and chat messages."""
    return {"messages": our_messages(), "images": [str(photo.path)], "answer": ANSWER}


def decode(path: Path) -> Image.Image:
    """Decode an image file to RGB, as the floor and AReaL's dataset code do."""
    image = Image.open(path)
    image.load()
    return image if image.mode == "RGB" else image.convert("RGB")


def areal_item(tokenizer, photo: Photo) -> dict:
    """What AReaL's workflow gets from its dataset code: decoded images, templated text."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": AREAL_IMAGE_TOKEN + QUESTION}],
        add_generation_prompt=True,
        tokenize=False,
    )
    return {"messages": text, "images": [decode(photo.path)], "answer": ANSWER}


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


class Bench:
    """The workflows, engine and processor under test; all timing happens on one event loop."""

    def __init__(self, group_size: int) -> None:
        self.processor = build_qwen2_5_vl(MIN_PIXELS, MAX_PIXELS)
        self.tokenizer = self.processor.tokenizer
        gconfig = GenerationHyperparameters(max_new_tokens=16)
        answer = self.tokenizer.encode(ANSWER, add_special_tokens=False)[:7]
        self.engine = ScriptedEngine([answer + [self.tokenizer.eos_token_id]])
        self.ours = VisionRLVRWorkflow(zero_reward, gconfig, self.tokenizer, self.processor)
        self.areal = ArealVisionRLVRWorkflow(
            zero_reward, gconfig, self.tokenizer, self.processor, enable_thinking=False
        )
        log = logging.getLogger("bench_workflow_overhead")
        self.ours_group = GroupedRolloutWorkflow(self.ours, group_size, log)
        self.areal_group = GroupedRolloutWorkflow(self.areal, group_size, log)
        self.floor_text = self.processor.apply_chat_template(
            our_messages(), tokenize=False, add_generation_prompt=True
        )

    def _floor_call(self, path: Path) -> tuple[float, object]:
        t0 = time.perf_counter()
        # Nested images, text as a batch of one: the call our preprocessor makes.
        out = self.processor(text=[self.floor_text], images=[[decode(path)]], return_tensors="pt")
        return time.perf_counter() - t0, out

    async def floor(self, photo: Photo) -> float:
        """Decode the file + one processor call: the least any workflow spends per image.

        Timed inside the event loop's default worker thread, where our preparation runs too:
        glibc gives each thread its own malloc arena, and on this machine the processor call with
        its large temporary arrays measured ~20% faster in a worker thread than on the main thread
        (``MALLOC_ARENA_MAX=1`` removed the gap). A main-thread floor would flatter ours.
        """
        gc.collect()
        # The outputs are handed back and dropped here, on the main thread, as a workflow's are.
        elapsed, _ = await asyncio.to_thread(self._floor_call, photo.path)
        return elapsed

    async def episode(self, workflow, item: dict, cold: bool = True) -> tuple[float, object]:
        """Seconds for one ``arun_episode`` (ours starts from an empty prompt cache)."""
        if cold:
            self.ours.ctx.prompts.clear()
        gc.collect()
        t0 = time.perf_counter()
        out = await workflow.arun_episode(self.engine, item)
        elapsed = time.perf_counter() - t0
        self.engine.requests.clear()
        return elapsed, out

    async def check_same_prompt(self, photo: Photo) -> None:
        """Both workflows must send the engine the same tokens (same work), and ours must pass
        AReaL's trajectory check. Also warms up the reward process pool and the thread pool."""
        self.ours.ctx.prompts.clear()
        traj = await self.ours.arun_episode(self.engine, our_item(photo))
        if traj is None or not check_trajectory_format(traj):
            raise RuntimeError(f"our workflow returned no valid trajectory: {self.ours.ledger}")
        await self.areal.arun_episode(self.engine, areal_item(self.tokenizer, photo))
        ours, areal = (list(r.input_ids) for r in self.engine.requests[-2:])
        if ours != areal:
            raise RuntimeError(
                f"prompts differ: ours has {len(ours)} tokens, AReaL's {len(areal)}; fix the items"
            )
        self.engine.requests.clear()


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """First column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    for cells in [header, *rows]:
        padded = (c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))  # fmt: skip
        print("  ".join(padded))


def geomean(xs: list[float]) -> float:
    return statistics.geometric_mean(xs) if xs else float("nan")


Samples = dict[Photo, list[float]]


@dataclass(frozen=True)
class Reps:
    """Repetitions: ours and the floor are cheap, AReaL's groups cost seconds per large photo."""

    single: int  # rounds of single episodes (floor + ours each round)
    areal: int  # of which AReaL also runs in this many, spread evenly
    group: int  # rounds of groups (floor + our group each round)
    areal_group: int  # of which AReaL's group also runs in this many


def spread(n: int, total: int) -> set[int]:
    """``n`` round indices spread evenly over ``range(total)`` (where the costly AReaL runs go)."""
    n = min(n, total)
    return {round(i * (total - 1) / max(1, n - 1)) for i in range(n)} if n else set()


async def measure(bench: Bench, photos: list[Photo], reps: Reps) -> dict[str, Samples]:
    """Interleaved rounds: per photo the floor, ours and (in some rounds) AReaL; then groups.

    The order within a round is shuffled (seeded), so no column always runs right after
    another (AReaL's episode leaves hundreds of MB of freed memory behind it).
    """
    order = random.Random(0)
    await bench.check_same_prompt(photos[0])
    areal_items = {p: areal_item(bench.tokenizer, p) for p in photos}
    # Setup objects (torch, transformers, the processor) never die: freezing them keeps the
    # gc.collect() before each timing cheap and out of the timed region.
    gc.collect()
    gc.freeze()
    keys = ("floor", "ours", "areal", "g_ours", "g_areal")
    out: dict[str, Samples] = {k: {p: [] for p in photos} for k in keys}

    async def one_round(r: int, p: Photo, ours_key: str, ours_wf, areal_key: str, areal_wf, with_areal: bool) -> None:  # fmt: skip
        steps = [
            ("floor", lambda: bench.floor(p)),
            (ours_key, lambda: bench.episode(ours_wf, our_item(p))),
            (areal_key, lambda: bench.episode(areal_wf, areal_items[p], cold=False)),
        ]
        if not with_areal:
            steps.pop()
        order.shuffle(steps)
        for key, run in steps:
            result = await run()
            out[key][p].append(result if key == "floor" else result[0])
            del result  # no trajectory stays alive into the next timing

    areal_rounds = spread(reps.areal, reps.single)
    for r in range(reps.single):
        for p in photos:
            await one_round(r, p, "ours", bench.ours, "areal", bench.areal, r in areal_rounds)
    areal_rounds = spread(reps.areal_group, reps.group)
    for r in range(reps.group):
        for p in photos:
            await one_round(
                r, p, "g_ours", bench.ours_group, "g_areal", bench.areal_group, r in areal_rounds
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small photo, few repetitions")
    parser.add_argument("--reps", type=int, default=None, help="single-episode repetitions")
    parser.add_argument("--group-reps", type=int, default=None, help="group repetitions")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--sizes", default=None, help="photo sizes, e.g. 640x480,2048x1536")
    parser.add_argument("--no-samples", action="store_true", help="skip assets/samples images")
    parser.add_argument("--json", type=Path, default=None, help="write raw samples (s) here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("bench_workflow_overhead").setLevel(logging.ERROR)
    sizes = QUICK_SIZES[:1] if args.quick else DEFAULT_SIZES
    if args.sizes:
        sizes = [tuple(int(v) for v in wh.split("x")) for wh in args.sizes.split(",")]
    reps = Reps(5, 5, 3, 2) if args.quick else Reps(9, 9, 7, 3)
    if args.reps:
        reps = Reps(args.reps, args.reps, reps.group, reps.areal_group)
    if args.group_reps:
        reps = Reps(
            reps.single, reps.areal, args.group_reps, min(args.group_reps, reps.areal_group)
        )

    tmp = tempfile.TemporaryDirectory(prefix="bench_photos_")
    try:
        photos = bench_photos(
            tmp.name, sizes=sizes, include_samples=not (args.quick or args.no_samples)
        )
        bench = Bench(args.group_size)
        t_start = time.perf_counter()
        # AReaL installs uvloop's policy on import, as in production; one loop for every timing.
        res = asyncio.run(measure(bench, photos, reps))
    finally:
        tmp.cleanup()
    elapsed = time.perf_counter() - t_start
    if args.json:
        raw = {k: {p.label: v[p] for p in photos} for k, v in res.items()}
        args.json.write_text(json.dumps(raw, indent=1))

    g = args.group_size
    single_rows, group_rows = [], []
    big_single, big_group, big_ratio_single, big_ratio_group = [], [], [], []
    for p in photos:
        f, o, a = (median_ms(res[k][p]) for k in ("floor", "ours", "areal"))
        go, ga = median_ms(res["g_ours"][p]), median_ms(res["g_areal"][p])
        big = p.megapixels >= TARGET_MP
        mark_s = ("ok" if o / f <= TARGET_SINGLE else "MISS") if big else "-"
        mark_g = ("ok" if go / f <= TARGET_GROUP else "MISS") if big else "-"
        single_rows.append([p.label, f"{p.megapixels:.2f}", f"{f:.1f}", f"{o:.1f}", f"{a:.1f}",
                            fmt_ratio(o / f), fmt_ratio(a / f), fmt_ratio(a / o), mark_s])  # fmt: skip
        group_rows.append([p.label, f"{f:.1f}", f"{go:.1f}", f"{ga:.1f}", fmt_ratio(go / f),
                           fmt_ratio(ga / f), fmt_ratio(ga / go), mark_g])  # fmt: skip
        if big:
            big_single.append(o / f)
            big_group.append(go / f)
            big_ratio_single.append(a / o)
            big_ratio_group.append(ga / go)

    print(f"Qwen2.5-VL processor (min_pixels={MIN_PIXELS}, max_pixels={MAX_PIXELS}, patch 14, "
          f"merge 2), zero-latency ScriptedEngine, trivial reward via AsyncRewardWrapper; "
          f"torch threads=1; medians of {reps.single} (AReaL {reps.areal}) episodes and "
          f"{reps.group} (AReaL {reps.areal_group}) groups; "
          f"{elapsed:.0f} s measuring")  # fmt: skip
    ratios = ["ours/floor", "AReaL/floor", "AReaL/ours", "target"]
    print_table(
        f"One episode, ms (target ours/floor <= {TARGET_SINGLE}x on photos >= {TARGET_MP} MP)",
        ["image", "MP", "floor", "ours", "AReaL", *ratios],
        single_rows,
    )
    print_table(
        f"Group of {g} (GroupedRolloutWorkflow), ms per group (target ours/floor <= {TARGET_GROUP}x)",
        ["image", "floor", "ours", "AReaL", *ratios],
        group_rows,
    )
    print()
    print(f"headline (geomean, photos >= {TARGET_MP} MP): ours/floor single {geomean(big_single):.2f}x, "
          f"group of {g} {geomean(big_group):.2f}x; AReaL/ours single {geomean(big_ratio_single):.2f}x, "
          f"group of {g} {geomean(big_ratio_group):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
