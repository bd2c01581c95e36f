"""Entry point of ``vlrollout train --config CONFIG [key=value ...]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="vlrollout train",
        description="GRPO with AReaL's FSDPPPOActor on the embedded engine. Overrides use "
        "AReaL's syntax: actor.optimizer.lr=0 total_train_steps=10 vlrollout.output=runs/x",
    )
    parser.add_argument("--config", required=True, help="YAML with GRPOConfig keys + vlrollout:")
    args, overrides = parser.parse_known_args(list(argv))

    from pathlib import Path

    from vlrollout.train.config import load_config
    from vlrollout.train.loop import train
    from vlrollout.train.report import read_jsonl

    cfg = load_config(args.config, overrides)
    last = train(cfg)
    out = Path(cfg.vlrollout.output)
    evals = read_jsonl(out / "eval.jsonl")
    brief = {
        "steps": last.get("step"),
        "reward_mean_last_step": last.get("reward_mean"),
        "held_out_first": evals[0]["eval/mean"] if evals else None,
        "held_out_last": evals[-1]["eval/mean"] if evals else None,
        "seconds_per_step_last": last.get("time/step"),
    }
    print(json.dumps(brief, indent=1))
    print(f"wrote {out}/metrics.jsonl, {out}/eval.jsonl, {out}/report.html, {out}/checkpoints/")
    return 0
