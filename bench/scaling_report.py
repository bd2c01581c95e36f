"""The scaling benchmark's tables, goals, headline and chart specs, from its points and fits.

Goals (each judged on every point, the worst case reported):

- engine/``generate`` tokens/s >= :data:`TARGET_RATIO` at every shape, axis and value;
- engine peak memory <= ``generate``'s × :data:`MEMORY_SLACK` (the GPU's where the points carry
  ``peak_device``, else the process's resident memory);
- one preparation per group (``prompt`` ``prepares_per_group`` = 1) and the engine's vision
  tower encoding each of the prompt's images once per group;
- the trainer's peak memory with ``encode_images_once`` below the per-copy reference
  (``train`` ``peak_rss`` < ``peak_rss_per_copy``, or the ``peak_device`` pair on a GPU) at
  every group size.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from record import Table
from scaling_growth import Fit

TARGET_RATIO = 1.0
MEMORY_SLACK = 1.10
MB = 2**20
SIDES = ("engine", "generate")
EXPONENT_ROWS = (
    ("engine", "time/total"),
    ("generate", "time/total"),
    ("engine", "time/prefill"),
    ("generate", "time/prefill"),
    ("engine", "time/decode_per_token"),
    ("generate", "time/decode_per_token"),
    ("engine", "peak_rss_extra"),
    ("generate", "peak_rss_extra"),
    ("prompt", "time/prepare_group"),
    ("prompt", "bytes"),
    ("serve", "latency"),
    ("train", "time/step"),
    ("train", "peak_rss"),
)


def _key(p: dict[str, Any]) -> tuple:
    return (p["shape"], p["axis"], p["x"], tuple(sorted(p["fixed"].items())))


def by_key(points: list[dict[str, Any]]) -> dict[tuple, dict[tuple[str, str], float]]:
    """``{(shape, axis, x, fixed): {(path, metric): value}}``."""
    out: dict[tuple, dict[tuple[str, str], float]] = defaultdict(dict)
    for p in points:
        out[_key(p)][p["path"], p["metric"]] = p["value"]
    return out


def _setting(key: tuple) -> dict[str, Any]:
    shape, axis, x, fixed = key
    values = dict(fixed)
    if axis != "size":
        values[axis] = x
    return {"shape": shape, "axis": axis, **values}


def peak_metric(m: dict[tuple[str, str], float], paths: tuple[str, ...]) -> str:
    """The memory a point is judged on: ``peak_device`` where every one of ``paths`` measured
    it (a GPU run), else ``peak_rss``."""
    return "peak_device" if all((p, "peak_device") in m for p in paths) else "peak_rss"


def _f(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def compare_table(rows: dict[tuple, dict]) -> tuple[Table, list[dict[str, Any]]]:
    """Engine against ``generate`` at every point both sides measured."""
    table, judged = [], []
    for key, m in rows.items():
        e, g = m.get(("engine", "tokens_per_s")), m.get(("generate", "tokens_per_s"))
        if e is None or g is None:
            continue
        s = _setting(key)
        ratio = e / g
        peak = peak_metric(m, SIDES)
        mem = m[("engine", peak)] / m[("generate", peak)]
        judged.append({**s, "ratio": ratio, "memory_ratio": mem})
        table.append(
            [
                s["shape"],
                s["axis"],
                str(s["tokens"]),
                str(s["group"]),
                str(s["images"]),
                f"{e:.1f}",
                f"{g:.1f}",
                f"{ratio:.2f}",
                f"{m[('engine', 'time/prefill')]:.2f} / {m[('generate', 'time/prefill')]:.2f}",
                f"{1e3 * m[('engine', 'time/decode_per_token')]:.0f} / "
                f"{1e3 * m[('generate', 'time/decode_per_token')]:.0f}",
                f"{m[('engine', peak)] / MB:.0f} / {m[('generate', peak)] / MB:.0f}",
                f"{mem:.2f}",
                f"{m[('engine', 'images_encoded')]:g} / {m[('generate', 'images_encoded')]:g}",
            ]
        )
    columns = [
        "shape",
        "axis",
        "tokens",
        "group",
        "images",
        "engine tok/s",
        "generate tok/s",
        "engine/generate",
        "prefill s (e / g)",
        "decode ms/step (e / g)",
        "peak MB (e / g)",
        "memory e/g",
        "images encoded (e / g)",
    ]
    return Table(columns, table, title="Engine against generate, per point"), judged


def prompt_table(rows: dict[tuple, dict]) -> Table:
    out = []
    for key, m in rows.items():
        if ("prompt", "time/prepare_group") not in m and ("serve", "latency") not in m:
            continue
        s = _setting(key)
        prep = m.get(("prompt", "time/prepare_group"))
        nbytes = m.get(("prompt", "bytes"))
        out.append(
            [
                s["shape"],
                s["axis"],
                str(s["tokens"]),
                str(s["group"]),
                str(s["images"]),
                _f(None if prep is None else 1e3 * prep, ".0f"),
                _f(m.get(("prompt", "prepares_per_group")), "g"),
                _f(None if nbytes is None else nbytes / MB, ".2f"),
                _f(m.get(("serve", "latency")), ".2f"),
            ]
        )
    columns = ["shape", "axis", "tokens", "group", "images", "prepare ms", "preparations"]
    columns += ["prompt MB", "serve s"]
    return Table(columns, out, title="Prepared prompt per group, and vlrollout serve latency")


def trainer_table(rows: dict[tuple, dict]) -> tuple[Table | None, list[dict[str, Any]]]:
    metrics = ["time/rollout", "time/logp", "time/update", "time/weight_sync", "time/step"]
    out, judged = [], []
    for key, m in rows.items():
        if not any(path == "train" for path, _ in m):
            continue
        shape, axis, x, fixed = key
        peak = peak_metric(m, ("train",))
        once, copy = m.get(("train", peak)), m.get(("train", f"{peak}_per_copy"))
        if once is not None and copy is not None:
            judged.append({"shape": shape, "axis": axis, "x": x, "once": once, "per_copy": copy})
        fixed_text = ", ".join(f"{k}={v}" for k, v in fixed)
        out.append(
            [shape, f"{axis}={x:g}", fixed_text]
            + [_f(m.get(("train", k)), ".2f") for k in metrics]
            + [_f(None if once is None else once / MB, ".0f")]
            + [_f(None if copy is None else copy / MB, ".0f")]
        )
    if not out:
        return None, judged
    columns = ["shape", "point", "fixed", "rollout s", "logp s", "update s", "sync s", "step s"]
    columns += ["peak MB", "per-copy peak MB"]
    return Table(columns, out, title="GRPO step by phase and peak memory (trainer)"), judged


def exponent_table(fits: list[Fit]) -> Table:
    """Growth exponents of the main costs: a row per (path, metric, axis), a column per shape;
    ``!`` marks a flag, the expected order is in the row's last cell."""
    shapes = list(dict.fromkeys(f.shape for f in fits if f.shape != "all"))
    cells: dict[tuple[str, str, str], dict[str, str]] = defaultdict(dict)
    orders: dict[tuple[str, str, str], float | None] = {}
    for f in fits:
        if (f.path, f.metric) not in EXPONENT_ROWS:
            continue
        row = (f.path, f.metric, f.axis)
        cells[row][f.shape] = f"{f.exponent:.2f}" + (" !" if f.flagged else "")
        orders[row] = f.expected
    out = []
    order_of_rows = {r: i for i, r in enumerate(EXPONENT_ROWS)}
    for row in sorted(cells, key=lambda r: (r[2], order_of_rows[r[0], r[1]])):
        path, metric, axis = row
        line = [path, metric, axis] + [cells[row].get(s, "") for s in shapes]
        line += [cells[row].get("all", ""), _f(orders[row], "g")]
        out.append(line)
    columns = ["path", "metric", "axis", *shapes, "all shapes", "expected at most"]
    return Table(columns, out, title="Growth exponents (log-log slope; ! above the expected order)")


