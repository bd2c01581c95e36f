"""The trainer's points of the scaling benchmark: GRPO step time by phase and peak memory.

Each point is one short ``vlrollout train`` run (``examples/train_grounding.yaml`` with overrides)
in its own process, on a model that ``scaling_shapes.build_model`` saves, over items whose images
hold about ``image_tokens`` image tokens each (``scaling_shapes.image_for_tokens``, one distinct
image per item). Two sweeps:

- size: every shape marked ``trainable`` (full training, or LoRA where ``shape.lora``) at one
  group size, ``encode_images_once`` on (the default);
- group: group sizes (``gconfig.n_samples``) at one shape, each run twice: with
  ``vlrollout.encode_images_once=true`` (a distinct image encoded once per forward) and with
  ``false`` (the per-copy reference: AReaL's packing by length, every copy encoded).

Step times are the means of ``metrics.jsonl``'s ``time/*`` over the steps after the first (the
first includes warm-up). Every run recomputes the proximal logprobs
(``actor.recompute_logprob=true``) so ``time/logp`` is a forward pass, as in
``bench/bench_train_step.py``. Peak memory is the trainer process's peak resident set size
(its ``VmHWM``, polled: :func:`run_measured`), the in-process engine included. On a GPU
(``device="cuda"``) the actor and the engine run on it; the peak RSS is then host memory, and the
GPU's peak is ``peak_device`` where ``metrics.jsonl`` carries :data:`DEVICE_PEAK`.

    .venv/bin/python bench/scaling_trainer.py --smoke        # one short run (about 30 s)
    .venv/bin/python bench/scaling_trainer.py                # both sweeps (about 10 min)
    .venv/bin/python bench/scaling_trainer.py --device cuda  # on a GPU: every trainable shape
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scaling_shapes

from vlrollout.engine.checks import check_device
from vlrollout.errors import ConfigError
from vlrollout.train.device import DEVICE_PEAK

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "train_grounding.yaml"
PHASES = ("time/rollout", "time/logp", "time/update", "time/weight_sync", "time/step")
GROUP_SHAPE = "tiny"
"""The shape of the group sweep (the smallest trainable shape when it is absent)."""
SIZE_GROUP = 2
"""The group size of the size sweep."""
CPU_SKIPPED = {
    "smolvlm-256m": "LoRA on a group needs over 10 GiB and minutes a step on these shared cores: "
    "Idefics3 splits each image into 5 tiles (320 tokens at the folder's 1,024-pixel edge) and "
    "the trainer encodes every copy",
}
"""Trainable shapes the CPU sweeps leave out, with the reason printed (they run on a GPU)."""

Point = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    """One train run's size.

    Attributes:
        steps: Training steps; the first is warm-up and not reported.
        batch: Items per step (distinct images).
        max_new_tokens: Tokens generated per episode.
        image_tokens: Image tokens per item's image (about; the processor rounds).
        timeout_s: Longest a run may take.
    """

    steps: int = 3
    batch: int = 2
    max_new_tokens: int = 8
    image_tokens: int = 256
    timeout_s: int = 600


SETTINGS = Settings(steps=3, batch=1, image_tokens=256)
"""Both sweeps: a few hundred image tokens, so the vision tower's share matters; one item a
step, so the larger shapes fit the budget. The size sweep's run of the group sweep's shape is
the group sweep's run at :data:`SIZE_GROUP`."""
SMOKE = Settings(steps=2, batch=1, image_tokens=64, timeout_s=300)


@dataclass(frozen=True)
class Measured:
    """What one run measured: phase means over the steps after the first, peak RSS in bytes,
    the run's wall-clock seconds (start-up included) and, where ``metrics.jsonl`` reports it,
    the peak GPU memory in bytes (:func:`device_peak`)."""

    phases: dict[str, float]
    peak_rss: int
    seconds: float
    peak_device: int | None = None


class TrainRunError(RuntimeError):
    """A ``vlrollout train`` run of the benchmark failed; the message holds its stderr tail."""


POLL_S = 0.05
"""How often the child's ``VmHWM`` is read."""


