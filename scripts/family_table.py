"""Print, per model family, what the local engine gives on tiny random models of each family.

Columns: episodes accepted (single-turn on every probe item, multi-attempt with 3 turns on the
two-image item), the largest |rollout − teacher-forced| logprob over every generated token
(:func:`vlrollout.checks.logprob_consistency`, float32), and how many greedy completions equal
``model.generate``'s on the same prepared inputs. It also writes the table as a record,
``bench/results/families.json`` (``bench/record.py``), which ``make readme-numbers`` renders into
``docs/families.md`` (and its headline into the README). Usage::

    .venv/bin/python scripts/family_table.py [--seeds 2] [--record-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import torch
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.checks import logprob_consistency
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.testing.family_items import ITEMS, generate_greedy
from vlrollout.testing.tiny_families import TINY_FAMILIES, tiny_vlm
from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.steps import build_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import record  # noqa: E402

REWARD = "format_think_answer"  # random text scores 0: multi-attempt runs all its turns
TEMPERATURE = 0.7
NEW_TOKENS = 8


def _items() -> list[dict]:
    return [{"id": name, "answer": "never-matches", **item} for name, item in ITEMS.items()]


def _greedy_equal(model, processor, engine, item) -> bool:
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    prepared = asyncio.run(wf.ctx.prepare(item))
    greedy = GenerationHyperparameters(max_new_tokens=NEW_TOKENS, greedy=True)
    resp = asyncio.run(
        engine.agenerate(build_request(prepared, greedy, processor.tokenizer, processor))
    )
    expected = generate_greedy(model, engine, prepared, NEW_TOKENS)
    return resp.output_tokens == expected[: len(resp.output_tokens)]


def _gconfig() -> GenerationHyperparameters:
    return GenerationHyperparameters(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, temperature=TEMPERATURE
    )


def family_row(family: str, seed: int) -> tuple[int, int, float, int, int]:
    """``(accepted, episodes, max logprob gap, greedy equal, greedy tried)`` for one family."""
    model, processor = tiny_vlm(family, seed=seed)
    engine = LocalInferenceEngine(model, processor, seed=seed).initialize()
    try:
        single = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
        multi = VisionMultiAttemptWorkflow(
            REWARD, _gconfig(), processor.tokenizer, processor, max_turns=3, turn_discount=0.9
        )
        items = _items()
        runs = [(single, item) for item in items] + [(multi, items[1])]
        trajs = [asyncio.run(wf.arun_episode(engine, item)) for wf, item in runs]
        accepted = [t for t in trajs if t is not None]
        gap = max(
            (logprob_consistency(model, t, temperature=TEMPERATURE).max_abs_diff for t in accepted),
            default=float("nan"),
        )
        greedy = [_greedy_equal(model, processor, engine, item) for item in items]
        return len(accepted), len(runs), gap, sum(greedy), len(greedy)
    finally:
        engine.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="random models per family")
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("families")
    torch.set_num_threads(1)
    columns = ["family", "episodes accepted", "max rollout vs teacher-forced logprob",
               "greedy = generate"]  # fmt: skip
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|")
    table: list[list[str]] = []
    for family in TINY_FAMILIES:
        rows = [family_row(family, seed) for seed in range(args.seeds)]
        accepted, episodes = sum(r[0] for r in rows), sum(r[1] for r in rows)
        gap = max(r[2] for r in rows)
        equal, tried = sum(r[3] for r in rows), sum(r[4] for r in rows)
        table.append([family, f"{accepted}/{episodes}", f"{gap:.1e}", f"{equal}/{tried}"])
        print("| " + " | ".join(table[-1]) + " |", flush=True)
    worst = max(float(row[2]) for row in table)
    headline = (
        f"largest rollout vs teacher-forced logprob difference over every family: {worst:.1e}"
    )
    print(headline)
    rec = started.record([record.Table(columns, table)], headline, {"seeds": args.seeds})
    record.write(rec, args.record_dir)


if __name__ == "__main__":
    main()