def flag_table(fits: list[Fit]) -> Table:
    rows = [
        [
            f.path,
            f.shape,
            f.metric,
            f.axis,
            f"{f.exponent:.2f}",
            _f(f.expected, "g"),
            f"{f.x_range[0]:g}..{f.x_range[1]:g}",
            f"{f.y_range[0]:.3g}..{f.y_range[1]:.3g}",
        ]
        for f in fits
        if f.flagged
    ]
    columns = ["path", "shape", "metric", "axis", "exponent", "expected", "x", "y"]
    return Table(columns, rows, title="Flagged exponents (explained on the results page)")


def _worst(items: list[dict[str, Any]], key: str, lowest: bool) -> dict[str, Any] | None:
    if not items:
        return None
    return (min if lowest else max)(items, key=lambda d: d[key])


def _where(d: dict[str, Any]) -> str:
    return (
        f"{d['shape']} {d['axis']}: tokens {d['tokens']}, group {d['group']}, images {d['images']}"
    )


def once_per_group(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether every group prepared its prompt once and the engine encoded each image once;
    ``None`` for a goal no point measured (a run of other paths)."""
    prepares = [p["value"] for p in points if p["metric"] == "prepares_per_group"]
    encodes = [p for p in points if p["path"] == "engine" and p["metric"] == "images_encoded"]
    extra = []
    for p in encodes:
        images = p["x"] if p["axis"] == "images" else p["fixed"]["images"]
        if p["value"] > images + 1e-9:
            extra.append(f"{p['shape']} {p['axis']}={p['x']:g}: {p['value']:g} for {images}")
    return {
        "prepared_once": max(prepares) == 1 if prepares else None,
        "most_preparations": max(prepares, default=0),
        "encoded_once": not extra if encodes else None,
        "encoded_more": extra,
    }


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else "yes" if met else "NO"


def largest(points: list[dict[str, Any]], params: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The largest shape that ran each path, with its peak memory and a speed."""
    out: dict[str, dict[str, Any]] = {}
    speed = {
        "engine": "tokens_per_s",
        "generate": "tokens_per_s",
        "serve": "latency",
        "prompt": "time/prepare_group",
        "train": "time/step",
    }
    for path, metric in speed.items():
        ran = [p for p in points if p["path"] == path]
        if not ran:
            continue
        top = max({p["shape"] for p in ran}, key=lambda s: params.get(s, 0))
        mine = [p for p in ran if p["shape"] == top]
        device = any(p["metric"] == "peak_device" for p in mine)
        memory = "peak_device" if device else "peak_rss"
        peak = max((p["value"] for p in mine if p["metric"] == memory), default=None)
        values = [p["value"] for p in mine if p["metric"] == metric]
        out[path] = {
            "shape": top,
            "params": params.get(top),
            "peak_rss": peak,
            "metric": metric,
            "best": (max if metric == "tokens_per_s" else min)(values, default=None),
        }
    return out


def charts(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chart specs: per axis, seconds per group and peak memory above the loaded model (engine
    solid, ``generate`` dashed, one colour per shape); the prepared prompt against the group;
    the model-size axis; the trainer's peak memory against the group."""

    def series(paths, metric, axis, scale=1.0):
        out: dict[str, list[list[float]]] = defaultdict(list)
        for p in points:
            if p["path"] in paths and p["metric"] == metric and p["axis"] == axis:
                out[f"{p['shape']} {p['path']}"].append([p["x"], p["value"] * scale])
        return dict(out)

    specs = []
    for axis, label in (("tokens", "image tokens per image"), ("group", "group size")):
        specs.append(
            {
                "title": f"Seconds per group against {label}",
                "x": label,
                "y": "s",
                "series": series(SIDES, "time/total", axis),
            }
        )
    specs.append(
        {
            "title": "Seconds per group against images per prompt",
            "x": "images per prompt",
            "y": "s",
            "series": series(SIDES, "time/total", "images"),
        }
    )
    specs.append(
        {
            "title": "Prefill seconds against image tokens per image",
            "x": "image tokens per image",
            "y": "s",
            "series": series(SIDES, "time/prefill", "tokens"),
        }
    )
    specs.append(
        {
            "title": "Peak memory above the loaded model against group size",
            "x": "group size",
            "y": "MB",
            "series": series(SIDES, "peak_rss_extra", "group", 1 / MB),
        }
    )
    specs.append(
        {
            "title": "Prepared prompt per group (ms) against group size",
            "x": "group size",
            "y": "ms",
            "series": series(("prompt",), "time/prepare_group", "group", 1e3),
        }
    )
    size: dict[str, list[list[float]]] = defaultdict(list)
    for p in points:
        if p["path"] in SIDES and p["metric"] == "tokens_per_s" and p["axis"] == "size":
            size[f"shapes {p['path']}"].append([p["x"], p["value"]])
    specs.append(
        {
            "title": "Tokens/s against parameters (64 image tokens)",
            "x": "parameters",
            "y": "tok/s",
            "series": dict(size),
        }
    )
    train = series(("train",), "peak_rss", "group", 1 / MB)
    copy = {
        k.replace(" train", " per-copy"): v
        for k, v in series(("train",), "peak_rss_per_copy", "group", 1 / MB).items()
    }
    if train or copy:
        specs.append(
            {
                "title": "Trainer peak memory against group size (encode once vs per copy)",
                "x": "group size",
                "y": "MB",
                "series": {**train, **copy},
            }
        )
    return specs


def summarise(
    points: list[dict[str, Any]], fits: list[Fit], failures: list[str], params: dict[str, int]
) -> tuple[list[Table], str, dict[str, Any], list[str]]:
    """Tables, the headline (worst cases), the record's numbers and notes."""
    rows = by_key(points)
    compare, judged = compare_table(rows)
    train, train_judged = trainer_table(rows)
    once = once_per_group(points)
    flagged = [f for f in fits if f.flagged]
    tables = [compare, prompt_table(rows)] + ([train] if train else [])
    tables += [exponent_table(fits), flag_table(fits)]
    worst = _worst(judged, "ratio", lowest=True)
    worst_mem = _worst(judged, "memory_ratio", lowest=False)
    parts = []
    if worst:
        ok = "ok" if worst["ratio"] >= TARGET_RATIO else "MISS"
        parts.append(
            f"worst engine/generate {worst['ratio']:.2f}x ({_where(worst)}; target >= "
            f"{TARGET_RATIO:.1f}: {ok})"
        )
    if worst_mem:
        ok = "ok" if worst_mem["memory_ratio"] <= MEMORY_SLACK else "MISS"
        parts.append(
            f"worst engine/generate peak memory {worst_mem['memory_ratio']:.2f} "
            f"({_where(worst_mem)}; target <= {MEMORY_SLACK:.2f}: {ok})"
        )
    parts.append(
        "prompt prepared once per group: "
        + _verdict(once["prepared_once"])
        + "; images encoded once per group: "
        + _verdict(once["encoded_once"])
    )
    if train_judged:
        bad = [t for t in train_judged if t["once"] >= t["per_copy"]]
        worst_t = max(train_judged, key=lambda t: t["once"] / t["per_copy"])
        parts.append(
            f"trainer encode-once/per-copy peak memory at most {worst_t['once'] / worst_t['per_copy']:.2f} "
            f"({worst_t['shape']} {worst_t['axis']} {worst_t['x']:g}: "
            + ("ok" if not bad else "MISS")
            + ")"
        )
    else:
        parts.append("trainer: no points")
    parts.append(f"{len(flagged)} exponent(s) above their expected order")
    headline = "headline: " + "; ".join(parts)
    numbers = {
        "points": points,
        "fits": [f.to_dict() for f in fits],
        "flags": [f.to_dict() for f in flagged],
        "goals": {
            "worst_ratio": worst,
            "worst_memory_ratio": worst_mem,
            "once_per_group": once,
            "trainer": train_judged,
        },
        "largest": largest(points, params),
        "params": params,
        "failures": failures,
        "charts": charts(points),
    }
    notes = [f"Failed: {f}" for f in failures]
    for path, info in numbers["largest"].items():
        peak = "" if info["peak_rss"] is None else f", peak {info['peak_rss'] / 2**30:.2f} GiB"
        best = "" if info["best"] is None else f", best {info['metric']} {info['best']:.3g}"
        notes.append(f"Largest shape on {path}: {info['shape']}{peak}{best}.")
    return tables, headline, numbers, notes
