"""A real ``Runner`` over a JSONL file with the scripted engine, run the way ``vlrollout run`` runs
it (signal handling, exit statuses); killed, interrupted and resumed by the tests.

Usage: python -m tests.run.run_scripted DATA OUTPUT LATENCY_S
"""

from __future__ import annotations

import asyncio
import sys

from areal.api.cli_args import GenerationHyperparameters

from vlrollout.cli import run_command
from vlrollout.datasets import load_items
from vlrollout.run.main import run_items
from vlrollout.run.runner import Runner
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.tiny.tokenizer import build_bpe_tokenizer
from vlrollout.workflows import RLVRWorkflow


def main(data: str, output: str, latency: float) -> int:
    tok = build_bpe_tokenizer()
    answer = tok.encode("4", add_special_tokens=False) + [tok.eos_token_id]
    engine = ScriptedEngine([answer], latency_s=(latency, latency))
    wf = RLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GenerationHyperparameters(), tok
    )
    runner = Runner(wf, engine, tok, output, group_size=2, concurrency=2)

    def run() -> int:
        summary = asyncio.run(run_items(runner, load_items(data), progress=False))
        print(summary["items"])
        return 0

    return run_command("run", run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
