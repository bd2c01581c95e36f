"""The OpenAI Python client, as evaluation harnesses use it, against ``vlrollout serve
--protocol vllm`` on the shipped tiny model: model listing, image chat with ``n`` choices,
``logprobs`` with token text and ``top_logprobs``, ``finish_reason`` and ``usage``, streaming."""

from __future__ import annotations

import base64

import pytest
from openai import OpenAI

from tests.serve.conftest import ASSET, SAMPLES

IMAGE_URL = (
    "data:image/png;base64,"
    + base64.b64encode((SAMPLES.parent / "images" / "count-2-0.png").read_bytes()).decode()
)
MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            {"type": "text", "text": "How many shapes are there? Answer with a number."},
        ],
    }
]


@pytest.fixture(scope="module")
def client(vllm_server):
    server, engine = vllm_server
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0), engine


def _chat(client, **kwargs):
    return client.chat.completions.create(model=str(ASSET), messages=MESSAGES, **kwargs)


def test_models_lists_the_served_model(client):
    openai, _ = client
    assert [m.id for m in openai.models.list().data] == [str(ASSET)]


def test_length_finish_usage_and_token_text(client):
    openai, engine = client
    out = _chat(openai, max_tokens=3, temperature=0, logprobs=True, extra_body={"ignore_eos": True})
    (choice,) = out.choices
    assert choice.finish_reason == "length"
    tokens = choice.logprobs.content
    assert out.usage.completion_tokens == len(tokens) == 3
    assert out.usage.total_tokens == out.usage.prompt_tokens + 3
    for entry in tokens:
        assert not entry.token.startswith("token:")
        assert bytes(entry.bytes).decode("utf-8") == entry.token
    special = set(engine.tokenizer.all_special_tokens)
    assert "".join(e.token for e in tokens if e.token not in special) == choice.message.content


def test_n_choices_with_top_logprobs(client):
    openai, _ = client
    out = _chat(openai, n=3, max_tokens=4, temperature=1.0, logprobs=True, top_logprobs=4, seed=1)
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
    openai, _ = client
    out = _chat(openai, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    for entry in out.choices[0].logprobs.content:
        best = entry.top_logprobs[0]
        assert (best.token, pytest.approx(best.logprob, abs=1e-6)) == (entry.token, entry.logprob)


def test_stream_carries_the_same_completion(client):
    openai, _ = client
    settings = dict(max_tokens=5, temperature=0, n=2)
    whole = _chat(openai, **settings)
    text, finish = {0: "", 1: ""}, {}
    for chunk in _chat(openai, stream=True, **settings):
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert text == {c.index: c.message.content for c in whole.choices}
    assert finish == {c.index: c.finish_reason for c in whole.choices}


def test_areal_token_ids_stay_available(client):
    """AReaL's vLLM client asks for ids; its ``"token:<id>"`` form is kept for it."""
    openai, _ = client
    out = _chat(
        openai, max_tokens=2, logprobs=True, extra_body={"return_tokens_as_token_ids": True}
    )
    assert all(e.token.startswith("token:") for e in out.choices[0].logprobs.content)


def test_a_seed_repeats_the_choices(client):
    openai, _ = client
    first, again = (_chat(openai, n=2, max_tokens=6, temperature=1.0, seed=7) for _ in range(2))
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