def high_water_mark(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes (its peak resident set so far), or 0 once it has none."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie has released its memory map


def run_measured(
    cmd: Sequence[str], *, env: dict[str, str], cwd: Path, timeout_s: float
) -> tuple[int, int, str]:
    """Run ``cmd`` to its end; returns ``(exit status, peak RSS in bytes, stderr tail)``.

    The peak is the child's ``VmHWM`` (``/proc/PID/status``: the kernel's high-water mark of
    its resident set, which a sample cannot miss because it only grows), read every
    :data:`POLL_S` until the child exits; only growth in its last :data:`POLL_S` goes unseen.
    Not ``ru_maxrss``: Linux carries the parent's high-water mark into a forked child across
    ``exec``, so a large benchmark process would set the floor of every child's number.
    The child's own subprocesses are not counted. Output goes to files, not pipes, so a chatty
    child cannot block. A child still running after ``timeout_s`` is killed (status -9).
    """
    peak = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            peak = max(peak, high_water_mark(proc.pid))
            if time.monotonic() > deadline:
                proc.kill()
            time.sleep(POLL_S)
        err.seek(0)
        tail = err.read()[-4000:].decode(errors="replace")
    return proc.returncode, peak, tail


def phase_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean of each :data:`PHASES` time over the steps after the first (``metrics.jsonl`` rows).

    >>> rows = [{p: 9.0 for p in PHASES}, {p: 1.0 for p in PHASES}, {p: 2.0 for p in PHASES}]
    >>> phase_means(rows)["time/update"]
    1.5
    """
    if len(rows) < 2:
        raise ValueError(
            f"{len(rows)} step(s) in metrics.jsonl: need 2 or more (the first is warm-up)"
        )
    steady = rows[1:]
    missing = [p for p in PHASES if any(p not in r for r in steady)]
    if missing:
        raise ValueError(f"metrics.jsonl rows lack {missing}")
    return {p: statistics.fmean(float(r[p]) for r in steady) for p in PHASES}


def device_peak(rows: Sequence[dict[str, Any]]) -> int | None:
    """The largest :data:`DEVICE_PEAK` of the rows (bytes), or None where no row has it (the CPU).

    >>> device_peak([{DEVICE_PEAK: 5.0}, {DEVICE_PEAK: 7.0}, {}]), device_peak([{}])
    (7, None)
    """
    values = [r[DEVICE_PEAK] for r in rows if DEVICE_PEAK in r]
    return int(max(values)) if values else None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_items(folder: Path, shape: Any, count: int, tokens: int) -> Path:
    """``count`` grounding items, each with its own image of about ``tokens`` image tokens for
    ``shape``, as ``folder/items.jsonl`` (the images beside it); returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        image = scaling_shapes.image_for_tokens(shape, tokens, seed=i)
        path = folder / f"image{i}.png"
        image.save(path)
        w, h = image.size
        item = {
            "id": f"item{i}",
            "images": [str(path)],
            "task": "ground",
            "boxes": [[w // 4, h // 4, 3 * w // 4, 3 * h // 4]],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image"}, {"type": "text", "text": "Locate the object."}],
                }
            ],
        }
        lines.append(json.dumps(item))
    data = folder / "items.jsonl"
    data.write_text("\n".join(lines) + "\n")
    return data


def train_overrides(
    model: Path,
    data: Path,
    out: Path,
    settings: Settings,
    group: int,
    *,
    once: bool,
    lora: bool,
    device: str,
    dtype: str,
) -> list[str]:
    """``vlrollout train`` overrides of one run (``examples/train_grounding.yaml``'s keys).

    A micro-batch holds a whole group (``max_tokens_per_mb`` sized to it) in both modes, so the
    per-copy reference differs only by AReaL's packing by length and the copies it encodes.
    """
    tokens_per_group = group * (settings.image_tokens + 64 + settings.max_new_tokens)
    on_gpu = device.startswith("cuda")
    return [
        f"vlrollout.output={out}",
        f"actor.path={model}",
        f"total_train_steps={settings.steps}",
        f"train_dataset.path={data}",
        f"train_dataset.batch_size={settings.batch}",
        f"gconfig.n_samples={group}",
        f"gconfig.max_new_tokens={settings.max_new_tokens}",
        f"actor.mb_spec.max_tokens_per_mb={max(2048, tokens_per_group)}",
        "actor.recompute_logprob=true",
        f"actor.use_lora={str(lora).lower()}",
        f"actor.dtype={dtype if on_gpu else 'float32'}",
        f"vlrollout.encode_images_once={str(once).lower()}",
        f"vlrollout.engine.device={device}",
        f"vlrollout.engine.max_batch_size={max(8, group * settings.batch)}",
        "vlrollout.reward=giou",
        "vlrollout.eval_items=1",
        "vlrollout.eval_every=0",
        f"vlrollout.save_every={settings.steps + 1}",
        "vlrollout.progress=false",
    ]


def train_once(overrides: Sequence[str], out: Path, device: str, timeout_s: float) -> Measured:
    """One ``vlrollout train`` run in its own process; raises :class:`TrainRunError` on failure."""
    cmd = [sys.executable, "-m", "vlrollout.cli", "train", "--config", str(CONFIG), *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not device.startswith("cuda"):
        env["CUDA_VISIBLE_DEVICES"] = ""  # the actor too stays on the CPU
    started = time.monotonic()
    status, peak, stderr = run_measured(cmd, env=env, cwd=ROOT, timeout_s=timeout_s)
    seconds = time.monotonic() - started
    if status != 0:
        raise TrainRunError(f"vlrollout train exited {status}:\n{stderr}")
    rows = read_metrics(out / "metrics.jsonl")
    return Measured(phase_means(rows), peak, seconds, device_peak(rows))


def to_points(m: Measured, shape: str, axis: str, x: float, fixed: dict[str, Any]) -> list[Point]:
    """The contract's points (bench/bench_scaling.py) of one run: each phase and the peak RSS."""
    base = {"path": "train", "shape": shape, "axis": axis, "x": float(x), "fixed": dict(fixed)}
    out = [{**base, "metric": p, "value": v, "unit": "s"} for p, v in m.phases.items()]
    out.append({**base, "metric": "peak_rss", "value": float(m.peak_rss), "unit": "bytes"})
    if m.peak_device is not None:
        out.append(
            {**base, "metric": "peak_device", "value": float(m.peak_device), "unit": "bytes"}
        )
    return out


class Runner:
    """Runs the sweeps' train runs in one temporary folder, once per (shape, group, mode,
    settings), until ``budget_s`` has passed (later runs are skipped with a printed reason)."""

    def __init__(self, root: Path, device: str, budget_s: float) -> None:
        self.root, self.device = root, device
        self.deadline = time.monotonic() + budget_s
        self.done: dict[tuple, Measured | None] = {}
        self.data: dict[tuple[str, Settings], Path] = {}

    def run(self, shape: Any, group: int, once: bool, settings: Settings) -> Measured | None:
        key = (shape.name, group, once, settings)
        if key not in self.done:
            self.done[key] = self._run(shape, group, once, settings)
        return self.done[key]

    def _items(self, shape: Any, s: Settings) -> Path:
        if (shape.name, s) not in self.data:
            folder = self.root / f"data-{shape.name}-{len(self.data)}"
            self.data[shape.name, s] = write_items(folder, shape, s.batch * s.steps, s.image_tokens)
        return self.data[shape.name, s]

    def _run(self, shape: Any, group: int, once: bool, s: Settings) -> Measured | None:
        label = f"train {shape.name} group {group} {'once' if once else 'per-copy'}"
        label += f" ({s.image_tokens} image tokens{', LoRA' if shape.lora else ''})"
        if time.monotonic() > self.deadline:
            print(f"{label}: skipped (the trainer points' time budget is spent)", flush=True)
            return None
        out = self.root / f"run{len(self.done)}"
        overrides = train_overrides(
            scaling_shapes.build_model(shape),
            self._items(shape, s),
            out,
            s,
            group,
            once=once,
            lora=shape.lora,
            device=self.device,
            dtype=shape.dtype,
        )
        try:
            m = train_once(overrides, out, self.device, s.timeout_s)
        except TrainRunError as e:
            print(f"{label}: failed: {str(e).strip().splitlines()[-1]}", flush=True)
            return None
        print(
            f"{label}: {m.phases['time/step']:.2f} s/step (update {m.phases['time/update']:.2f}),"
            f" peak RSS {m.peak_rss / 2**30:.2f} GiB, run {m.seconds:.0f} s",
            flush=True,
        )
        return m


def fixed_of(s: Settings, shape: Any, device: str, once: bool, **more: Any) -> dict[str, Any]:
    """The ``fixed`` values of a point: every setting the run held constant."""
    return {
        "tokens": s.image_tokens,
        "images": 1,
        "encode_images_once": once,
        "lora": bool(shape.lora),
        "batch": s.batch,
        "steps": s.steps,
        "max_new_tokens": s.max_new_tokens,
        "device": device,
        **more,
    }


def ratio_points(shape: str, group: int, once: Measured, copies: Measured, fixed: dict) -> list:
    """The per-copy reference's peak as ``peak_rss_per_copy`` and the ratio ``peak_rss_ratio``
    (``encode_images_once`` over per-copy: below 1 is a saving), beside the once run's points;
    on a GPU the ``peak_device`` pair too."""
    base = {"path": "train", "shape": shape, "axis": "group", "x": float(group), "fixed": fixed}
    pairs = [("peak_rss", once.peak_rss, copies.peak_rss)]
    if once.peak_device is not None and copies.peak_device is not None:
        pairs.append(("peak_device", once.peak_device, copies.peak_device))
    out = []
    for name, a, b in pairs:
        out.append({**base, "metric": f"{name}_per_copy", "value": float(b), "unit": "bytes"})
        out.append({**base, "metric": f"{name}_ratio", "value": a / b, "unit": "ratio"})
    return out


def group_points(
    runner: Runner, shape: Any, group_sizes: Sequence[int], s: Settings
) -> list[Point]:
    """Each group size with ``encode_images_once`` and with the per-copy reference."""
    points: list[Point] = []
    for group in group_sizes:
        once = runner.run(shape, group, True, s)
        copies = runner.run(shape, group, False, s)
        fixed_once = fixed_of(s, shape, runner.device, True)
        if once:
            points += to_points(once, shape.name, "group", group, fixed_once)
        if copies:
            fixed = fixed_of(s, shape, runner.device, False)
            points += to_points(copies, shape.name, "group", group, fixed)
        if once and copies:
            points += ratio_points(shape.name, group, once, copies, fixed_once)
    return points


def size_points(runner: Runner, shapes: Sequence[Any], group: int, s: Settings) -> list[Point]:
    """Every shape at one group size, ``encode_images_once`` on; ``x`` is its parameter count."""
    points: list[Point] = []
    for shape in shapes:
        m = runner.run(shape, group, True, s)
        if m:
            x = scaling_shapes.parameter_count(scaling_shapes.build_model(shape))
            fixed = fixed_of(s, shape, runner.device, True, group=group)
            points += to_points(m, shape.name, "size", x, fixed)
    return points


def thin(group_sizes: Sequence[int]) -> list[int]:
    """The smallest, the middle and the largest group size of 2 or more: three points fit an
    exponent, every train run costs tens of seconds here, and GRPO needs a group of 2
    (``vlrollout train`` refuses ``gconfig.n_samples=1``).

    >>> thin([1, 2, 4, 8, 16]), thin([1, 2, 8])
    ([2, 4, 16], [2, 8])
    """
    sizes = sorted({g for g in group_sizes if g >= 2})
    if len(sizes) <= 3:
        return sizes
    return [sizes[0], sizes[(len(sizes) - 1) // 2], sizes[-1]]


def runnable(shapes: Sequence[Any], device: str) -> list[Any]:
    """The ``trainable`` shapes, less :data:`CPU_SKIPPED` on the CPU (each skip printed)."""
    out = []
    for shape in shapes:
        if not shape.trainable:
            continue
        if device == "cpu" and shape.name in CPU_SKIPPED:
            print(f"train {shape.name}: skipped on the CPU ({CPU_SKIPPED[shape.name]})", flush=True)
            continue
        out.append(shape)
    return out


def group_shape(shapes: Sequence[Any]) -> Any:
    """:data:`GROUP_SHAPE` among ``shapes``, else the first (smallest) of them."""
    return next((s for s in shapes if s.name == GROUP_SHAPE), shapes[0])


def trainer_points(
    shapes: Sequence[Any],
    group_sizes: Sequence[int],
    *,
    quick: bool,
    device: str,
    budget_s: float = 600.0,
) -> list[Point]:
    """The trainer's points (``bench/bench_scaling.py``'s contract) of the ``trainable`` shapes.

    The group sweep (:func:`thin` of ``group_sizes`` at :func:`group_shape`, with
    ``encode_images_once`` and the per-copy reference) and the size sweep (every trainable shape
    at :data:`SIZE_GROUP`), all at :data:`SETTINGS`, in the order that keeps the most when the
    budget runs out: the smallest and largest groups, the sizes, then the middle group; runs
    past ``budget_s`` are skipped with a printed reason. ``quick`` runs nothing and says why: one
    ``vlrollout train`` run takes 25 s or more here (importing torch and AReaL alone takes 10 s),
    over the quick mode's 20 s.

    Args:
        shapes: ``scaling_shapes.Shape`` values, small to large; those not ``trainable`` are
            left out.
        group_sizes: Values of ``gconfig.n_samples`` for the group sweep.
        quick: ``bench_scaling.py --quick``.
        device: ``cpu``, ``cuda`` or ``cuda:N``: where the actor and the engine run.
        budget_s: Seconds after which further runs are skipped.
    """
    if quick:
        print(
            "train: skipped in --quick (one vlrollout train run takes 25 s or more here; "
            "bench/scaling_trainer.py --smoke runs one)",
            flush=True,
        )
        return []
    trainable = runnable(shapes, device)
    if not trainable:
        print("train: skipped (no shape is marked trainable)", flush=True)
        return []
    with tempfile.TemporaryDirectory(prefix="scaling-trainer-") as tmp:
        runner = Runner(Path(tmp), device, budget_s)
        shape = group_shape(trainable)
        groups = thin(group_sizes)
        ends = sorted({groups[0], groups[-1]}) if groups else []
        points = group_points(runner, shape, ends, SETTINGS)
        points += size_points(runner, trainable, SIZE_GROUP, SETTINGS)
        return points + group_points(runner, shape, groups[1:-1], SETTINGS)


def smoke_points(shapes: Sequence[Any], device: str) -> list[Point]:
    """One short run (:data:`SMOKE`) of the smallest trainable shape: the trainer path works."""
    trainable = runnable(shapes, device)
    with tempfile.TemporaryDirectory(prefix="scaling-trainer-") as tmp:
        return size_points(Runner(Path(tmp), device, 60.0), trainable[:1], 2, SMOKE)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one short run of the smallest shape")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--budget", type=float, default=600.0, help="seconds (default 600)")
    ap.add_argument("--shapes", nargs="+", help="shape names (default: every trainable one)")
    args = ap.parse_args(argv)
    try:
        check_device(args.device)
    except ConfigError as e:
        ap.error(str(e))
    shapes = (
        [scaling_shapes.shape(n) for n in args.shapes] if args.shapes else scaling_shapes.SHAPES
    )
    if args.smoke:
        points = smoke_points(shapes, args.device)
    else:
        points = trainer_points(
            shapes, args.groups, quick=False, device=args.device, budget_s=args.budget
        )
    for p in points:
        once = "once" if p["fixed"]["encode_images_once"] else "per-copy"
        print(
            f"{p['shape']:>14} {p['axis']:>6} {p['x']:>12.0f} {once:>8} {p['metric']:>18} "
            f"{p['value']:>12.4g} {p['unit']}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
