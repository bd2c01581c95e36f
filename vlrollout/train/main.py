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
        epilog="Exit status: 0 done, 1 an internal error, 2 a usage error, 3 a training step or "
        "held-out evaluation in which no episode was accepted (the counts and the top rejection "
        "reasons are printed), 130/143 stopped by a signal.",
    )
    parser.add_argument("--config", required=True, help="YAML with GRPOConfig keys + vlrollout:")
    args, overrides = parser.parse_known_args(list(argv))

    from pathlib import Path

    from vlrollout.jsonl import read_jsonl
    from vlrollout.train.config import load_config
    from vlrollout.train.loop import train

    cfg = load_config(args.config, overrides)
    last = train(cfg)
    out = Path(cfg.vlrollout.output)
    evals = read_jsonl(out / "eval.jsonl")
    brief = {
        "steps": last.get("step"),
        "reward_mean_last_step": last.get("reward_mean"),
        "held_out_first": evals[0]["eval/mean"] if evals else None,
        "held_out_last": evals[-1]["eval/mean"] if evals else None,
        "held_out_last_rejected": (
            f"{evals[-1].get('eval/rejected', 0)} of {evals[-1]['eval/n']} episodes (scored 0)"
            if evals and "eval/n" in evals[-1]
            else None
        ),
        "seconds_per_step_last": last.get("time/step"),
    }
    print(json.dumps(brief, indent=1))
    print(f"wrote {out}/metrics.jsonl, {out}/eval.jsonl, {out}/report.html, {out}/checkpoints/")
    return 0
