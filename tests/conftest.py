"""Shared fixtures: an offline tokenizer and Qwen2-VL processor built in code (no hub).

Property-based tests explore new random examples on every local run; under CI (the ``CI``
environment variable set, as ``.ci/run`` does) they run the ``ci`` Hypothesis profile instead:
derandomised, so a CI failure reproduces on every rerun of the same commit, with the default
number of examples and no per-example deadline (a shared CI machine is slow in bursts). Run ``CI=true make test`` to see exactly what CI sees.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from vlrollout.tiny.tokenizer import build_bpe_tokenizer, build_qwen2vl_processor

settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None)
if os.environ.get("CI", "").lower() not in ("", "0", "false"):
    settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _learning_recipes_beside_the_suite(request, tmp_path_factory):
    """Starts the shipped recipes' learning runs (``tests/train/test_learning_recipes.py``,
    when the session runs it) with the session, niced, so they use the CPU time the other tests
    leave idle instead of ending the suite with a long single-threaded run."""
    from tests.train.test_learning_recipes import start_recipe_runs

    start_recipe_runs(request.session, tmp_path_factory)


@pytest.fixture(scope="session")
def tokenizer():
    return build_bpe_tokenizer()


@pytest.fixture(scope="session")
def qwen2vl_processor(tokenizer):
    return build_qwen2vl_processor(tokenizer)


@pytest.fixture(autouse=True)
def _fresh_shared_workflow_state():
    """Each test starts with no named workflow state (``share=``) from another test."""
    from vlrollout.workflows.shared import release_all

    release_all()
    yield
    release_all()


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """The output folder of a two-step ``vlrollout train`` of the tiny model with every tracker
    (TensorBoard in ``tensorboard/``, W&B and SwanLab offline): read by the tracker tests, its
    checkpoint served by the OpenAI client tests."""
    from tests.train.procs import TINY_RUN, TRACKERS, run_train

    out = tmp_path_factory.mktemp("trained") / "run"
    run_train(out, *TINY_RUN, *TRACKERS, f"stats_logger.tensorboard.path={out / 'tensorboard'}")
    return out


@pytest.fixture(scope="session")
def trained_lora_run(tmp_path_factory):
    """The output folder of the same run with LoRA (``actor.use_lora``): its checkpoint holds
    merged weights, the adapter in ``adapter/``."""
    from tests.train.procs import TINY_RUN, run_train

    out = tmp_path_factory.mktemp("trained-lora") / "run"
    run_train(out, *TINY_RUN, "actor.use_lora=true", "actor.lora_rank=4")
    return out
