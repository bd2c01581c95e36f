"""The OpenAI Python client, as evaluation harnesses use it, against ``vlrollout serve
--protocol vllm``: model listing, image chat with ``n`` choices, ``logprobs`` with token text and
``top_logprobs``, ``finish_reason`` and ``usage``, streaming.

Every check runs on the shipped tiny model and on what ``vlrollout train`` leaves behind: the
latest checkpoint of a trained run and of a LoRA run (merged weights), each copied alone into a
fresh folder and served from there, so the checkpoint must hold everything the server loads
(weights, config, processor, tokenizer, chat template)."""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from openai import OpenAI

from tests.serve.conftest import ASSET, SAMPLES, serving
from vlrollout.engine import LocalInferenceEngine

IMAGE_PATH = SAMPLES.parent / "images" / "count-2-0.png"
IMAGE_URL = "data:image/png;base64," + base64.b64encode(IMAGE_PATH.read_bytes()).decode()
QUESTION = "How many shapes are there? Answer with a number."
MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            {"type": "text", "text": QUESTION},
        ],
    }
]

MODELS = [
    "shipped",
    pytest.param("trained checkpoint", marks=pytest.mark.slow),
    pytest.param("LoRA checkpoint", marks=pytest.mark.slow),
]
RUNS = {"trained checkpoint": "trained_run", "LoRA checkpoint": "trained_lora_run"}


@dataclass
class Served:
    openai: OpenAI
    engine: LocalInferenceEngine
    model: str  # the folder served: the id /v1/models lists


def latest_checkpoint_copy(run: Path, dest: Path) -> Path:
    """A copy of the run's latest checkpoint (``checkpoints/latest`` names it) alone in ``dest``."""
    from vlrollout.train import checkpoint

    latest = checkpoint.latest(run)
    assert latest is not None and latest.step == 2, run
    assert (run / "checkpoints" / "latest").read_text().strip() == latest.path.name
    return Path(shutil.copytree(latest.path, dest / latest.path.name))


@pytest.fixture(scope="module", params=MODELS)
def client(request, tmp_path_factory):
    model = ASSET
    if request.param in RUNS:
        run = request.getfixturevalue(RUNS[request.param])
        model = latest_checkpoint_copy(run, tmp_path_factory.mktemp("served"))
    engine = LocalInferenceEngine.from_pretrained(str(model), dtype=torch.float32).initialize()
    try:
        with serving("vllm", engine) as (server, _):
            openai = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
            yield Served(openai, engine, str(model))
    finally:
        engine.destroy()


def _chat(client, **kwargs):
    return client.openai.chat.completions.create(model=client.model, messages=MESSAGES, **kwargs)


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.openai.models.list().data] == [client.model]


def test_served_processor_prepares_as_the_shipped_one(client):
    """The served folder's processor, tokenizer and chat template (a checkpoint's own copies)
    turn an image question into the shipped model's exact tokens and pixels."""
    from PIL import Image
    from transformers import AutoProcessor

    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
    ]
    image = Image.open(IMAGE_PATH).convert("RGB")
    prepared = []
    for processor in (client.engine.processor, AutoProcessor.from_pretrained(ASSET)):
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prepared.append(processor(text=[text], images=[[image]], return_tensors="pt"))
    served, shipped = prepared
    assert served.keys() == shipped.keys()
    for key in shipped:
        assert torch.equal(served[key], shipped[key]), key


def test_length_finish_usage_and_token_text(client):
    out = _chat(client, max_tokens=3, temperature=0, logprobs=True, extra_body={"ignore_eos": True})
    (choice,) = out.choices
    assert choice.finish_reason == "length"
    tokens = choice.logprobs.content
    assert out.usage.completion_tokens == len(tokens) == 3
    assert out.usage.total_tokens == out.usage.prompt_tokens + 3
    for entry in tokens:
        assert not entry.token.startswith("token_id:")
        assert bytes(entry.bytes).decode("utf-8") == entry.token
    special = set(client.engine.tokenizer.all_special_tokens)
    assert "".join(e.token for e in tokens if e.token not in special) == choice.message.content


