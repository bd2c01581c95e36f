"""Sampling parameters, AReaL's logprob convention and the top-k/top-p filter."""

from __future__ import annotations

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.engine.sampling import (
    SamplingParams,
    filter_top_k_top_p,
    sample_batch,
    token_logprobs,
)


def sample_token(logits, params, banned, n_generated, counts=None, generator=None) -> int:
    """:func:`sample_batch` for one ``[vocab]`` row."""
    tokens, _ = sample_batch(
        logits.unsqueeze(0), [params], banned, [n_generated], [counts], None, generator
    )
    return int(tokens[0])


def test_from_gconfig_caps_and_merges_stop_ids():
    g = GenerationHyperparameters(
        max_new_tokens=100, max_tokens=30, stop_token_ids=[7], greedy=True
    )
    p = SamplingParams.from_gconfig(g, prompt_len=25, eos_token_ids=[2, None])
    assert p.max_new_tokens == 5 and p.stop_token_ids == {2, 7} and p.is_greedy
    ignore = SamplingParams.from_gconfig(g.new(ignore_eos=True), prompt_len=25, eos_token_ids=[2])
    assert ignore.stop_token_ids == {7}


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"n_samples": 4}, "n_samples=4"),
        ({"max_tokens": 10}, "No room"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0, got inf"),
        ({"frequency_penalty": float("nan")}, "frequency_penalty must be in \\[-2, 2\\]"),
        ({"frequency_penalty": float("-inf")}, "frequency_penalty must be in \\[-2, 2\\]"),
    ],
)
def test_from_gconfig_rejects(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams.from_gconfig(GenerationHyperparameters(**kw), prompt_len=10)


def test_temperature_zero_is_greedy_with_logprobs_at_one():
    p = SamplingParams(max_new_tokens=1, temperature=0.0)
    assert p.is_greedy and p.logprob_temperature == 1.0
    assert SamplingParams(max_new_tokens=1, temperature=0.5, greedy=True).logprob_temperature == 0.5


def test_token_logprobs_is_areal_gather_logprobs():
    from areal.utils.functional.vocab_parallel import gather_logprobs

    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    labels = torch.tensor([0, 5, 9, 49, 3, 3])
    with torch._dynamo.config.patch(disable=True):
        expected = gather_logprobs(logits, labels, temperature=0.7)
    torch.testing.assert_close(token_logprobs(logits, labels, 0.7), expected)


def test_filter_top_k_top_p():
    probs = torch.tensor([0.1, 0.4, 0.2, 0.3])
    torch.testing.assert_close(
        filter_top_k_top_p(probs, 2, 1.0), torch.tensor([0, 4 / 7, 0, 3 / 7])
    )
    # Mass before the third token (0.7) reaches 0.7: the third is dropped.
    torch.testing.assert_close(
        filter_top_k_top_p(probs, 10, 0.7), torch.tensor([0, 4 / 7, 0, 3 / 7])
    )
    torch.testing.assert_close(filter_top_k_top_p(probs, 10, 0.01), torch.tensor([0.0, 1, 0, 0]))
    assert filter_top_k_top_p(probs, 10, 1.0) is probs


def test_sample_token_masks_and_filters():
    logits = torch.tensor([5.0, 4.0, 3.0, 0.0])
    gen = torch.Generator().manual_seed(0)
    p = SamplingParams(max_new_tokens=4)
    banned = frozenset({0})
    draws = {sample_token(logits, p, banned, 0, generator=gen) for _ in range(300)}
    assert 0 not in draws and {1, 2} <= draws
    top1 = SamplingParams(max_new_tokens=4, top_k=1)
    assert {sample_token(logits, top1, banned, 0, generator=gen) for _ in range(50)} == {1}
    stop = SamplingParams(
        max_new_tokens=4, min_new_tokens=2, stop_token_ids=frozenset({1}), greedy=True
    )
    assert sample_token(logits, stop, banned, 1) == 2  # the stop token waits for min_new_tokens
    assert sample_token(logits, stop, banned, 2) == 1
    pen = SamplingParams(max_new_tokens=4, greedy=True, frequency_penalty=1.5)
    assert sample_token(logits, pen, None, 3, counts={0: 1}) == 1
    with pytest.raises(RuntimeError, match="masked"):
        sample_token(torch.zeros(2), p, frozenset({0, 1}), 0)


def test_sampling_follows_temperature():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    gen = torch.Generator().manual_seed(1)
    hot = SamplingParams(max_new_tokens=1, temperature=2.0)
    draws = torch.tensor([sample_token(logits, hot, None, 0, generator=gen) for _ in range(4000)])
    freq = torch.bincount(draws, minlength=3) / 4000
    expected = torch.softmax(logits / 2.0, -1)
    torch.testing.assert_close(freq, expected, atol=0.03, rtol=0)


def test_each_row_masks_its_own_stop_ids_until_min_new_tokens():
    """Rows of different workflows in one batch: banned ids for all, stop ids only for rows
    still under their ``min_new_tokens`` (one shared set, or one set per group of rows)."""
    logits = torch.tensor([[0.0, 5.0, 4.0, 6.0]] * 4)  # token 3 is best, but banned
    a = SamplingParams(8, min_new_tokens=2, stop_token_ids=frozenset({1}), greedy=True)
    b = SamplingParams(8, min_new_tokens=2, stop_token_ids=frozenset({2}), greedy=True)
    banned = frozenset({3})
    tokens, logprobs = sample_batch(logits, [a, a, b, b], banned, n_generated=[0, 2, 0, 2])
    assert tokens.tolist() == [2, 1, 1, 1]
    torch.testing.assert_close(logprobs, token_logprobs(logits, tokens, 1.0))
    shared, _ = sample_batch(logits[:2], [a, a], banned, n_generated=[0, 1])
    assert shared.tolist() == [2, 2]
    late, _ = sample_batch(logits[:2], [a, b], banned, n_generated=[5, 5])
    assert late.tolist() == [1, 1]
    assert sample_batch(logits[:1], [a], None, n_generated=[5])[0].tolist() == [3]


def test_sampled_tokens_follow_the_distribution_and_skip_zero_probabilities():
    """Many rows drawn in one call: each token's frequency is its probability, tokens of
    probability 0 (anywhere in the vocabulary, here after top-k) are never drawn."""
    logits = torch.log(torch.tensor([0.12, 0.0, 0.5, 0.0, 0.3, 0.08, 0.0]))
    params = [SamplingParams(max_new_tokens=1, top_k=3)] * 6000
    gen = torch.Generator().manual_seed(3)
    tokens, _ = sample_batch(logits.expand(6000, -1), params, None, default_generator=gen)
    freq = torch.bincount(tokens, minlength=7) / 6000
    expected = torch.tensor([0.12, 0, 0.5, 0, 0.3, 0, 0]) / 0.92  # top_k=3, renormalised
    torch.testing.assert_close(freq, expected, atol=0.02, rtol=0)
    assert freq[[1, 3, 5, 6]].sum() == 0


def test_a_draw_at_either_end_of_the_unit_interval_stays_on_a_positive_token(monkeypatch):
    """The uniform draw's extremes: 0 lands on the last positive token, the largest float
    below 1 on the first; neither falls past the vocabulary nor on a zero-probability token."""
    from vlrollout.engine import sampling

    probs = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0]])
    for u, expected in ((0.0, 3), (1.0 - 2**-24, 1)):
        monkeypatch.setattr(sampling.torch, "rand", lambda *a, u=u, **k: torch.full((1, 1), u))
        assert sampling._draw(probs, None).tolist() == [expected]


@pytest.mark.parametrize("top_k", [-1, 0])
def test_a_top_k_of_minus_one_or_zero_means_no_top_k_as_on_sglang_and_vllm(top_k):
    gconfig = GenerationHyperparameters(max_new_tokens=4, top_k=top_k)
    params = SamplingParams.from_gconfig(gconfig, prompt_len=3, eos_token_ids=[0])
    assert params.top_k >= 1 << 30
