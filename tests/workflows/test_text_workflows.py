"""Text workflows with a scripted engine: output format, masks, rewards, rejections."""

from __future__ import annotations

import asyncio

import pytest
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils.data import concat_padded_tensors
from areal.utils.hf_utils import apply_chat_template

from tests.serve.conftest import ASSET as TINY_MODEL
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.errors import EngineNotInitialized
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import MultiAttemptWorkflow, RLVRWorkflow
from vlrollout.workflows.multi_attempt import feedback_token_ids

GCONFIG = GenerationHyperparameters(max_new_tokens=16)
ITEM = {"id": "q1", "messages": [{"role": "user", "content": "What is 2+2?"}], "answer": "4"}


def _enc(tok, text, eos=True):
    return tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if eos else [])


def run(coro):
    return asyncio.run(coro)


def test_rlvr_trajectory_matches_prompt_and_completion(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    out = _enc(tokenizer, "It is 4")
    engine = ScriptedEngine([out], stop_token_ids=[tokenizer.eos_token_id])
    traj = run(wf.arun_episode(engine, ITEM))
    assert check_trajectory_format(traj)
    prompt = apply_chat_template(
        tokenizer, ITEM["messages"], tokenize=True, add_generation_prompt=True
    )
    assert engine.requests[0].input_ids == prompt
    assert traj["input_ids"][0].tolist() == prompt + out
    assert traj["loss_mask"][0].tolist() == [0] * len(prompt) + [1] * len(out)
    assert traj["rewards"].item() == 1.0
    assert wf.ledger.accepted == 1 and wf.ledger.rejected == 0


def test_rlvr_wrong_answer_scores_zero(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    engine = ScriptedEngine([_enc(tokenizer, "It is 5")])
    traj = run(wf.arun_episode(engine, ITEM))
    assert traj["rewards"].item() == 0.0


def test_stop_token_is_not_part_of_the_reward_text(tokenizer):
    from tests.workflows import reward_fns  # noqa: F401 - importable for the pool

    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    assert wf.ctx.decode_completion(_enc(tokenizer, "It is 4")) == "It is 4"


def test_group_of_episodes_concatenates(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    engine = ScriptedEngine([_enc(tokenizer, "4"), _enc(tokenizer, "no idea at all")])

    async def group():
        return await asyncio.gather(*(wf.arun_episode(engine, ITEM) for _ in range(2)))

    trajs = run(group())
    batch = concat_padded_tensors(trajs)
    assert check_trajectory_format(batch, batch_size=2)
    assert sorted(batch["rewards"].tolist()) == [0.0, 1.0]


@pytest.mark.parametrize(
    ("reward", "reason"),
    [("tests.workflows.reward_fns.raises", "reward_error")],
)
def test_failing_reward_rejects_with_reason(tokenizer, reward, reason):
    wf = RLVRWorkflow(reward, GCONFIG, tokenizer)
    assert run(wf.arun_episode(ScriptedEngine([_enc(tokenizer, "4")]), ITEM)) is None
    assert wf.ledger.by_reason == {reason: 1}
    assert wf.ledger.records[0].item == "item q1"
    assert "reward exploded" in wf.ledger.records[0].detail


def test_reward_timeout_rejects_instead_of_scoring_zero(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.sleeps", GCONFIG, tokenizer, reward_timeout_s=0.5)
    assert run(wf.arun_episode(ScriptedEngine([_enc(tokenizer, "4")]), ITEM)) is None
    assert wf.ledger.by_reason == {"reward_timeout": 1}


def test_raw_images_never_reach_the_reward_pool(tokenizer):
    wf = RLVRWorkflow("tests.workflows.reward_fns.sees_images", GCONFIG, tokenizer)
    traj = run(wf.arun_episode(ScriptedEngine([_enc(tokenizer, "4")]), dict(ITEM)))
    assert traj["rewards"].item() == 1.0


@pytest.mark.parametrize(
    ("script", "reason"),
    [([[]], "empty_output")],
)
def test_engine_failures_reject_with_reason(tokenizer, script, reason):
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    assert run(wf.arun_episode(ScriptedEngine(script), ITEM)) is None
    assert wf.ledger.by_reason == {reason: 1}


def test_engine_exception_rejects_with_reason(tokenizer):
    def boom(req):
        raise ConnectionError("server gone")

    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    assert run(wf.arun_episode(ScriptedEngine(boom), ITEM)) is None
    assert wf.ledger.by_reason == {"engine_error": 1}
    assert "server gone" in wf.ledger.records[0].detail


def test_an_engine_never_initialised_is_an_error_not_a_rejection(tokenizer):
    """A server that fails is one episode's rejection; an engine the caller never started is
    the caller's bug, and rejecting every episode would hide it as a run of Nones."""
    engine = LocalInferenceEngine.from_pretrained(TINY_MODEL)  # no .initialize()
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    with pytest.raises(EngineNotInitialized, match=r"initialize\(\)"):
        run(wf.arun_episode(engine, ITEM))
    assert wf.ledger.by_reason == {}


@pytest.mark.parametrize("item", [None, "What is 2+2?", ["messages"]])
def test_an_item_that_is_not_a_mapping_is_the_callers_error(tokenizer, item):
    """A dataset that yields something other than dicts is a bug before any episode: named,
    not an AttributeError from deep inside the preparation, and no episode is counted."""
    wf = RLVRWorkflow("tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer)
    with pytest.raises(TypeError, match=f"a data item is a dict .* got {type(item).__name__}"):
        run(wf.arun_episode(ScriptedEngine([_enc(tokenizer, "4")]), item))
    assert wf.ledger.submitted == 0


def test_bad_messages_and_long_prompts_are_rejected_with_reasons(tokenizer):
    wf = RLVRWorkflow(
        "tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer, max_prompt_tokens=5
    )
    engine = ScriptedEngine([_enc(tokenizer, "4")])
    assert run(wf.arun_episode(engine, {"id": 7, "messages": 3})) is None
    assert run(wf.arun_episode(engine, ITEM)) is None
    assert wf.ledger.by_reason == {"bad_message": 1, "prompt_too_long": 1}
    assert wf.ledger.submitted == 2 and engine.requests == []


def test_feedback_tokens_reproduce_the_chat_template(tokenizer):
    """Prompt + attempt + feedback must equal the template rendering of the whole conversation."""
    fb = "Try again."
    ids = feedback_token_ids(tokenizer, fb)
    msgs = [{"role": "user", "content": "Q"}]
    prompt = apply_chat_template(tokenizer, msgs, tokenize=True, add_generation_prompt=True)
    attempt = _enc(tokenizer, "A")
    full = apply_chat_template(
        tokenizer,
        msgs + [{"role": "assistant", "content": "A"}, {"role": "user", "content": fb}],
        tokenize=True,
        add_generation_prompt=True,
    )
    assert prompt + attempt + ids == full


@pytest.mark.parametrize("feedback", ["Try again <|image_pad|> please", "No<|im_end|>\n3"])
def test_feedback_with_special_token_text_is_refused(tokenizer, feedback):
    """Such feedback adds an image placeholder without an image, or a fake turn to the packed
    conversation; tool observations refuse the same text."""
    with pytest.raises(ValueError, match="feedback holds the special token"):
        MultiAttemptWorkflow(
            "tests.workflows.reward_fns.contains_answer",
            GCONFIG,
            tokenizer,
            max_turns=2,
            turn_discount=0.5,
            feedback=feedback,
        )


def _five_attempts(tokenizer, **settings):
    """A multi-attempt workflow of up to 5 attempts, each extra one discounting by 0.5."""
    return MultiAttemptWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GCONFIG,
        tokenizer,
        max_turns=5,
        turn_discount=0.5,
        **settings,
    )


def test_multi_attempt_packs_turns_and_discounts(tokenizer):
    wrong, right = _enc(tokenizer, "5"), _enc(tokenizer, "4")
    engine = ScriptedEngine([wrong, wrong, right], stop_token_ids=[tokenizer.eos_token_id])
    wf = _five_attempts(tokenizer)
    traj = run(wf.arun_episode(engine, ITEM))
    assert check_trajectory_format(traj)
    assert traj["rewards"].item() == pytest.approx(0.25)  # right on the third attempt
    assert len(engine.requests) == 3
    # Each request continues the previous sequence: prompt, attempt, feedback, ...
    prompt = engine.requests[0].input_ids
    fb = wf.feedback_ids
    assert engine.requests[1].input_ids == prompt + wrong + fb
    assert engine.requests[2].input_ids == prompt + wrong + fb + wrong + fb
    expected_mask = [0] * len(prompt) + ([1] * len(wrong) + [0] * len(fb)) * 2 + [1] * len(right)
    assert traj["loss_mask"][0].tolist() == expected_mask
    assert traj["input_ids"][0].tolist() == engine.requests[2].input_ids + right


def test_multi_attempt_ends_at_the_context_limit_with_its_attempts(tokenizer):
    """Room for two attempts and one feedback, not a third attempt: the episode ends after the
    second (wrong) attempt and is kept, where the engine would refuse the third request."""
    wrong = _enc(tokenizer, "5")
    engine = ScriptedEngine([wrong] * 5, stop_token_ids=[tokenizer.eos_token_id])
    probe = _five_attempts(tokenizer)
    prompt = len(run(probe.ctx.prepare(ITEM)).input_ids)
    two = prompt + 2 * len(wrong) + len(probe.feedback_ids)
    wf = _five_attempts(tokenizer, max_total_tokens=two + len(probe.feedback_ids))
    traj = run(wf.arun_episode(engine, ITEM))
    assert traj is not None and check_trajectory_format(traj)
    assert len(engine.requests) == 2 and traj["input_ids"].shape[1] == two
    assert traj["rewards"].item() == 0.0
    assert wf.ledger.by_reason == {}


def test_multi_attempt_closes_a_truncated_attempt_with_eos(tokenizer):
    cut = _enc(tokenizer, "hmm", eos=False)
    engine = ScriptedEngine([cut, _enc(tokenizer, "4")])
    wf = MultiAttemptWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GCONFIG,
        tokenizer,
        max_turns=2,
        turn_discount=1.0,
    )
    traj = run(wf.arun_episode(engine, ITEM))
    assert engine.requests[1].input_ids[-len(wf.feedback_ids) - 1] == tokenizer.eos_token_id
    assert traj["rewards"].item() == 1.0


def test_multi_attempt_stops_at_max_turns(tokenizer):
    engine = ScriptedEngine([_enc(tokenizer, "5")])
    wf = MultiAttemptWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GCONFIG,
        tokenizer,
        max_turns=3,
        turn_discount=0.9,
    )
    traj = run(wf.arun_episode(engine, ITEM))
    assert len(engine.requests) == 3 and traj["rewards"].item() == 0.0
    assert int(traj["loss_mask"].sum()) == 3 * len(_enc(tokenizer, "5"))


@pytest.mark.parametrize(("turns", "discount"), [(0, 0.5), (2, 0.0), (2, 1.5)])
def test_multi_attempt_rejects_bad_config(tokenizer, turns, discount):
    with pytest.raises(ValueError):
        MultiAttemptWorkflow(
            "tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer, turns, discount
        )


def test_workflows_are_importable_by_string():
    from areal.utils.dynamic_import import import_from_string

    for name in [
        "RLVRWorkflow",
        "VisionRLVRWorkflow",
        "MultiAttemptWorkflow",
        "VisionMultiAttemptWorkflow",
    ]:
        cls = import_from_string(f"vlrollout.workflows.{name}")
        from areal.api import RolloutWorkflow

        assert issubclass(cls, RolloutWorkflow)


def test_unpicklable_reward_is_refused_at_construction(tokenizer):
    with pytest.raises(ValueError, match="cannot be pickled"):
        RLVRWorkflow(lambda *a, **k: 1.0, GCONFIG, tokenizer)


@pytest.mark.parametrize("room", [2, 7])
def test_multi_attempt_rejects_a_prompt_over_the_context_limit_as_too_long(tokenizer, room):
    """As the tool workflow does: the limit, not the engine, is named."""
    engine = ScriptedEngine([_enc(tokenizer, "5")], stop_token_ids=[tokenizer.eos_token_id])
    wf = _five_attempts(tokenizer, max_total_tokens=room)
    assert run(wf.arun_episode(engine, ITEM)) is None and engine.requests == []
    assert list(wf.ledger.by_reason) == ["prompt_too_long"]


@pytest.mark.parametrize(
    ("settings", "error", "words"),
    [
        ({"turn_discount": "0.5"}, TypeError, "turn_discount must be a number"),
        ({"turn_discount": True}, TypeError, "turn_discount must be a number"),
        ({"turn_discount": float("nan")}, ValueError, "turn_discount must be in"),
        ({"feedback": None}, TypeError, "feedback must be a str"),
        ({"max_prompt_tokens": True}, TypeError, "max_prompt_tokens must be a whole number"),
        ({"max_prompt_tokens": 30.7}, TypeError, "max_prompt_tokens must be a whole number"),
        ({"reward_timeout_s": float("nan")}, ValueError, "reward timeout must be positive"),
    ],
)
def test_settings_of_the_wrong_type_are_refused_naming_them(tokenizer, settings, error, words):
    kwargs = {"max_turns": 2, "turn_discount": 0.5, **settings}
    with pytest.raises(error, match=words):
        MultiAttemptWorkflow(
            "tests.workflows.reward_fns.contains_answer", GCONFIG, tokenizer, **kwargs
        )
