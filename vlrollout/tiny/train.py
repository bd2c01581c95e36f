"""Train a tiny vision-language model on the synthetic tasks and save it as a self-contained asset.

Supervised training from random initialisation, or from a saved model (``--init``): cross-entropy
on the answer tokens (and the closing ``<|im_end|>``) only, each example weighted equally (a
one-digit count counts as much as a 20-token box), AdamW with linear warm-up and cosine decay,
fresh generated items every step (no example is seen twice), greedy evaluation on held-out seeds.
The output folder holds the weights (``model.safetensors``), ``config.json``,
``generation_config.json``, the tokenizer and processor files and ``TRAINING.json`` (recipe, wall
time, metrics vs baselines); it loads offline with ``AutoProcessor.from_pretrained`` and
``AutoModelForImageTextToText.from_pretrained``.

The default is the shipped Qwen2-VL model, ``assets/tiny-qwen2vl``: task mix count 0.35,
grounding 0.4, captioning 0.25. A count-only warm-up phase (``--phase 0.1:count=1``) was tried and
slowed grounding down; it is available but off. The training loop is capped at 22 minutes
(``--max-minutes``): on a busy shared machine the run ends, annealed, after fewer steps;
``TRAINING.json`` records how many. Reproduce it (~24 min on 2 shared CPU cores, one thread)::

    .venv/bin/python scripts/train_tiny.py --out assets/tiny-qwen2vl

That model does not localise: its boxes land in the target's cell no more often than a random
cell's (``bench/bench_localisation.py``). The grounding recipe starts from
``assets/tiny-qwen3vl-ground`` instead (``make tiny-ground``): a ``--family qwen3_vl`` model
trained on one-shape boxes, then on ``cell`` answers (the target's cell as two digits, where the
position is two tokens instead of spread over a box's digits), then on boxes and cells. The
counting recipe starts from ``assets/tiny-qwen3vl-count`` (``make tiny-count``): that model
fine-tuned briefly on counting, where the shipped model misses shapes on the dark background
(``bench/bench_counting.py``).

Smoke run (seconds)::

    .venv/bin/python scripts/train_tiny.py --steps 20 --max-minutes 0 --out /tmp/tiny \\
        --eval-per-task 8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from vlrollout.argtypes import whole_number
from vlrollout.files import atomic_write_bytes
from vlrollout.tiny.evaluate import (
    IGNORE_INDEX,
    baselines_from_training,
    encode_batch,
    evaluate,
)
from vlrollout.tiny.model import TEXT_DEFAULTS, tiny_qwen2vl_config, tiny_qwen3vl_config
from vlrollout.tiny.synthetic import (
    EVAL_SEED,
    MAX_SHAPES,
    TASKS,
    TRAIN_SEED,
    answer_with_cell,
    make_item,
)
from vlrollout.tiny.tokenizer import (
    build_bpe_tokenizer,
    build_qwen2vl_processor,
    build_qwen3vl_processor,
)

# Tasks a training mix may name: the evaluated tasks plus ``cell``, grounding items answered with
# the target's cell (``vlrollout.tiny.synthetic.answer_with_cell``).
TRAIN_TASKS = (*TASKS, "cell")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="vlrollout train-tiny",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--out", default="assets/tiny-qwen2vl", help="output folder (save_pretrained)")
    p.add_argument(
        "--family",
        choices=("qwen2_vl", "qwen3_vl"),
        default=None,
        help="architecture of a new model (default qwen2_vl; vlrollout/tiny/model.py); "
        "with --init the saved model's",
    )
    p.add_argument(
        "--init",
        default=None,
        help="start from this saved model folder (its weights, tokenizer and processor) instead "
        "of a random initialisation",
    )
    p.add_argument("--steps", type=whole_number(0), default=3000, help="maximum optimizer steps")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=22.0,
        help="training-loop time cap; the LR schedule follows max(step/steps, time/cap); "
        "0 = steps only (deterministic)",
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument(
        "--mix",
        default="count=0.35,ground=0.4,caption=0.25",
        help="task sampling weights, e.g. count=0.4,ground=0.4,caption=0.2; cell = grounding "
        "items answered with the target's cell (column digit, row digit)",
    )
    p.add_argument(
        "--phase",
        action="append",
        default=None,
        metavar="UNTIL:MIX",
        help="curriculum phase: use MIX while training progress < UNTIL, e.g. 0.1:count=1 "
        "(repeatable, in increasing UNTIL; --mix applies after the last phase)",
    )
    p.add_argument("--rope-theta", type=float, default=None, help="text RoPE base (config default)")
    p.add_argument(
        "--mrope-section",
        default=None,
        help="text M-RoPE split of head_dim/2 into t,h,w, e.g. 2,7,7 (config default)",
    )
    p.add_argument("--seed", type=int, default=0, help="model init and task sampling seed")
    p.add_argument("--train-seed", type=int, default=TRAIN_SEED)
    p.add_argument("--eval-seed", type=int, default=EVAL_SEED)
    p.add_argument("--eval-per-task", type=int, default=200, help="held-out items per task")
    p.add_argument("--eval-every", type=int, default=400, help="quick eval + checkpoint interval")
    p.add_argument("--quick-eval-per-task", type=int, default=32)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads; 1 is fastest on a busy 2-core machine (2 threads: ~10x slower "
        "steps when other processes compete, measured)",
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--log-every", type=int, default=25)
    return p.parse_args(argv)


def parse_mix(spec: str) -> dict[str, float]:
    """``"count=0.4,ground:1=0.6"`` -> weights; ``task:N`` means items with exactly N shapes."""
    mix = {}
    for part in spec.split(","):
        name, _, w = part.partition("=")
        task, _, n = name.partition(":")
        if task not in TRAIN_TASKS or (n and not (n.isdigit() and 1 <= int(n) <= MAX_SHAPES)):
            raise ValueError(
                f"--mix: unknown task {name!r}; expected some of {TRAIN_TASKS}, optionally with a "
                f"shape count 1..{MAX_SHAPES} as task:N"
            )
        mix[name] = float(w)
    if not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"--mix needs non-negative weights with a positive sum, got {spec!r}")
    return mix


def parse_phases(specs: list[str] | None) -> list[tuple[float, dict[str, float]]]:
    """``["0.1:count=1", ...]`` -> ``[(0.1, {"count": 1.0}), ...]``, checked to increase."""
    phases = []
    for spec in specs or []:
        until, sep, mix = spec.partition(":")
        if not sep:
            raise ValueError(f"--phase {spec!r}: expected UNTIL:MIX, e.g. 0.1:count=1")
        phases.append((float(until), parse_mix(mix)))
    bounds = [u for u, _ in phases]
    if bounds != sorted(bounds) or any(not 0 < u <= 1 for u in bounds):
        raise ValueError(f"--phase bounds must increase within (0, 1], got {bounds}")
    return phases


def mix_at(progress: float, phases, final_mix: dict[str, float]) -> dict[str, float]:
    """The task mix of the first phase whose bound exceeds ``progress``, else ``final_mix``."""
    for until, mix in phases:
        if progress < until:
            return mix
    return final_mix


def progress_at(step: int, elapsed_s: float, args: argparse.Namespace) -> float:
    """Training progress in [0, 1]: the larger of steps done and training time used.

    With ``--max-minutes 0`` it is ``step / steps`` and the run is deterministic. With a time cap
    the schedule follows whichever budget runs out first, so a run on a busy shared machine still
    ends annealed (at fewer steps) instead of being cut off at a high learning rate.
    """
    p = step / args.steps
    if args.max_minutes > 0:
        p = max(p, elapsed_s / (args.max_minutes * 60))
    return min(1.0, p)


def lr_at(step: int, progress: float, args: argparse.Namespace) -> float:
    """Linear warm-up over ``warmup`` steps times a cosine from ``lr`` to ``lr * min_lr_ratio``."""
    warm = min(1.0, (step + 1) / args.warmup) if args.warmup > 0 else 1.0
    cos = 0.5 * (1 + math.cos(math.pi * progress))
    return args.lr * warm * (args.min_lr_ratio + (1 - args.min_lr_ratio) * cos)


def answer_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean next-token cross-entropy on each example's answer tokens, shape [B].

    Args:
        logits: [B, L, V] float.
        labels: [B, L] int64, ``IGNORE_INDEX`` outside the answer.
    """
    logits, labels = logits[:, :-1].float(), labels[:, 1:]
    tok_loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(labels.shape)
    mask = (labels != IGNORE_INDEX).float()
    return (tok_loss * mask).sum(1) / mask.sum(1).clamp(min=1)


