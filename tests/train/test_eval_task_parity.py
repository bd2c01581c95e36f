"""A trained checkpoint's ``vlrollout eval`` reproduces the last held-out evaluation of its
training run with ``vlrollout.eval_task``: the same completions, metrics and rejections.

Each run: ``vlrollout train`` (two steps from the tiny grounding model, a held-out file of
referring expressions in RefCOCO item form: ``boxes`` + ``expression``, no ``messages``), then
``vlrollout eval`` on the checkpoint it saved, with the run's ``gconfig.max_new_tokens``, prompt
and box format and otherwise its defaults. Three runs: on a deterministic training engine (the
same run every time, so the test can also check that the compared completions are worth
comparing), on the recipe's batching engine, and with LoRA (merged weights in the checkpoint).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.train.procs import run_train
from vlrollout.eval.main import main as eval_main
from vlrollout.jsonl import read_jsonl, write_jsonl
from vlrollout.tiny.synthetic import generate_items, write_dataset

MAX_NEW_TOKENS = 19
PROMPT = "Where is the {expression}? Answer with a box."  # the grounding model's own question
STEPS = 2
HELD_OUT = 10
ENGINES = ("deterministic", "batching", "lora")


@dataclass
class Run:
    """What a training run and the eval of its checkpoint wrote."""

    brief: dict  # what vlrollout train printed
    evals: list[dict]  # eval.jsonl
    shown: list[dict]  # eval_rollouts.jsonl: every held-out item at every evaluation
    results: dict  # vlrollout eval's results.json
    predictions: dict[str, dict]  # vlrollout eval's predictions by item id


def _held_out_file(folder: Path) -> Path:
    """Ten items in RefCOCO item form: seven prompted by the run's template (the model answers with
    a box), two with their own message, the bare expression (the model runs on to the length
    limit), and one whose box has no area (refused by the task)."""
    items = generate_items("ground", HELD_OUT, seed=300)
    folder = write_dataset(items, folder).parent
    rows = [
        {"id": it["id"], "images": [f"images/{it['id']}.png"], "boxes": it["boxes"]}
        | {"expression": it["object"]}
        for it in items
    ]
    for row in rows[2:4]:
        row["messages"] = f"<image>{row['expression']}"
    rows[-1]["boxes"] = [[5, 5, 5, 20]]
    path = folder / "refcoco.jsonl"
    write_jsonl(path, rows)
    return path


def _train_and_evaluate(root: Path, deterministic: bool, *extra: str) -> Run:
    held_out = _held_out_file(root / "data")
    out = root / "run"
    proc = run_train(
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
        f"vlrollout.engine.deterministic={str(deterministic).lower()}",
        "vlrollout.eval_task=refcoco",
        "vlrollout.eval_box_format=qwen2_vl",  # the tiny model writes Qwen2-VL's boxes
        f"vlrollout.prompt='{PROMPT}'",
        f"valid_dataset.path={held_out}",
        *extra,
    )
    checkpoint = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    evaluated = root / "eval"
    flags = ["--model", str(checkpoint), "--data", str(held_out), "--task", "refcoco"]
    flags += ["--output", str(evaluated), "--max-new-tokens", str(MAX_NEW_TOKENS)]
    flags += ["--prompt", PROMPT, "--box-format", "qwen2_vl", "--no-progress"]
    assert eval_main(flags) == 0
    predictions = {}
    for path in (evaluated / "predictions").glob("*.json"):
        prediction = json.loads(path.read_text())
        predictions[prediction["id"]] = prediction
    return Run(
        brief=json.loads(proc.stdout[proc.stdout.index("{") : proc.stdout.index("}") + 1]),
        evals=read_jsonl(out / "eval.jsonl"),
        shown=read_jsonl(out / "eval_rollouts.jsonl"),
        results=json.loads((evaluated / "results.json").read_text()),
        predictions=predictions,
    )


@pytest.fixture(scope="module")
def deterministic(tmp_path_factory):
    return _train_and_evaluate(tmp_path_factory.mktemp("deterministic"), True)


@pytest.fixture(scope="module")
def batching(tmp_path_factory):
    return _train_and_evaluate(tmp_path_factory.mktemp("batching"), False)


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """LoRA: the checkpoint holds the merged weights the engine evaluated with (and the adapter)."""
    root = tmp_path_factory.mktemp("lora")
    return _train_and_evaluate(root, True, "actor.use_lora=true", "actor.lora_rank=4")


def _completions(run: Run, step: int) -> dict[str, str | None]:
    return {r["id"]: r["completion"] for r in run.shown if r["step"] == step}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_the_checkpoints_eval_gives_the_last_held_out_metrics(request, engine):
    run: Run = request.getfixturevalue(engine)
    last = run.evals[-1]
    assert last["step"] == STEPS
    metrics = {name: entry["value"] for name, entry in run.results["metrics"].items()}
    assert set(metrics) >= {"IoU", "ACC@0.5", "Center_ACC"}
    assert {k: last[f"eval/{k}"] for k in metrics} == metrics  # exactly equal
    assert last["eval/mean"] == metrics["ACC@0.5"]
    assert last["eval/n"] - last["eval/rejected"] == run.results["items"] == HELD_OUT - 1
    assert sum(run.results["rejected"].values()) == last["eval/rejected"] == 1
    assert run.brief["held_out_metric"] == "refcoco ACC@0.5"
    assert run.brief["held_out_last_rejected"] == f"1 of {HELD_OUT} items (not scored)"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_the_checkpoints_eval_gives_the_last_evaluations_completions(request, engine):
    run: Run = request.getfixturevalue(engine)
    trained = _completions(run, STEPS)
    assert len(trained) == HELD_OUT  # every held-out item shown, the refused one without text
    evaluated = {i: p["completions"][0] for i, p in run.predictions.items() if p["completions"]}
    assert {i: c for i, c in trained.items() if c is not None} == evaluated
    assert len(evaluated) == HELD_OUT - 1


@pytest.mark.slow
def test_the_compared_numbers_are_worth_comparing(deterministic):
    """Training changed the completions (so a checkpoint of other weights, or an evaluation before
    the last update, would not reproduce them), some are cut by the length limit (so another
    limit would not), and the boxes read score above 0 (so a wrong box format would not)."""
    assert _completions(deterministic, 0) != _completions(deterministic, STEPS)
    assert any(p["generated_tokens"] == MAX_NEW_TOKENS for p in deterministic.predictions.values())
    assert deterministic.evals[-1]["eval/IoU"] > 0


@pytest.mark.slow
def test_the_lora_run_compares_changed_completions(lora):
    """The merged LoRA weights changed some answers: the checkpoint is not the base model."""
    assert _completions(lora, 0) != _completions(lora, STEPS)
