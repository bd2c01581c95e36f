"""Sampling parameters and the per-token sampling step of the local engine.

The convention for the reported log-probability follows AReaL's trainer, so that the rollout's
``logprobs`` and the actor's recomputed ``logprobs`` agree on the generated tokens:

    logprob(token) = log_softmax(raw_logits.float() / temperature)[token]

checked in ``areal/utils/functional/vocab_parallel.py`` (``_gather_logprobs``, reached through
``gather_logprobs``), which ``FSDPEngine._compute_logprobs`` in ``areal/engine/fsdp_engine.py``
calls with ``temperature=self.config.temperature`` (areal 1.0.4). The logits are the model's raw
logits: no top-p / top-k filtering, no placeholder mask, no ``min_new_tokens`` mask and no
frequency penalty, because the trainer's recompute applies none of them. Those only shape the
distribution the engine *samples* from. The consequence: a token that the sampling mask forbids
would never be sampled, so the reported logprob of a sampled token is the unmasked one, which is
what the trainer will compute for it.

With ``greedy=True`` the token is the argmax of the (masked) logits and its reported logprob
still uses ``gconfig.temperature``: AReaL configs set ``actor.temperature`` equal to
``gconfig.temperature``, and that is the temperature the recompute uses. A temperature of 0, or
any below :data:`GREEDY_BELOW`, means greedy (as in SGLang and vLLM) and logprobs at temperature 1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# A top_k at least this large means "no top-k" (AReaL's default is int(1e8)).
_NO_TOP_K = 1 << 30


GREEDY_BELOW = 1e-5
"""Temperatures below this sample greedily, with logprobs at temperature 1, as 0 does (SGLang's
and vLLM's rule): float32 logits divided by them overflow."""
FLAT_ABOVE = 1e30
"""Temperatures above this divide as this does: float32 logits divided by it are already 0 (every
allowed token equally likely); past float32's range the division gives NaN."""
FREQUENCY_PENALTY_RANGE = (-2.0, 2.0)
"""OpenAI's, vLLM's and SGLang's range of ``frequency_penalty``."""


def check_sampling_values(
    temperature: float,
    top_p: float,
    frequency_penalty: float,
    key: Callable[[str], str] = str,
) -> None:
    """The engine's rules for these three values, written so that NaN fails each; ``key`` names a
    field in the message (``vlrollout run`` adds its flag). Raises ``ValueError``."""
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"{key('temperature')} must be a finite number >= 0, got {temperature}")
    low, high = FREQUENCY_PENALTY_RANGE
    if not low <= frequency_penalty <= high:
        raise ValueError(
            f"{key('frequency_penalty')} must be in [{low:g}, {high:g}], got {frequency_penalty}"
        )
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"{key('top_p')} must be in (0, 1], got {top_p}")


