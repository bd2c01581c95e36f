"""A training step or held-out evaluation with no accepted episode stops the run with the counts
and the top reasons (no empty batch handed to AReaL, no 0.0000 score from nothing); an evaluation
with some rejections states how many next to its score."""

from __future__ import annotations

import asyncio
import re

import pytest
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.jsonl import append_jsonl
from vlrollout.ledger import NothingAccepted
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.train.batch import rollout_step
from vlrollout.train.evaluation import eval_line, evaluate
from vlrollout.train.report import write_report
from vlrollout.workflows import RLVRWorkflow

REWARD = "tests.workflows.reward_fns.contains_answer"


def _item(i: int, question: str = "What is 2+2?") -> dict:
    return {"id": f"q{i}", "messages": question, "answer": "4", "task": "count"}


def _engine(tokenizer) -> ScriptedEngine:
    """Answers "It is 4", except to prompts that mention "broken", where the server fails."""
    answer = tokenizer.encode("It is 4", add_special_tokens=False) + [tokenizer.eos_token_id]

    def script(req) -> list[int]:
        if "broken" in tokenizer.decode(req.input_ids):
            raise ConnectionError("server went away")
        return answer

    return ScriptedEngine(script, stop_token_ids=[tokenizer.eos_token_id])


class _Actor:
    """``rollout_batch`` as AReaL 1.0.4's actor runs it on one process: every episode through the
    workflow on the engine, rejected ones left out, then the data-parallel redistribution, which
    fails on an empty batch (``fails_on_empty``) with AReaL's own message."""

    def __init__(self, engine, fails_on_empty: bool = True) -> None:
        self.engine, self.fails_on_empty = engine, fails_on_empty

    def rollout_batch(self, data, workflow, group_size):
        async def run():
            episodes = [it for it in data for _ in range(group_size)]
            return await asyncio.gather(
                *(workflow.arun_episode(self.engine, it) for it in episodes)
            )

        batch = [t for t in asyncio.run(run()) if t is not None]
        if not batch and self.fails_on_empty:
            raise RuntimeError("Number of values 0 is smaller than min_groups 1")
        return batch


@pytest.mark.parametrize("fails_on_empty", [True, False], ids=["areal-raises", "empty-batch"])
def test_a_step_with_no_accepted_episode_stops_with_counts_and_reasons(tokenizer, fails_on_empty):
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    engine = _engine(tokenizer)
    rollout_step(_Actor(engine), wf, [_item(9)], group_size=1, step=1)  # an earlier, good step
    data = [_item(0, "this is broken"), _item(1, "also broken"), {"id": "q2", "messages": 5}]
    with pytest.raises(NothingAccepted) as caught:
        rollout_step(_Actor(engine, fails_on_empty), wf, data, group_size=2, step=3)
    lines = str(caught.value).splitlines()
    assert lines[0] == "no episode of training step 3 was accepted (6 episodes, 6 rejected)"
    # The example is the first rejection recorded; episodes run concurrently, so q0 or q1.
    assert re.fullmatch(r"  engine_error: 4 \(e\.g\. item q[01]: ConnectionError: .*\)", lines[1])
    assert lines[2].startswith("  bad_message: 2 (e.g. item q2: ")
    assert caught.value.reasons[0][:2] == ("engine_error", 4)


def test_a_step_with_some_accepted_episodes_returns_its_batch_and_rejections(tokenizer):
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    data = [_item(0), _item(1, "this is broken")]
    batch, outcome = rollout_step(_Actor(_engine(tokenizer)), wf, data, group_size=2, step=1)
    assert len(batch) == 2
    assert outcome["accepted"] == 2 and outcome["rejected"] == 2
    assert outcome["rejected_by_reason"] == {"engine_error": 2}


def test_other_rollout_errors_propagate(tokenizer):
    class Broken:
        def rollout_batch(self, data, workflow, group_size):
            raise ConnectionError("no name_resolve key")

    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    with pytest.raises(ConnectionError):
        rollout_step(Broken(), wf, [_item(0)], group_size=1, step=1)


def test_an_evaluation_with_every_episode_rejected_reports_no_score(tokenizer):
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    items = [_item(i, "this is broken") for i in range(3)]
    with pytest.raises(NothingAccepted) as caught:
        evaluate(_engine(tokenizer), wf, items, step=5)
    message = str(caught.value)
    assert "no episode of the held-out evaluation 'eval' at step 5 was accepted" in message
    assert "(3 episodes, 3 rejected)" in message
    assert re.search(
        r"engine_error: 3 \(e\.g\. item q\d: ConnectionError: server went away", message
    )


def test_an_evaluation_with_some_rejections_counts_them_next_to_the_score(tokenizer, tmp_path):
    wf = RLVRWorkflow(REWARD, GenerationHyperparameters(max_new_tokens=8), tokenizer)
    items = [_item(0), _item(1), _item(2, "this is broken"), _item(3)]
    rec = evaluate(_engine(tokenizer), wf, items, step=0)
    # A rejected episode scores 0 and stays in the denominator: 3 right answers of 4 episodes.
    assert rec["eval/mean"] == rec["eval/count"] == 0.75
    assert rec["eval/n"] == 4 and rec["eval/rejected"] == 1
    assert eval_line(rec) == "eval 0.7500 over 4 episodes (1 rejected, scored 0)"

    append_jsonl(tmp_path / "eval.jsonl", {"step": 0, **rec})
    report = write_report(tmp_path).read_text()
    assert "<th>eval/rejected of n</th>" in report and "<td>1 of 4</td>" in report
    assert "a rejected episode scores 0" in report
