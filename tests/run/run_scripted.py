"""A real ``Runner`` over a JSONL file with the scripted engine; killed and resumed by the tests.

Usage: python -m tests.run.run_scripted DATA OUTPUT LATENCY_S
"""

from __future__ import annotations

import asyncio
import sys

from areal.api.cli_args import GenerationHyperparameters

from vlrollout.run.datasets import load_items
from vlrollout.run.runner import Runner
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.tiny.tokenizer import build_bpe_tokenizer
from vlrollout.workflows import RLVRWorkflow


def main(data: str, output: str, latency: float) -> None:
    tok = build_bpe_tokenizer()
    answer = tok.encode("4", add_special_tokens=False) + [tok.eos_token_id]
    engine = ScriptedEngine([answer], latency_s=(latency, latency))
    wf = RLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GenerationHyperparameters(), tok
    )
    runner = Runner(wf, engine, tok, output, group_size=2, concurrency=2)
    summary = asyncio.run(runner.run(load_items(data), progress=False))
    print(summary["items"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