@dataclass(frozen=True)
class SamplingParams:
    """What the engine needs from ``GenerationHyperparameters`` for one request.

    Attributes:
        max_new_tokens: Tokens to generate at most (already capped by ``max_tokens``).
        min_new_tokens: Stop tokens and stop strings are ignored before this many tokens.
        greedy: Take the argmax instead of sampling.
        temperature: Sampling temperature; also the temperature of the reported logprobs.
        top_p: Nucleus threshold in (0, 1].
        top_k: Keep this many most likely tokens; ``>= vocab`` disables it (from AReaL's config,
            ``-1`` or ``0`` do too, as on SGLang and vLLM).
        stop_token_ids: Generation stops after sampling one of these (it is kept in the output).
        stop: Stop strings: generation stops once the decoded completion contains one.
        stop_skips_special: Look for stop strings in the text decoded without special tokens
            (vLLM's rule: the text its client gets), else with them (SGLang's rule, the default;
            a request sets it with ``metadata["stop_skips_special"]``).
        frequency_penalty: Subtracted from a token's sampling logit per earlier occurrence in the
            completion (OpenAI semantics); does not change the reported logprob.
        top_logprobs: Also report this many most likely tokens per step, with their logprobs
            (OpenAI's ``top_logprobs``); 0 reports none.
        seed: Seeds a per-request generator, for reproducible sampling; ``None`` uses the
            engine's generator.
    """

    max_new_tokens: int
    min_new_tokens: int = 0
    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = _NO_TOP_K
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    stop: tuple[str, ...] = ()
    stop_skips_special: bool = False
    frequency_penalty: float = 0.0
    seed: int | None = None
    top_logprobs: int = 0

    def __post_init__(self):
        if self.max_new_tokens <= 0:
            raise ValueError(
                f"max_new_tokens must be positive, got {self.max_new_tokens}; raise "
                "gconfig.max_new_tokens or gconfig.max_tokens (which caps prompt + completion)."
            )
        check_sampling_values(self.temperature, self.top_p, self.frequency_penalty)
        if self.top_k <= 0:
            raise ValueError(f"top_k must be positive, got {self.top_k}.")

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature < GREEDY_BELOW

    @property
    def sampling_temperature(self) -> float:
        """The temperature the sampling divides by (:data:`FLAT_ABOVE` at most)."""
        return min(self.temperature, FLAT_ABOVE)

    @property
    def logprob_temperature(self) -> float:
        """The temperature of the reported logprobs (1.0 below :data:`GREEDY_BELOW`, as at 0)."""
        return self.sampling_temperature if self.temperature >= GREEDY_BELOW else 1.0

    @classmethod
    def from_gconfig(
        cls,
        gconfig: Any,
        prompt_len: int,
        eos_token_ids: Iterable[int] = (),
        seed: int | None = None,
        context_len: int | None = None,
    ) -> SamplingParams:
        """Translate AReaL's ``GenerationHyperparameters`` for a prompt of ``prompt_len`` tokens.

        ``max_new_tokens`` becomes ``min(max_new_tokens, max_tokens - prompt_len)`` as in
        ``RemoteInfEngine.agenerate``, ``max_tokens`` at most the model's ``context_len`` (as a
        server caps it at its context length); ``eos_token_ids`` join ``stop_token_ids`` unless
        ``ignore_eos``.

        >>> from areal.api.cli_args import GenerationHyperparameters
        >>> g = GenerationHyperparameters(max_new_tokens=8, stop_token_ids=[5])
        >>> sorted(SamplingParams.from_gconfig(g, prompt_len=4, eos_token_ids=[2]).stop_token_ids)
        [2, 5]
        """
        if gconfig.n_samples != 1:
            raise ValueError(
                f"n_samples={gconfig.n_samples}: an engine request generates one sequence. Call "
                "agenerate n times (as AReaL's workflows do) or use GroupedRolloutWorkflow."
            )
        if gconfig.use_beam_search:
            raise NotImplementedError("Beam search is not supported by the local engine.")
        max_tokens = (
            gconfig.max_tokens if context_len is None else min(gconfig.max_tokens, context_len)
        )
        max_new = min(gconfig.max_new_tokens, max_tokens - prompt_len)
        if max_new <= 0:
            raise ValueError(
                f"No room to generate: max_new_tokens={gconfig.max_new_tokens}, "
                f"max_tokens={max_tokens}, prompt_len={prompt_len}."
            )
        stop_ids = set(gconfig.stop_token_ids or [])
        if not gconfig.ignore_eos:
            stop_ids.update(int(t) for t in eos_token_ids if t is not None)
        return cls(
            max_new_tokens=max_new,
            min_new_tokens=gconfig.min_new_tokens,
            greedy=gconfig.greedy,
            temperature=float(gconfig.temperature),
            top_p=float(gconfig.top_p),
            top_k=int(gconfig.top_k) if gconfig.top_k > 0 else _NO_TOP_K,  # -1: SGLang's "off"
            stop_token_ids=frozenset(stop_ids),
            stop=tuple(gconfig.stop or ()),
            frequency_penalty=float(gconfig.frequency_penalty),
            seed=seed,
        )


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """AReaL's logprob convention: ``log_softmax(logits.float() / T)`` gathered at ``tokens``.

    Args:
        logits: ``[..., vocab]`` raw logits, any float dtype.
        tokens: ``[...]`` int64 token ids.
        temperature: Positive temperature.

    Returns:
        ``[...]`` float32 log-probabilities.

    >>> token_logprobs(torch.zeros(1, 4), torch.tensor([2]), 1.0).exp()
    tensor([0.2500])
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def filter_top_k_top_p(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Zero out tokens outside the top-k and the top-p nucleus, then renormalise.

    Top-k first, then top-p on what is left, as SGLang's sampler does. The most likely token
    always survives.

    Args:
        probs: ``[vocab]`` probabilities (after temperature).
        top_k: Tokens to keep; ``>= vocab`` keeps all.
        top_p: Nucleus mass in (0, 1].

    >>> filter_top_k_top_p(torch.tensor([0.5, 0.3, 0.2]), top_k=3, top_p=0.6)
    tensor([0.6250, 0.3750, 0.0000])
    """
    if top_k >= probs.numel() and top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(descending=True)
    keep = torch.ones_like(sorted_p, dtype=torch.bool)
    if top_k < sorted_p.numel():
        keep[top_k:] = False
    if top_p < 1.0:
        kept = sorted_p * keep
        kept = kept / kept.sum()
        # Drop a token when the mass strictly before it already reaches top_p.
        keep &= (kept.cumsum(0) - kept) < top_p
    keep[0] = True
    out = torch.zeros_like(probs)
    out[order[keep]] = sorted_p[keep]
    return out / out.sum()


