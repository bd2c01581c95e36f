"""A trained checkpoint's ``vlrollout eval`` reproduces the last held-out evaluation of its
training run with ``vlrollout.eval_task``: the same completions, metrics and rejections.

One run of ``vlrollout train`` (two steps from the tiny grounding model, a held-out file of
referring expressions in RefCOCO item form: ``boxes`` + ``expression``, no ``messages``), then
``vlrollout eval`` on the checkpoint it saved, with the run's ``gconfig.max_new_tokens`` and
prompt.
"""

from __future__ import annotations

import json

import pytest

from tests.train.procs import run_train
from vlrollout.eval.main import main as eval_main
from vlrollout.jsonl import read_jsonl, write_jsonl
from vlrollout.tiny.synthetic import generate_items, write_dataset

MAX_NEW_TOKENS = 24
PROMPT = "{expression}"  # not the model's question: some completions run to the length limit
STEPS = 2
HELD_OUT = 5


@pytest.fixture(scope="module")
def trained_and_evaluated(tmp_path_factory):
    """``(last eval.jsonl record, eval_rollouts.jsonl, results.json, eval's predictions by
    id)``."""
    root = tmp_path_factory.mktemp("eval_task_parity")
    items = generate_items("ground", HELD_OUT, seed=300)
    folder = write_dataset(items, root / "data").parent
    rows = [
        {"id": it["id"], "images": [f"images/{it['id']}.png"], "boxes": it["boxes"]}
        | {"expression": it["object"]}
        for it in items
    ]
    rows[-1]["boxes"] = [[5, 5, 5, 20]]  # no area: refused by the task, in training and in eval
    held_out = folder / "refcoco.jsonl"
    write_jsonl(held_out, rows)
    out = root / "run"
    run_train(
        out,
        "actor.path=assets/tiny-qwen3vl-ground",
        f"total_train_steps={STEPS}",
        "train_dataset.batch_size=2",
        "gconfig.n_samples=2",
        f"gconfig.max_new_tokens={MAX_NEW_TOKENS}",
        "actor.optimizer.lr=1e-3",  # steps large enough to change some greedy answers
        "vlrollout.train_items=4",
        "vlrollout.eval_every=0",
        "vlrollout.progress=false",
        f"vlrollout.log_rollouts={HELD_OUT}",
        "vlrollout.engine.deterministic=true",  # the same run every time: its rollouts too
        "+vlrollout.eval_task=refcoco",
        f"+vlrollout.prompt='{PROMPT}'",
        "+valid_dataset.type=rl",
        f"+valid_dataset.path={held_out}",
    )
    checkpoint = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    evaluated = root / "eval"
    status = eval_main(
        [
            "--model",
            str(checkpoint),
            "--data",
            str(held_out),
            "--task",
            "refcoco",
            "--output",
            str(evaluated),
            "--max-new-tokens",
            str(MAX_NEW_TOKENS),
            "--prompt",
            PROMPT,
            "--seed",
            "1",
            "--no-progress",
        ]
    )
    assert status == 0
    last = read_jsonl(out / "eval.jsonl")[-1]
    shown = read_jsonl(out / "eval_rollouts.jsonl")
    results = json.loads((evaluated / "results.json").read_text())
    predictions = {}
    for path in (evaluated / "predictions").glob("*.json"):
        prediction = json.loads(path.read_text())
        predictions[prediction["id"]] = prediction
    return last, shown, results, predictions


@pytest.mark.slow
def test_the_checkpoints_eval_gives_the_last_held_out_metrics(trained_and_evaluated):
    last, _, results, _ = trained_and_evaluated
    assert last["step"] == STEPS
    metrics = {name: entry["value"] for name, entry in results["metrics"].items()}
    assert set(metrics) >= {"IoU", "ACC@0.5", "Center_ACC"}
    assert {k: last[f"eval/{k}"] for k in metrics} == metrics  # exactly equal
    assert last["eval/mean"] == metrics["ACC@0.5"]
    assert last["eval/n"] - last["eval/rejected"] == results["items"] == HELD_OUT - 1
    assert sum(results["rejected"].values()) == last["eval/rejected"] == 1


@pytest.mark.slow
def test_the_checkpoints_eval_gives_the_last_evaluations_completions(trained_and_evaluated):
    """Every held-out completion of the last evaluation, which training changed (so a checkpoint
    of other weights, or an evaluation before the last update, would not reproduce them), some
    cut by the length limit (so another limit would not reproduce them)."""
    last, shown, _, predictions = trained_and_evaluated
    by_step = {
        step: {r["id"]: r["completion"] for r in shown if r["step"] == step}
        for step in (0, last["step"])
    }
    trained = by_step[last["step"]]
    assert len(trained) == HELD_OUT  # every held-out item shown, the refused one without text
    evaluated = {i: p["completions"][0] for i, p in predictions.items() if p["completions"]}
    assert {i: c for i, c in trained.items() if c is not None} == evaluated
    assert len(evaluated) == HELD_OUT - 1
    assert by_step[0] != trained
    assert any(p["generated_tokens"] == MAX_NEW_TOKENS for p in predictions.values())