def _machine(threads: int) -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__}, {threads} thread(s)"


def model_card(record: dict[str, Any], folder: str) -> str:
    """A short README.md for the saved ``folder``, generated from the ``TRAINING.json`` record."""
    m = record["metrics"] or {}
    rows = []
    if "count" in m:
        rows.append(
            f"| count | accuracy | {m['count']['accuracy']:.3f} | {m['count']['chance']:.3f} (chance) |"
        )
    if "ground" in m:
        g = m["ground"]
        rows.append(
            f"| ground | mean IoU | {g['mean_iou']:.3f} | "
            f"{g['centre_box_baseline_mean_iou']:.3f} (centre box of mean size) |"
        )
    if "caption" in m:
        c = m["caption"]
        rows.append(
            f"| caption | CIDEr-D | {c['cider_d']:.3f} | "
            f'{c["constant_caption_baseline_cider_d"]:.3f} (constant "{c["constant_caption"]}") |'
        )
    text, vision = record["config"]["text"], record["config"]["vision"]
    init = record["recipe"].get("init")
    architecture = record.get("architecture", "Qwen2VLForConditionalGeneration")
    origin = f"`{init}`, fine-tuned" if init else "randomly initialised, then trained"
    return "\n".join(
        [
            f"# {Path(folder).name}",
            "",
            f"A `{architecture}` ({record['params'] / 1e6:.2f}M parameters), "
            f"{origin}, for vlrollout's offline demo, tests and training recipes. "
            "Generated by `vlrollout.tiny.train`; do not edit by hand.",
            "",
            f"- text: {text['num_hidden_layers']} layers, hidden {text['hidden_size']}, "
            f"{text['num_attention_heads']} heads, vocab {text['vocab_size']}, M-RoPE base "
            f"{text['rope_parameters']['rope_theta']} sections "
            f"{text['rope_parameters']['mrope_section']} (why: `vlrollout/tiny/model.py`)",
            f"- vision: depth {vision['depth']}, embed {vision.get('embed_dim', vision['hidden_size'])}, patch "
            f"{vision['patch_size']}, merge {vision['spatial_merge_size']}; images <= 112x112 "
            "pixels (<= 16 image tokens)",
            f"- trained {record['steps_done']} steps in {record['wall_time_s'] / 60:.1f} min on "
            f"{record['machine']}",
            "",
            "Held-out greedy evaluation (`TRAINING.json` has the recipe and the full record):",
            "",
            "| task | metric | model | baseline |",
            "|---|---|---|---|",
            *rows,
            "",
            "```python",
            f"from transformers import AutoProcessor, {architecture}",
            "",
            f'processor = AutoProcessor.from_pretrained("{folder}")',
            f'model = {architecture}.from_pretrained("{folder}")',
            "```",
            "",
            f"Reproduce: `{record['reproduce']}`",
            "",
        ]
    )


