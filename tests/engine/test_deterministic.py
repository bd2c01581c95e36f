"""Deterministic mode: a seeded completion depends on the request and the seed, never on load.

Batches formed by timing and one generator shared by all requests would make two seeded runs
started side by side differ. Here two engines run at the same time, each fed the same
requests in a different order, one of them with unrelated load, and must agree bit for bit.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from PIL import Image

from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.determinism import request_digest
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.testing.tiny_model import tiny_qwen2vl
from vlrollout.workflows.steps import LazyImagesRequest


def _requests(vision_prompt, text_prompt) -> list[ModelRequest]:
    g = GenerationHyperparameters(max_new_tokens=8, min_new_tokens=8, temperature=1.0)
    reqs = []
    for seed in range(3):
        p = vision_prompt(seed=seed)
        reqs.append(
            ModelRequest(
                input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]}, gconfig=g
            )
        )
    for q in ("How many shapes?", "Describe the image."):
        reqs.append(ModelRequest(input_ids=text_prompt(q), gconfig=g))
    # A GRPO group: the same prompt twice must still give two different samples.
    reqs.append(ModelRequest(input_ids=text_prompt("Twin prompt."), gconfig=g))
    reqs.append(ModelRequest(input_ids=text_prompt("Twin prompt."), gconfig=g))
    return reqs


async def _run(engine, reqs, order, load: list[ModelRequest], stagger: float):
    async def one(i):
        await asyncio.sleep(stagger * order.index(i))
        return i, await engine.agenerate(reqs[i].copy())

    async def noise():
        for r in load:
            await engine.agenerate(r.copy())

    # Twins are issued in index order: their occurrence numbers follow issue order.
    results = await asyncio.gather(*(one(i) for i in order), noise())
    return dict(results[:-1])


def _both(tiny, reqs, load, deterministic: bool):
    model, processor = tiny
    engines = [
        LocalInferenceEngine(
            model, processor, max_batch_size=8, seed=5, deterministic=deterministic
        )
        for _ in range(2)
    ]
    schedules = [
        (list(range(len(reqs))), [], 0.0),
        # Reversed arrival except the twins, staggered, with unrelated requests in flight.
        ([4, 3, 2, 1, 0, 5, 6], load, 0.003),
    ]
    out: list[dict] = [{}, {}]

    def work(k):
        with engines[k]:
            out[k] = asyncio.run(_run(engines[k], reqs, *schedules[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


@pytest.fixture
def cases(vision_prompt, text_prompt):
    reqs = _requests(vision_prompt, text_prompt)
    g = GenerationHyperparameters(max_new_tokens=5, temperature=1.0)
    load = [ModelRequest(input_ids=text_prompt(f"load {i}"), gconfig=g) for i in range(4)]
    return reqs, load


def test_seeded_completions_do_not_depend_on_arrival_or_load(tiny, cases):
    reqs, load = cases
    a, b = _both(tiny, reqs, load, deterministic=True)
    for i in range(len(reqs)):
        assert a[i].output_tokens == b[i].output_tokens, i
        assert torch.equal(torch.tensor(a[i].output_logprobs), torch.tensor(b[i].output_logprobs))
    assert a[5].output_tokens != a[6].output_tokens  # twins are distinct samples


def test_without_deterministic_mode_the_same_schedules_disagree(tiny, cases):
    """The schedules above really perturb an ordinary engine (so the test above has teeth)."""
    reqs, load = cases
    a, b = _both(tiny, reqs, load, deterministic=False)
    assert any(a[i].output_tokens != b[i].output_tokens for i in range(len(reqs)))


def test_deterministic_mode_runs_one_sequence_at_a_time(tiny):
    model, processor = tiny
    engine = LocalInferenceEngine(model, processor, max_batch_size=8, deterministic=True)
    assert engine.max_batch_size == 1 and engine.deterministic


def test_an_explicit_request_seed_wins(tiny, text_prompt):
    model, processor = tiny
    g = GenerationHyperparameters(max_new_tokens=6, temperature=1.0)
    req = ModelRequest(input_ids=text_prompt(), metadata={"seed": 11}, gconfig=g)
    outs = []
    for deterministic in (True, False):
        with LocalInferenceEngine(model, processor, deterministic=deterministic) as eng:
            outs.append(asyncio.run(eng.agenerate(req.copy())).output_tokens)
    assert outs[0] == outs[1]


def _lazy_request(processor, colour: str) -> LazyImagesRequest:
    image = Image.new("RGBA", (40, 30), colour)  # re-encoded for engines that read image_data
    item = {"messages": [{"role": "user", "content": "<image>Q"}], "images": [image]}
    prepared = AutoProcessorPreprocessor(processor).prepare(item)
    return LazyImagesRequest(
        prepared,
        input_ids=list(prepared.input_ids),
        metadata={"multi_modal_input": prepared.multi_modal_input},
    )


def test_the_sampling_key_is_what_the_engine_reads_so_tensors_are_never_encoded(
    qwen2vl_processor,
):
    """The local engine reads a workflow's tensors, so keying its sampling stream on the engine
    images would encode every image only to hash it; a request with images only is keyed on
    them."""
    red, blue = _lazy_request(qwen2vl_processor, "red"), _lazy_request(qwen2vl_processor, "blue")
    assert request_digest(red) != request_digest(blue)
    assert red.images_unread and blue.images_unread
    alike = ModelRequest(input_ids=list(red.input_ids), metadata=dict(red.metadata))
    alike.image_data = ["another encoding of the same pixels"]
    assert request_digest(alike) == request_digest(red)
    images_only = [ModelRequest(input_ids=[1, 2], image_data=[b]) for b in ("aGk=", "aGV5")]
    assert request_digest(images_only[0]) != request_digest(images_only[1])


def _sampled(prompt, mm=None) -> ModelRequest:
    g = GenerationHyperparameters(max_new_tokens=6, min_new_tokens=6, temperature=1.0)
    return ModelRequest(
        input_ids=list(prompt), metadata={"multi_modal_input": mm} if mm else {}, gconfig=g
    )


def _in_order(engine, reqs):
    """``reqs`` issued together, so they reach the one-row worker (and run) in this order."""

    async def run():
        return await asyncio.gather(*(engine.agenerate(r.copy()) for r in reqs))

    return asyncio.run(run())


def test_a_group_prefills_its_prompt_once_with_the_numbers_of_separate_prefills(
    tiny, vision_prompt, text_prompt
):
    """Deterministic mode runs one request at a time, so a GRPO group's n requests would prefill
    one prompt n times. Each one after the first reuses the previous prefill instead: the same
    forward of the same inputs. Two prompts of the same tokens with different pixels are
    different prompts, and the first one's cache is not changed by its own decode. The
    reference runs every request between unrelated prompts, so it never reuses a prefill."""
    model, processor = tiny
    a, c = vision_prompt(seed=0), vision_prompt(seed=1)
    assert a["input_ids"] == c["input_ids"]  # only the pixels differ
    group_a = [_sampled(a["input_ids"], a["mm"]) for _ in range(3)]
    group_c = [_sampled(c["input_ids"], c["mm"]) for _ in range(2)]
    with LocalInferenceEngine(model, processor, seed=5, deterministic=True) as engine:
        grouped = _in_order(engine, group_a + group_c)
        reused = engine.stats().get("prefills_reused", 0)
    fillers = [_sampled(text_prompt(f"filler {i}")) for i in range(5)]
    apart = [r for pair in zip(group_a + group_c, fillers, strict=True) for r in pair]
    with LocalInferenceEngine(model, processor, seed=5, deterministic=True) as engine:
        reference = _in_order(engine, apart)[::2]
        assert engine.stats().get("prefills_reused", 0) == 0
    assert reused == 3  # the 2nd and 3rd of group a, the 2nd of group c
    for got, want in zip(grouped, reference, strict=True):
        assert got.output_tokens == want.output_tokens
        assert torch.equal(torch.tensor(got.output_logprobs), torch.tensor(want.output_logprobs))
    assert grouped[0].output_tokens != grouped[1].output_tokens  # still distinct samples


def test_a_weight_update_forgets_the_reused_prefill(vision_prompt):
    model, processor = tiny_qwen2vl(seed=0)
    new_weights = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    p = vision_prompt(seed=0)
    twins = [_sampled(p["input_ids"], p["mm"]) for _ in range(2)]
    with LocalInferenceEngine(model, processor, seed=5, deterministic=True) as engine:
        _in_order(engine, twins[:1])
        engine.update_weights_from_state_dict(new_weights).result()
        after = _in_order(engine, twins[1:])[0]
        assert engine.stats().get("prefills_reused", 0) == 0
    with LocalInferenceEngine(model, processor, seed=5, deterministic=True) as engine:
        engine.update_weights_from_state_dict(new_weights).result()
        want = _in_order(engine, twins)[1]
    assert after.output_tokens == want.output_tokens
    assert torch.equal(torch.tensor(after.output_logprobs), torch.tensor(want.output_logprobs))
