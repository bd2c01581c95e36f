"""Packaging cost per trajectory: vlrollout's packaging core vs AReaL's inline construction.

Run: ``.venv/bin/python bench/bench_packaging.py`` (about 30 s on 2 shared CPU cores; ``--quick``
about 5 s). ``torch.set_num_threads(1)``; everything is measured in one process, ours and the
reference interleaved, so machine noise hits both alike.

Sequences of 1k, 8k and 32k tokens (``L``):

- **single-turn**: prompt ``L/4`` tokens, one generated turn of ``3L/4``.
  Ours: :func:`vlrollout.packaging.pack_single_turn`. Reference: AReaL ``RLVRWorkflow.arun_episode``'s
  inline ``torch.tensor(list)`` construction (``areal/workflow/rlvr.py``).
- **single-turn + mm ids**: the same with per-token ``mm_token_type_ids`` (vision prompts).
  Reference: AReaL ``VisionRLVRWorkflow.arun_episode`` (``areal/workflow/vision_rlvr.py``).
- **multi-turn**: prompt ``L/4``, 4 generated turns of ``L/8`` and 3 observations of ``L/12`` between
  them. Ours: :class:`vlrollout.packaging.TrajectoryBuilder` (``add_generated`` checks each
  response's prefix against the sequence so far). Reference: AReaL ``MultiTurnWorkflow``'s list
  accumulation (``areal/workflow/multi_turn.py``, prefix ``assert`` included) and its tensors.

Responses are built before timing; only packaging is timed. Each cell is the median over
repetitions of the mean over a batch of calls, in microseconds per trajectory. The reference's
``input_ids`` are int32 (AReaL's text workflows), ours int64 (every workflow): same element count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402
from areal.api import ModelResponse  # noqa: E402

from vlrollout.packaging import TrajectoryBuilder, pack_single_turn  # noqa: E402

LENGTHS = (1024, 8192, 32768)
TURNS, OBSERVATIONS = 4, 3


def _tokens(n: int, start: int) -> list[int]:
    return [(start + i) % 150_000 for i in range(n)]


def _resp(prefix: list[int], n_out: int, version: int = 3) -> ModelResponse:
    out = _tokens(n_out, len(prefix) + 7)
    return ModelResponse(
        input_tokens=list(prefix),
        output_tokens=out,
        output_logprobs=[-0.001 * (i % 97 + 1) for i in range(n_out)],
        output_versions=[version] * n_out,
    )


# -- single turn -----------------------------------------------------------------------------


def single_case(length: int) -> tuple[list[int], ModelResponse, list[int]]:
    prompt = _tokens(length // 4, 1)
    mm_types = [1 if 4 <= i < len(prompt) - 16 else 0 for i in range(len(prompt))]
    return prompt, _resp(prompt, length - len(prompt)), mm_types


def areal_single(prompt: list[int], resp: ModelResponse, reward: float) -> dict:
    """``areal/workflow/rlvr.py`` RLVRWorkflow.arun_episode, the trajectory part, verbatim."""
    seq = resp.input_tokens + resp.output_tokens
    logprobs = [0.0] * resp.input_len + resp.output_logprobs
    loss_mask = [0] * resp.input_len + [1] * resp.output_len
    versions = [-1] * resp.input_len + resp.output_versions
    res = {
        "input_ids": torch.tensor(seq, dtype=torch.int32),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32),
        "versions": torch.tensor(versions, dtype=torch.int32),
        "attention_mask": torch.ones(len(seq), dtype=torch.bool),
        "rewards": torch.tensor(reward, dtype=torch.float32),
    }
    return {k: v.unsqueeze(0) for k, v in res.items()}


def areal_single_mm(
    prompt: list[int], resp: ModelResponse, mm_types: list[int], reward: float
) -> dict:
    """``areal/workflow/vision_rlvr.py`` VisionRLVRWorkflow.arun_episode, the trajectory part."""
    seq = resp.input_tokens + resp.output_tokens
    mm_token_type_ids = mm_types + [0] * resp.output_len
    logprobs = [0.0] * resp.input_len + resp.output_logprobs
    loss_mask = [0] * resp.input_len + [1] * resp.output_len
    versions = [-1] * resp.input_len + resp.output_versions
    return {
        "input_ids": torch.tensor(seq, dtype=torch.long).unsqueeze(0),
        "mm_token_type_ids": torch.tensor(mm_token_type_ids, dtype=torch.long).unsqueeze(0),
        "loss_mask": torch.tensor(loss_mask, dtype=torch.int32).unsqueeze(0),
        "logprobs": torch.tensor(logprobs, dtype=torch.float32).unsqueeze(0),
        "versions": torch.tensor(versions, dtype=torch.int32).unsqueeze(0),
        "attention_mask": torch.ones(len(seq), dtype=torch.bool).unsqueeze(0),
        "rewards": torch.tensor(reward, dtype=torch.float32).unsqueeze(0),
    }


# -- multi turn ------------------------------------------------------------------------------


def multi_case(length: int) -> tuple[list[int], list[ModelResponse], list[list[int]]]:
    """Prompt, the 4 responses (each with the full prefix as input_tokens), the 3 observations."""
    prompt = _tokens(length // 4, 1)
    gen_len = length // (2 * TURNS)
    obs_len = (length - len(prompt) - TURNS * gen_len) // OBSERVATIONS
    seq = list(prompt)
    responses, observations = [], []
    for turn in range(TURNS):
        resp = _resp(seq, gen_len, version=turn)
        responses.append(resp)
        seq = seq + resp.output_tokens
        if turn < OBSERVATIONS:
            obs = _tokens(obs_len, 90_000 + turn * obs_len)
            observations.append(obs)
            seq = seq + obs
    return prompt, responses, observations


def ours_multi(
    prompt: list[int], responses: list[ModelResponse], observations: list[list[int]]
) -> dict:
    builder = TrajectoryBuilder(prompt_ids=prompt)
    for turn, resp in enumerate(responses):
        builder.add_generated(resp)
        if turn < len(observations):
            builder.add_observation(observations[turn])
    return builder.build(reward=1.0)


def areal_multi(
    prompt: list[int], responses: list[ModelResponse], observations: list[list[int]]
) -> dict:
    """``areal/workflow/multi_turn.py`` MultiTurnWorkflow.arun_episode's accumulation and tensors
    (observations reach it as the next response's extra ``input_tokens``)."""
    seq, logprobs, loss_mask, versions = [], [], [], []
    for resp in responses:
        input_len = len(resp.input_tokens) - len(seq)
        assert len(seq) == 0 or resp.input_tokens[:-input_len] == seq
        seq += resp.input_tokens[-input_len:] + resp.output_tokens
        logprobs += [0.0] * input_len + resp.output_logprobs
        loss_mask += [0] * input_len + [1] * resp.output_len
        versions += [-1] * input_len + resp.output_versions
    res = dict(
        input_ids=torch.tensor(seq, dtype=torch.int32),
        logprobs=torch.tensor(logprobs, dtype=torch.float32),
        loss_mask=torch.tensor(loss_mask, dtype=torch.int32),
        versions=torch.tensor(versions, dtype=torch.int32),
        rewards=torch.tensor(1.0, dtype=torch.float32),
        attention_mask=torch.ones(len(seq), dtype=torch.bool),
    )
    return {k: v.unsqueeze(0) for k, v in res.items()}


def cases(length: int) -> list[tuple[str, Callable[[], dict], Callable[[], dict]]]:
    """``(name, ours, reference)`` thunks for one sequence length."""
    prompt, resp, mm_types = single_case(length)
    m_prompt, m_resps, m_obs = multi_case(length)
    return [
        (
            "single-turn",
            partial(pack_single_turn, prompt, resp, 1.0),
            partial(areal_single, prompt, resp, 1.0),
        ),
        (
            "single-turn + mm ids",
            partial(pack_single_turn, prompt, resp, 1.0, mm_token_type_ids=mm_types),
            partial(areal_single_mm, prompt, resp, mm_types, 1.0),
        ),
        (
            f"multi-turn {TURNS} gen + {OBSERVATIONS} obs",
            partial(ours_multi, m_prompt, m_resps, m_obs),
            partial(areal_multi, m_prompt, m_resps, m_obs),
        ),
    ]


# -- timing ----------------------------------------------------------------------------------


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def compare(
    ours: Callable[[], dict], ref: Callable[[], dict], length: int, reps: int
) -> tuple[float, float]:
    """Median µs per call of ``ours`` and ``ref``, interleaved; checks they pack the same tokens."""
    a, b = ours(), ref()
    for key in ("input_ids", "loss_mask", "logprobs", "versions"):
        if not torch.equal(a[key].to(b[key].dtype), b[key]):
            raise RuntimeError(f"{key} differs between ours and the reference at L={length}")
    calls = max(3, 400_000 // length)  # about 20-100 ms per batch
    ours_us, ref_us = [], []
    for _ in range(reps):
        ours_us.append(per_call_us(ours, calls))
        ref_us.append(per_call_us(ref, calls))
    return statistics.median(ours_us), statistics.median(ref_us)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """First column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for cells in [header, *rows]:
        padded = (c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))  # fmt: skip
        print("  ".join(padded))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 1k and 8k only")
    parser.add_argument("--reps", type=int, default=None)
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("packaging", argv)
    torch.set_num_threads(1)
    lengths = LENGTHS[:2] if args.quick else LENGTHS
    reps = args.reps or (3 if args.quick else 7)

    rows, ratios = [], []
    t_start = time.perf_counter()
    for length in lengths:
        for name, ours, ref in cases(length):
            o, r = compare(ours, ref, length, reps)
            rows.append([name, f"{length // 1024}k", f"{o:,.0f}", f"{r:,.0f}", f"{o / r:.2f}x"])
            ratios.append(o / r)
    elapsed = time.perf_counter() - t_start

    print(f"Packaging, us per trajectory (median of {reps}); torch threads=1; {elapsed:.0f} s")
    header = ["case", "tokens", "ours us", "AReaL-inline us", "ours/AReaL"]
    print_table(header, rows)
    geomean = statistics.geometric_mean(ratios)
    headline = (
        f"headline: ours/AReaL-inline packaging time, geomean over all cases {geomean:.2f}x "
        f"(range {min(ratios):.2f}x-{max(ratios):.2f}x; below 1: ours is faster)"
    )
    print(headline)
    table = record.Table(
        header, rows, title=f"us per trajectory, median of {reps}; torch threads=1"
    )
    mode = f"quick: {reps} repetitions, {', '.join(f'{n // 1024}k' for n in lengths)} tokens"
    record.write(
        started.record(
            [table], headline, {"ratios": ratios}, mode=mode if args.quick else "default"
        ),
        args.record_dir,
    )
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