def save(model, processor, out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    # Replaced whole or not at all: a failed save leaves the previous record beside the weights.
    atomic_write_bytes(out / "TRAINING.json", (json.dumps(record, indent=2) + "\n").encode())
    atomic_write_bytes(out / "README.md", model_card(record, str(out)).encode())


def eval_items(seed: int, per_task: int) -> list[dict[str, Any]]:
    return [make_item(t, seed, i) for t in TASKS for i in range(per_task)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train, evaluate and save; returns the ``TRAINING.json`` record."""
    from transformers import (
        AutoModelForImageTextToText,
        AutoProcessor,
        Qwen2VLForConditionalGeneration,
        Qwen3VLForConditionalGeneration,
    )

    args = parse_args(argv)
    if args.init and (args.rope_theta, args.mrope_section, args.family) != (None, None, None):
        raise SystemExit(
            "--family, --rope-theta and --mrope-section set up a new model; not with --init"
        )
    if args.init and not (Path(args.init) / "config.json").is_file():
        raise SystemExit(f"--init: no saved model (config.json) in {args.init}")
    if args.family == "qwen3_vl" and (args.rope_theta, args.mrope_section) != (None, None):
        raise SystemExit("--rope-theta and --mrope-section are for --family qwen2_vl")
    torch.set_num_threads(args.threads)
    mix = parse_mix(args.mix)
    phases = parse_phases(args.phase)
    out = Path(args.out)
    t_start = time.time()

    torch.manual_seed(args.seed)
    if args.init:
        processor = AutoProcessor.from_pretrained(args.init)
        model = AutoModelForImageTextToText.from_pretrained(args.init)
        config = model.config
    elif args.family == "qwen3_vl":
        tokenizer = build_bpe_tokenizer()
        processor = build_qwen3vl_processor(tokenizer)
        config = tiny_qwen3vl_config(tokenizer)
        model = Qwen3VLForConditionalGeneration(config)
    else:
        tokenizer = build_bpe_tokenizer()
        processor = build_qwen2vl_processor(tokenizer)
        rope = dict(TEXT_DEFAULTS["rope_parameters"])
        if args.rope_theta is not None:
            rope["rope_theta"] = args.rope_theta
        if args.mrope_section is not None:
            rope["mrope_section"] = [int(v) for v in args.mrope_section.split(",")]
        config = tiny_qwen2vl_config(tokenizer, text={"rope_parameters": rope})
        model = Qwen2VLForConditionalGeneration(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.3f}M  vocab {len(processor.tokenizer)}", flush=True)

    baselines = baselines_from_training(args.train_seed)
    quick_eval = eval_items(args.eval_seed, min(args.quick_eval_per_task, args.eval_per_task))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    rng = random.Random(args.seed)
    next_index = dict.fromkeys(TASKS, 0)  # cell items are grounding items: one index stream
    history: list[dict[str, Any]] = []
    record: dict[str, Any] = {}

    def make_record(step: int, metrics: dict | None, losses: list[float], final: bool) -> dict:
        return {
            "final": final,
            "steps_done": step,
            "recipe": {k: v for k, v in vars(args).items() if k not in ("out", "log_every")},
            "mix": mix,
            "phases": phases,
            "params": n_params,
            "architecture": type(model).__name__,
            "config": {
                "text": _fields(config.text_config, _TEXT_KEYS),
                "vision": _fields(config.vision_config, _VISION_KEYS),
            },
            "wall_time_s": round(time.time() - t_start, 1),
            "machine": _machine(args.threads),
            "train_loss_last_100": sum(losses[-100:]) / max(1, len(losses[-100:])),
            "baselines": baselines,
            "metrics": metrics,
            "loss_curve": loss_curve,
            "history": history,
            "reproduce": "python scripts/train_tiny.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
        }

    losses: list[float] = []
    loss_curve: list[list[float]] = []  # [step, mean loss of the last log_every steps, lr, s]
    task_losses: dict[str, list[float]] = {t: [] for t in TRAIN_TASKS}
    stopped_by = "steps"
    t_train = time.time()
    step = 0
    model.train()
    while step < args.steps:
        progress = progress_at(step, time.time() - t_train, args)
        if progress >= 1.0:
            stopped_by = "time"
            break
        lr = lr_at(step, progress, args)
        current = mix_at(progress, phases, mix)
        tasks = rng.choices(list(current), list(current.values()), k=args.batch_size)
        items = []
        for name in tasks:
            task, _, n = name.partition(":")
            source = "ground" if task == "cell" else task
            item = make_item(source, args.train_seed, next_index[source], int(n) if n else None)
            items.append(answer_with_cell(item) if task == "cell" else item)
            next_index[source] += 1
        batch = encode_batch(processor, items, with_solution=True)
        labels = batch.pop("labels")
        for g in opt.param_groups:
            g["lr"] = lr
        per_example = answer_loss(model(**batch).logits, labels)
        loss = per_example.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        losses.append(loss.item())
        for name, v in zip(tasks, per_example.tolist(), strict=True):
            task_losses[name.partition(":")[0]].append(v)
        if step % args.log_every == 0 or step == 1:
            avg = sum(losses[-args.log_every :]) / len(losses[-args.log_every :])
            per_task = " ".join(f"{t} {sum(v) / len(v):.3f}" for t, v in task_losses.items() if v)
            elapsed = time.time() - t_start
            loss_curve.append([step, round(avg, 4), float(f"{lr:.3e}"), round(elapsed, 1)])
            print(
                f"step {step} loss {avg:.4f} ({per_task}) lr {lr:.2e} t {elapsed:.0f}s", flush=True
            )
            task_losses = {t: [] for t in TRAIN_TASKS}
        if step % args.eval_every == 0 and step < args.steps:
            metrics = evaluate(model, processor, quick_eval, baselines)
            model.train()
            history.append(
                {
                    "step": step,
                    "wall_time_s": round(time.time() - t_start, 1),
                    "loss": sum(losses[-100:]) / len(losses[-100:]),
                    **{k: v for k, v in metrics.items() if k != "examples"},
                }
            )
            print(json.dumps(history[-1]), flush=True)
            save(model, processor, out / "checkpoint", make_record(step, metrics, losses, False))

    metrics = evaluate(model, processor, eval_items(args.eval_seed, args.eval_per_task), baselines)
    if args.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    record = make_record(step, metrics, losses, True)
    record["stopped_by"] = stopped_by
    save(model, processor, out, record)
    shutil.rmtree(out / "checkpoint", ignore_errors=True)
    print(json.dumps(metrics, indent=1), flush=True)
    print(f"saved {out} after {step} steps ({stopped_by}) in {record['wall_time_s']}s", flush=True)
    return record


_TEXT_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rope_parameters",
)
_VISION_KEYS = (  # those the family's vision config has
    "depth",
    "embed_dim",
    "num_position_embeddings",
    "num_heads",
    "mlp_ratio",
    "patch_size",
    "spatial_merge_size",
    "temporal_patch_size",
    "hidden_size",
)


def _fields(config, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: getattr(config, k) for k in keys if hasattr(config, k)}


if __name__ == "__main__":
    main()
