"""``vlrollout eval`` on a held-out grounding split, against the local model and the same model
served by ``vlrollout serve --protocol vllm`` and reached through ``--protocol openai`` (driven the
way an external OpenAI-compatible server would be).

The items are the grounding recipe's synthetic held-out items of the ``test`` split
(``bench/splits.py``; written by ``vlrollout make-samples``), scored with the ``refcoco`` task:
mean IoU, ACC@0.1…0.9 and Center_ACC (lmms-eval's formulas, boxes read in the model family's
frame). The record's table is what ``vlrollout eval`` printed for the local model, with the served
run's values beside it; the headline says whether every metric is identical.

    .venv/bin/python bench/bench_eval.py                       # 200 items, the test split
    .venv/bin/python bench/bench_eval.py --items 20 --record-dir /tmp/records
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from entry import positive_int, run
from record import REPO, Run, Table, add_record_dir, write
from served import Served
from splits import SPLITS, add_split

VLROLLOUT = str(REPO / ".venv" / "bin" / "vlrollout")
NAME = "eval_refcoco"
QUICK_ITEMS = 8


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="assets/tiny-qwen3vl-ground", help="model folder")
    p.add_argument("--items", type=positive_int, default=200, help="held-out items")
    p.add_argument(
        "--box-format",
        default="qwen2_vl",
        help="how the model writes boxes (the tiny models write Qwen2-VL boxes, as the synthetic "
        "solutions they were trained on)",
    )
    p.add_argument("--quick", action="store_true", help=f"{QUICK_ITEMS} items (a smoke run)")
    add_split(p)
    add_record_dir(p)
    return p.parse_args()


def evaluate(data: Path, output: Path, source: list[str]) -> tuple[dict, str]:
    """``vlrollout eval`` on ``data`` (``source``: where the model is and how it writes boxes):
    its results.json and the table it printed."""
    cmd = [VLROLLOUT, "eval", "--data", str(data), "--task", "refcoco", "--output", str(output)]
    proc = subprocess.run(
        [*cmd, *source, "--no-progress"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads((output / "results.json").read_text()), proc.stdout


def summarise(local: dict, remote: dict, args: argparse.Namespace, seed: str) -> tuple:
    """The record's table (local values, intervals, served values), headline and numbers."""
    rows = []
    for name, m in local["metrics"].items():
        lo, hi = m["ci95"]
        served_value = remote["metrics"][name]["value"]
        rows.append([name, f"{m['value']:.4f}", f"[{lo:.4f}, {hi:.4f}]", f"{served_value:.4f}"])
    same = all(
        local["metrics"][k]["value"] == remote["metrics"][k]["value"] for k in local["metrics"]
    )
    title = f"{args.model}, {local['items']} items, split {args.split} (eval_seed {seed})"
    table = Table(["metric", "local", "95% CI", "served (openai)"], rows, title=title)
    headline = (
        f"refcoco on {local['items']} held-out grounding items: ACC@0.5 "
        f"{local['metrics']['ACC@0.5']['value']:.4f}, mean IoU {local['metrics']['IoU']['value']:.4f}; "
        f"the served model through --protocol openai gives {'identical' if same else 'DIFFERENT'} "
        f"metrics ({sum(local['rejected'].values())} items rejected)"
    )
    numbers = {
        "split": args.split,
        "eval_seed": int(seed),
        "items": local["items"],
        "local": {k: v["value"] for k, v in local["metrics"].items()},
        "served": {k: v["value"] for k, v in remote["metrics"].items()},
        "identical": same,
    }
    return table, headline, numbers


def main() -> int:
    args = parse_args()
    items = QUICK_ITEMS if args.quick else args.items
    bench = Run(NAME)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seed = str(SPLITS[args.split])
        samples = [VLROLLOUT, "make-samples", "--task", "ground", "-n", str(items)]
        subprocess.run([*samples, "--seed", seed, "--out", str(root / "data")], check=True)
        data = root / "data" / "data.jsonl"
        model = ["--model", args.model, "--box-format", args.box_format]
        local, printed = evaluate(data, root / "local", model)
        with Served(args.model, "--protocol", "vllm", "--deterministic") as server:
            address = ["--address", f"127.0.0.1:{server.port}", "--protocol", "openai"]
            remote, _ = evaluate(data, root / "served", [*address, *model])
    print(printed)
    table, headline, numbers = summarise(local, remote, args, seed)
    print(table.text())
    print(headline)
    mode = f"quick: {QUICK_ITEMS} items" if args.quick else "default"
    write(bench.record([table], headline, numbers, mode=mode), args.record_dir)
    return 0 if numbers["identical"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    run(main)