def sample_batch(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    banned: frozenset[int] | None = None,
    n_generated: Sequence[int] | None = None,
    counts: Sequence[Mapping[int, int] | None] | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    default_generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the next token of each row and its reported logprob.

    The sampling distribution of row ``i`` is its raw logits with ``banned`` ids (vision
    placeholders) and, while ``n_generated[i] < min_new_tokens``, its stop tokens set to -inf,
    minus the frequency penalty, then temperature, top-k and top-p. The reported logprob is
    :func:`token_logprobs` of the *raw* logits (see the module docstring).

    Args:
        logits: ``[B, vocab]`` raw logits of the last position.
        params: One :class:`SamplingParams` per row.
        banned: Token ids that are never sampled (vision placeholders), or ``None``.
        n_generated: Tokens each row generated so far (default 0).
        counts: Per row, occurrences of each token in its completion (frequency penalty).
        generators: Per row, its own generator or ``None`` for ``default_generator``.
        default_generator: Random generator on ``logits.device``.

    Returns:
        ``(tokens, logprobs)``: int64 ``[B]`` and float32 ``[B]``.

    >>> logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]])
    >>> tokens, logprobs = sample_batch(logits, [SamplingParams(1, greedy=True)] * 2, banned=frozenset({1}))
    >>> tokens.tolist()
    [2, 0]
    """
    logits = logits.float()
    rows, vocab = logits.shape
    device = logits.device
    n_generated = n_generated or [0] * rows
    temps = [p.logprob_temperature for p in params]
    if len(set(temps)) == 1:  # one scalar: no per-row tensor to build each step
        logp = torch.log_softmax(logits / temps[0] if temps[0] != 1.0 else logits, dim=-1)
    else:
        logp = torch.log_softmax(logits / torch.tensor(temps, device=device)[:, None], dim=-1)

    scores = _masked(logits, params, banned or frozenset(), n_generated)
    for i, p in enumerate(params):
        if p.frequency_penalty and counts and counts[i]:
            ids, n = zip(*counts[i].items(), strict=True)
            scores[i, list(ids)] -= p.frequency_penalty * torch.tensor(n, device=device)

    best, tokens = scores.max(dim=-1)  # the first maximum, as argmax
    if not bool(torch.isfinite(best).all()):
        raise RuntimeError("Every token is masked in some row; nothing can be sampled.")
    sampled = [i for i, p in enumerate(params) if not p.is_greedy]
    if sampled:
        index = torch.tensor(sampled, device=device)
        sampling_temps = {params[i].sampling_temperature for i in sampled}
        if len(sampling_temps) == 1:  # rows of one workflow share it: a scalar, no tensor
            t = sampling_temps.pop()
        else:
            t = torch.tensor([[params[i].sampling_temperature] for i in sampled], device=device)
        probs = torch.softmax((scores if len(sampled) == rows else scores[index]) / t, dim=-1)
        by_generator: dict[int, tuple[torch.Generator | None, list[int]]] = {}
        for j, i in enumerate(sampled):
            p = params[i]
            if p.top_k < vocab or p.top_p < 1.0:
                probs[j] = filter_top_k_top_p(probs[j], p.top_k, p.top_p)
            gen = (generators[i] if generators else None) or default_generator
            by_generator.setdefault(id(gen), (gen, []))[1].append(j)
        for gen, js in by_generator.values():
            tokens[index[js]] = _draw(probs if len(js) == len(sampled) else probs[js], gen)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``[rows, vocab]`` probabilities by inverting the cumulative sum
    with one uniform draw per row: index ``i`` with probability ``p_i``, as
    ``torch.multinomial`` draws, in a few vector ops (multinomial was most of a sampled step's
    bookkeeping on a CPU). The target is in ``(0, total]`` of the row's own total (``1 - rand``
    times it, which rounding cannot push past the total), and the token is the first whose
    cumulative sum reaches it: always inside the row, never one of probability 0 (its
    cumulative sum equals its predecessor's, which reached the target first)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=cdf.dtype, device=cdf.device)
    return torch.searchsorted(cdf, (1 - u) * cdf[:, -1:]).squeeze(1)


def _masked(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    banned: frozenset[int],
    n_generated: Sequence[int],
) -> torch.Tensor:
    """A copy of ``logits`` with ``banned`` ids, and the stop ids of rows still under
    ``min_new_tokens``, set to -inf: one write when every row masks the same ids (the rows of
    one workflow share their stop ids), else one per set of stop ids."""
    rows, vocab = logits.shape
    early = [
        p.stop_token_ids if n < p.min_new_tokens else frozenset()
        for p, n in zip(params, n_generated, strict=True)
    ]
    if all(e == early[0] for e in early):
        return logits.index_fill(1, _id_tensor(banned | early[0], vocab, logits.device), -math.inf)
    scores = logits.index_fill(1, _id_tensor(banned, vocab, logits.device), -math.inf)
    by_stop_ids: dict[frozenset[int], list[int]] = {}
    for i, stop_ids in enumerate(early):
        if stop_ids:
            by_stop_ids.setdefault(stop_ids, []).append(i)
    for stop_ids, rows_ in by_stop_ids.items():
        index = torch.tensor(rows_, device=logits.device)
        ids = _id_tensor(stop_ids, vocab, logits.device)
        scores[index.unsqueeze(1), ids.unsqueeze(0)] = -math.inf
    return scores


@functools.lru_cache(maxsize=256)
def _id_tensor(ids: frozenset[int], vocab: int, device: torch.device) -> torch.Tensor:
    """The ids in ``[0, vocab)`` as an int64 tensor, built once per set (stop ids repeat)."""
    return torch.tensor(sorted(t for t in ids if 0 <= t < vocab), dtype=torch.long, device=device)


def top_logprobs(logits: torch.Tensor, params: SamplingParams) -> list[tuple[int, float]]:
    """The ``params.top_logprobs`` most likely tokens of one row of raw ``logits`` and their
    logprobs, most likely first, in the same convention as the sampled token's logprob (raw
    logits over the logprob temperature; placeholders and penalties not applied).

    >>> top_logprobs(torch.tensor([0.0, 2.0, 1.0]), SamplingParams(1, top_logprobs=2))[0][0]
    1
    """
    logp = torch.log_softmax(logits.float() / params.logprob_temperature, dim=-1)
    values, ids = logp.topk(min(params.top_logprobs, logp.shape[-1]))
    return list(zip(ids.tolist(), values.tolist(), strict=True))