def test_a_chat_without_max_tokens_runs_to_the_end_of_the_context(client):
    """vLLM's chat default: no ``max_tokens`` leaves the completion the rest of the context
    (its completions route keeps 16)."""
    out = _chat(client, temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    assert out.choices[0].finish_reason == "length"
    assert out.usage.total_tokens == client.engine.context_len
    plain = client.openai.completions.create(
        model=client.model, prompt=[1, 2], extra_body={"ignore_eos": True}
    )
    assert plain.usage.completion_tokens == 16


def test_n_choices_with_top_logprobs(client):
    out = _chat(client, n=3, max_tokens=4, temperature=1.0, logprobs=True, top_logprobs=4, seed=1)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert out.usage.completion_tokens == sum(len(c.logprobs.content) for c in out.choices)
    for choice in out.choices:
        for entry in choice.logprobs.content:
            tops = entry.top_logprobs
            assert len(tops) == 4
            values = [t.logprob for t in tops]
            assert values == sorted(values, reverse=True)
            # The sampled token is at most as likely as the most likely one.
            assert entry.logprob <= values[0] + 1e-6


def test_greedy_token_is_the_top_alternative(client):
    out = _chat(client, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    for entry in out.choices[0].logprobs.content:
        best = entry.top_logprobs[0]
        assert (best.token, pytest.approx(best.logprob, abs=1e-6)) == (entry.token, entry.logprob)


def test_stream_carries_the_same_completion(client):
    settings = dict(max_tokens=5, temperature=0, n=2)
    whole = _chat(client, **settings)
    text, finish = {0: "", 1: ""}, {}
    for chunk in _chat(client, stream=True, **settings):
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert text == {c.index: c.message.content for c in whole.choices}
    assert finish == {c.index: c.finish_reason for c in whole.choices}


def test_areal_token_ids_stay_available(client):
    """AReaL's vLLM client asks for ids; vLLM's ``"token_id:<id>"`` form, which it splits at the colon."""
    out = _chat(
        client, max_tokens=2, logprobs=True, extra_body={"return_tokens_as_token_ids": True}
    )
    assert all(e.token.startswith("token_id:") for e in out.choices[0].logprobs.content)


def test_a_seed_repeats_the_choices(client):
    first, again = (_chat(client, n=2, max_tokens=6, temperature=1.0, seed=7) for _ in range(2))
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]


def test_a_stream_sends_usage_only_when_asked_as_openai_does(client):
    # The usual loop reads chunk.choices[0]: a usage-only chunk nobody asked for breaks it.
    plain = list(_chat(client, stream=True, max_tokens=3))
    assert all(chunk.choices for chunk in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain)
    asked = list(_chat(client, stream=True, max_tokens=3, stream_options={"include_usage": True}))
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens >= 1
    assert all(chunk.choices for chunk in asked[:-1])
    # OpenAI: "All other chunks will also include a usage field, but with a null value."
    assert all("usage" in c.model_fields_set and c.usage is None for c in asked[:-1])
    assert not any("usage" in c.model_fields_set for c in plain)


def test_a_stop_string_ends_the_text_before_it_as_openai_does(client):
    settings = dict(max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    text = _chat(client, **settings).choices[0].message.content
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip() and stop in text, text
    out = _chat(client, stop=[stop], **settings).choices[0]
    assert out.message.content == text[: text.index(stop)]
    assert out.finish_reason == "stop"


def test_completions_logprobs_have_the_legacy_shape_with_token_text(client):
    """``/v1/completions`` with ``logprobs: k``, as the OpenAI client and lm-eval's
    ``local-completions`` read it: token text (not vLLM's ``token_id:<id>``, which it asks for with
    ``return_tokens_as_token_ids``), per token a dict of the sampled token and the k most likely
    ones, and each token's offset in the text."""
    out = client.openai.completions.create(
        model=client.model,
        prompt="The number of shapes is",
        max_tokens=3,
        temperature=0,
        logprobs=2,
        extra_body={"ignore_eos": True, "skip_special_tokens": False},
    )
    (choice,) = out.choices
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert not any(t.startswith("token_id:") for t in lp.tokens)
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(3)]
    for token, logprob, tops in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert 2 <= len(tops) <= 3 and tops[token] == pytest.approx(logprob, abs=1e-6)
        assert max(tops.values()) == pytest.approx(logprob, abs=1e-6)  # greedy: the best one


def test_completions_without_logprobs_return_none(client):
    out = client.openai.completions.create(
        model=client.model, prompt="The number of shapes is", max_tokens=2, temperature=0
    )
    assert out.choices[0].logprobs is None


def _repeated_char_before_and_after(tokens: list[str]) -> tuple[str, int] | None:
    """A character whose first occurrence ends inside token ``j`` and occurs again in a later
    token: ``(char, j)``, or ``None``."""
    text, ends = "", []
    for t in tokens:
        text += t
        ends.append(len(text))
    for c in dict.fromkeys(text):
        first = text.find(c)
        j = next(i for i, end in enumerate(ends) if end > first)
        if c.strip() and text.find(c, ends[j]) != -1:
            return c, j
    return None


def test_a_stop_string_before_min_tokens_is_kept_in_the_text_as_vllm_does(client):
    """A stop string inside the first ``min_tokens`` tokens does not stop the engine (vLLM checks
    none before), so it stays in the text: the text ends before the one the engine stopped on."""
    settings = dict(prompt="hello", max_tokens=24, temperature=0, logprobs=0)
    settings["extra_body"] = {"ignore_eos": True, "skip_special_tokens": False}
    plain = client.openai.completions.create(model=client.model, **settings).choices[0]
    found = _repeated_char_before_and_after(plain.logprobs.tokens)
    assert found is not None and "".join(plain.logprobs.tokens) == plain.text, plain.text
    stop, j = found
    floor = len("".join(plain.logprobs.tokens[: j + 1]))
    settings["extra_body"] = {**settings["extra_body"], "min_tokens": j + 2}
    out = client.openai.completions.create(model=client.model, stop=[stop], **settings)
    choice = out.choices[0]
    assert choice.text == plain.text[: plain.text.index(stop, floor)], (plain.text, stop, j)
    assert choice.finish_reason == "stop"
