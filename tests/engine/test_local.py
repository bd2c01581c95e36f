"""LocalInferenceEngine: logprobs vs the trainer's recompute, stops, versions, batching, loop."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from vlrollout.engine import LocalInferenceEngine, PlaceholderMismatchError
from vlrollout.testing.tiny_model import tiny_qwen2vl


def gconfig(**kw) -> GenerationHyperparameters:
    kw.setdefault("max_new_tokens", 12)
    return GenerationHyperparameters(**kw)


@pytest.fixture
def engine(tiny):
    model, processor = tiny
    with LocalInferenceEngine(model, processor, max_batch_size=8) as eng:
        yield eng


def generate(engine, *reqs):
    async def run():
        return await asyncio.gather(*(engine.agenerate(r) for r in reqs))

    return asyncio.run(run())


# ---------------------------------------------------------------- logprobs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("kind", ["text", "vision"])
def test_logprobs_equal_teacher_forced_forward(
    tiny, engine, vision_prompt, text_prompt, teacher_forced, kind, temperature
):
    model, _ = tiny
    if kind == "vision":
        p = vision_prompt(seed=1)
        req = ModelRequest(
            input_ids=p["input_ids"],
            metadata={"multi_modal_input": p["mm"], "seed": 3},
            gconfig=gconfig(temperature=temperature, min_new_tokens=12),
        )
    else:
        p = {"input_ids": text_prompt(), "mm": None, "mm_token_type_ids": None}
        req = ModelRequest(
            input_ids=p["input_ids"],
            metadata={"seed": 3},
            gconfig=gconfig(temperature=temperature, min_new_tokens=12),
        )
    (resp,) = generate(engine, req)
    assert resp.output_len == 12
    ref = teacher_forced(
        model, p["input_ids"], resp.output_tokens, temperature, p["mm"], p["mm_token_type_ids"]
    )
    torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=1e-4, rtol=0)
    if temperature != 1.0:  # the temperature really enters the logprobs
        at_one = teacher_forced(
            model, p["input_ids"], resp.output_tokens, 1.0, p["mm"], p["mm_token_type_ids"]
        )
        assert (at_one - ref).abs().max() > 0.05


def test_batched_rows_of_different_lengths_match_teacher_forcing(
    tiny, engine, vision_prompt, text_prompt, teacher_forced
):
    """Left-padded decode batch: every row's logprobs still equal its own unpadded forward."""
    model, _ = tiny
    prompts = [
        vision_prompt(seed=0),
        vision_prompt(seed=5, question="Where is the red circle?", width=112, height=56),
        vision_prompt(seed=7, n_images=2),
        {"input_ids": text_prompt("Answer with a number."), "mm": None, "mm_token_type_ids": None},
    ]
    lengths = {len(p["input_ids"]) for p in prompts}
    assert len(lengths) == len(prompts)
    reqs = [
        ModelRequest(
            input_ids=p["input_ids"],
            metadata={"multi_modal_input": p["mm"], "seed": i} if p["mm"] else {"seed": i},
            gconfig=gconfig(temperature=0.8, min_new_tokens=3 + 3 * i, max_new_tokens=3 + 3 * i),
        )
        for i, p in enumerate(prompts)
    ]
    resps = generate(engine, *reqs)
    assert engine.stats()["decode_rows"] > engine.stats()["decode_steps"]  # really batched
    for p, resp in zip(prompts, resps, strict=True):
        ref = teacher_forced(
            model, p["input_ids"], resp.output_tokens, 0.8, p["mm"], p["mm_token_type_ids"]
        )
        torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=1e-4, rtol=0)


def test_image_data_path_matches_multi_modal_input(engine, vision_prompt):
    p = vision_prompt(seed=2)
    g = gconfig(greedy=True, min_new_tokens=8, max_new_tokens=8)
    from_mm, from_b64 = generate(
        engine,
        ModelRequest(input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]}, gconfig=g),
        ModelRequest(input_ids=p["input_ids"], image_data=p["image_data"], gconfig=g),
    )
    assert from_b64.output_tokens == from_mm.output_tokens
    torch.testing.assert_close(from_b64.output_logprobs, from_mm.output_logprobs, atol=1e-5, rtol=0)
    assert from_b64.input_images == p["image_data"]


def test_images_change_the_output(engine, vision_prompt):
    """Guard against a text-only fallback: different pixels, same ids, different logprobs."""
    a, b = vision_prompt(seed=0), vision_prompt(seed=9)
    assert a["input_ids"] == b["input_ids"]
    g = gconfig(greedy=True, min_new_tokens=4, max_new_tokens=4)
    ra, rb = generate(
        engine,
        *(
            ModelRequest(
                input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]}, gconfig=g
            )
            for p in (a, b)
        ),
    )
    assert abs(ra.output_logprobs[0] - rb.output_logprobs[0]) > 1e-4


# ---------------------------------------------------------------- placeholders


def test_placeholder_count_mismatch_raises(engine, vision_prompt, tiny):
    _, processor = tiny
    p = vision_prompt(seed=0)
    short = list(p["input_ids"])
    short.remove(processor.image_token_id)
    with pytest.raises(PlaceholderMismatchError, match="11 image placeholder tokens.*12 tokens"):
        generate(engine, ModelRequest(input_ids=short, metadata={"multi_modal_input": p["mm"]}))
    with pytest.raises(PlaceholderMismatchError, match="in 1 run.*for 2 image"):
        generate(engine, ModelRequest(input_ids=p["input_ids"], image_data=p["image_data"] * 2))
    with pytest.raises(PlaceholderMismatchError, match="no images"):
        generate(engine, ModelRequest(input_ids=p["input_ids"]))


def test_placeholder_tokens_are_never_sampled(tiny, vision_prompt, logit_bias, teacher_forced):
    model, processor = tiny_qwen2vl(seed=0)
    tok = processor.tokenizer
    placeholders = {
        processor.image_token_id,
        processor.video_token_id,
        *tok.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>"]),
    }
    logit_bias(model, {t: 30.0 for t in placeholders})
    p = vision_prompt(seed=4)
    with LocalInferenceEngine(model, processor) as eng:
        assert placeholders <= eng.banned_token_ids
        (resp,) = generate(
            eng,
            ModelRequest(
                input_ids=p["input_ids"],
                metadata={"multi_modal_input": p["mm"], "seed": 0},
                gconfig=gconfig(min_new_tokens=40, max_new_tokens=40),
            ),
        )
    assert not placeholders & set(resp.output_tokens)
    # The reported logprob is the unmasked one the trainer recomputes: tiny, since the banned
    # tokens (+30 logits) hold nearly all the mass, whichever other token was drawn.
    ref = teacher_forced(
        model, p["input_ids"], resp.output_tokens, 1.0, p["mm"], p["mm_token_type_ids"]
    )
    torch.testing.assert_close(torch.tensor(resp.output_logprobs), ref, atol=1e-4, rtol=0)
    assert max(resp.output_logprobs) < math.log(1e-5)


# ---------------------------------------------------------------- stops, versions


def test_stop_token_ends_generation_and_is_kept(logit_bias, text_prompt):
    model, processor = tiny_qwen2vl(seed=0)
    eos = processor.tokenizer.eos_token_id
    logit_bias(model, {eos: 40.0})
    with LocalInferenceEngine(model, processor) as eng:
        plain, delayed = generate(
            eng,
            ModelRequest(input_ids=text_prompt(), gconfig=gconfig()),
            ModelRequest(input_ids=text_prompt(), gconfig=gconfig(min_new_tokens=3)),
        )
    assert plain.output_tokens == [eos] and plain.stop_reason == "stop"
    # As in HF and SGLang, stop tokens are masked while fewer than min_new_tokens were generated.
    assert len(delayed.output_tokens) == 4 and delayed.stop_reason == "stop"
    assert delayed.output_tokens[-1] == eos and eos not in delayed.output_tokens[:-1]
    assert delayed.output_tokens_without_stop == delayed.output_tokens[:-1]


def test_custom_stop_token_ignore_eos_and_length(logit_bias, text_prompt):
    prompt = text_prompt()
    eos_model, processor = tiny_qwen2vl(seed=0)
    eos = processor.tokenizer.eos_token_id
    logit_bias(eos_model, {eos: 40.0})
    with LocalInferenceEngine(eos_model, processor) as eng:
        ignored, capped_stop = generate(
            eng,
            ModelRequest(input_ids=prompt, gconfig=gconfig(ignore_eos=True, max_new_tokens=5)),
            ModelRequest(input_ids=prompt, gconfig=gconfig(max_tokens=len(prompt) + 4)),
        )
    assert ignored.output_tokens == [eos] * 5 and ignored.stop_reason == "length"
    assert capped_stop.output_tokens == [eos] and capped_stop.stop_reason == "stop"

    stop_model, _ = tiny_qwen2vl(seed=0)
    (stop_id,) = processor.tokenizer.encode(" fox")
    logit_bias(stop_model, {stop_id: 40.0})
    with LocalInferenceEngine(stop_model, processor) as eng:
        custom, not_a_stop = generate(
            eng,
            ModelRequest(input_ids=prompt, gconfig=gconfig(stop_token_ids=[stop_id])),
            ModelRequest(input_ids=prompt, gconfig=gconfig(max_new_tokens=3)),
        )
    assert custom.output_tokens == [stop_id] and custom.stop_reason == "stop"
    assert not_a_stop.output_tokens == [stop_id] * 3 and not_a_stop.stop_reason == "length"

    plain, _ = tiny_qwen2vl(seed=0)
    with LocalInferenceEngine(plain, processor) as eng:
        (capped,) = generate(
            eng,
            ModelRequest(
                input_ids=prompt, gconfig=gconfig(max_tokens=len(prompt) + 4, ignore_eos=True)
            ),
        )
    assert capped.output_len == 4 and capped.stop_reason == "length"


def test_stop_string(logit_bias, text_prompt):
    model, processor = tiny_qwen2vl(seed=0)
    tok = processor.tokenizer
    (fox,) = tok.encode(" fox")
    logit_bias(model, {fox: 30.0})
    with LocalInferenceEngine(model, processor) as eng:
        (resp,) = generate(
            eng,
            ModelRequest(input_ids=text_prompt(), gconfig=gconfig(stop=["fox"], min_new_tokens=2)),
        )
    # " fox" completes the stop string at once, but only counts from the second token on.
    assert resp.stop_reason == "stop" and resp.output_tokens == [fox, fox]


def test_versions_track_set_version(engine, text_prompt):
    engine.set_version(3)
    (resp,) = generate(
        engine, ModelRequest(input_ids=text_prompt(), gconfig=gconfig(min_new_tokens=12))
    )
    assert resp.output_versions == [3] * 12

    async def run():
        task = asyncio.create_task(
            engine.agenerate(
                ModelRequest(
                    input_ids=text_prompt(),
                    gconfig=gconfig(min_new_tokens=400, max_new_tokens=400),
                )
            )
        )
        start = engine.stats()["tokens"]
        while engine.stats()["tokens"] < start + 5:
            await asyncio.sleep(0.001)
        engine.pause_generation()
        engine.set_version(4)
        engine.continue_generation()
        return await task

    resp = asyncio.run(run())
    k = resp.output_versions.count(3)
    assert 5 <= k < 400 and resp.output_versions == [3] * k + [4] * (400 - k)


def test_weight_update_mid_generation(text_prompt, teacher_forced):
    """Tokens after an update come from the new weights (the running sequence is re-prefilled)."""
    old, processor = tiny_qwen2vl(seed=0)
    new, _ = tiny_qwen2vl(seed=1)
    reference_old, _ = tiny_qwen2vl(seed=0)
    prompt = text_prompt()
    with LocalInferenceEngine(old, processor) as eng:

        async def run():
            task = asyncio.create_task(
                eng.agenerate(
                    ModelRequest(
                        input_ids=prompt, gconfig=gconfig(min_new_tokens=300, max_new_tokens=300)
                    )
                )
            )
            while eng.stats().get("tokens", 0) < 5:
                await asyncio.sleep(0.001)
            await asyncio.wrap_future(
                eng.update_weights_from_state_dict(new.state_dict(), version=1)
            )
            return await task

        resp = asyncio.run(run())
    k = resp.output_versions.count(0)
    assert 5 <= k < 300 and resp.output_versions == [0] * k + [1] * (300 - k)
    got = torch.tensor(resp.output_logprobs)
    ref_old = teacher_forced(reference_old, prompt, resp.output_tokens, 1.0)
    ref_new = teacher_forced(new, prompt, resp.output_tokens, 1.0)
    torch.testing.assert_close(got[:k], ref_old[:k], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[k:], ref_new[k:], atol=1e-4, rtol=0)


# ---------------------------------------------------------------- determinism, concurrency


def _mixed_requests(vision_prompt, text_prompt, n=8):
    reqs = []
    for i in range(n):
        if i % 2:
            p = vision_prompt(seed=i, question="Describe the image in one sentence." * (i % 3 + 1))
            meta = {"multi_modal_input": p["mm"]}
            ids = p["input_ids"]
        else:
            ids, meta = text_prompt("What is in the image? " * (i + 1)), {}
        reqs.append(
            ModelRequest(
                input_ids=ids,
                metadata=meta,
                gconfig=gconfig(greedy=True, min_new_tokens=4 + i, max_new_tokens=4 + i),
            )
        )
    return reqs


def test_greedy_concurrent_equals_sequential(tiny, vision_prompt, text_prompt):
    model, processor = tiny
    reqs = _mixed_requests(vision_prompt, text_prompt)
    with LocalInferenceEngine(model, processor, max_batch_size=1) as eng:
        sequential = [generate(eng, r)[0] for r in reqs]
        again = [generate(eng, r)[0] for r in reqs]
    with LocalInferenceEngine(model, processor, max_batch_size=8) as eng:
        concurrent = generate(eng, *reqs)
        assert eng.stats()["decode_rows"] >= 4 * eng.stats()["decode_steps"]
    for s, a, c in zip(sequential, again, concurrent, strict=True):
        assert s.output_tokens == a.output_tokens == c.output_tokens
        torch.testing.assert_close(c.output_logprobs, s.output_logprobs, atol=1e-4, rtol=0)


def test_event_loop_keeps_running_during_generation(engine, text_prompt):
    seen: list[int] = []

    async def ticker(done: asyncio.Event):
        while not done.is_set():
            seen.append(engine.stats().get("tokens", 0))
            await asyncio.sleep(0)

    async def run():
        done = asyncio.Event()
        tick = asyncio.create_task(ticker(done))
        reqs = [
            ModelRequest(
                input_ids=text_prompt(), gconfig=gconfig(min_new_tokens=100, max_new_tokens=100)
            )
            for _ in range(4)
        ]
        await asyncio.gather(*(engine.agenerate(r) for r in reqs))
        done.set()
        await tick

    asyncio.run(run())
    # The ticker ran while tokens were being produced: it saw intermediate counts (a loop blocked
    # by generation sees only 0 and 400; how many it sees depends on the machine's load).
    intermediate = {n for n in seen if 0 < n < 400}
    assert len(intermediate) >= 3


def test_cancelled_request_does_not_disturb_others(engine, text_prompt):
    async def run():
        long = asyncio.create_task(
            engine.agenerate(
                ModelRequest(
                    input_ids=text_prompt(),
                    gconfig=gconfig(min_new_tokens=2000, max_new_tokens=2000),
                )
            )
        )
        while engine.stats().get("tokens", 0) < 3:
            await asyncio.sleep(0.001)
        long.cancel()
        short = await engine.agenerate(
            ModelRequest(
                input_ids=text_prompt(), gconfig=gconfig(min_new_tokens=5, max_new_tokens=5)
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await long
        return short

    short = asyncio.run(run())
    assert short.output_len == 5
    assert engine.stats()["tokens"] < 1000  # the cancelled request stopped early


# ---------------------------------------------------------------- lifecycle and loading


def test_not_initialized_and_bad_requests(tiny, text_prompt):
    model, processor = tiny
    eng = LocalInferenceEngine(model, processor)
    assert not eng.initialized
    with pytest.raises(RuntimeError, match="initialize"):
        generate(eng, ModelRequest(input_ids=text_prompt()))
    with eng:
        with pytest.raises(ValueError, match="n_samples=2"):
            generate(eng, ModelRequest(input_ids=text_prompt(), gconfig=gconfig(n_samples=2)))
        with pytest.raises(ValueError, match="No room"):
            generate(eng, ModelRequest(input_ids=text_prompt(), gconfig=gconfig(max_tokens=3)))
        vocab = model.get_input_embeddings().num_embeddings
        for bad, at in ((vocab, 2), (-1, 0)):  # the embedding would raise IndexError mid-batch
            ids = text_prompt()
            ids[at] = bad
            with pytest.raises(ValueError, match=f"token id {bad} at position {at}.*{vocab}"):
                generate(eng, ModelRequest(input_ids=ids))
        with pytest.raises(KeyError, match="not parameters"):
            eng.update_weights_from_state_dict({"lm_head.nope": torch.zeros(1)}).result()
    with pytest.raises(NotImplementedError, match="update_weights_from_state_dict"):
        eng.update_weights_from_distributed(None, [])


def test_from_pretrained_and_update_weights_from_disk(tmp_path, tiny, text_prompt):
    from areal.api.io_struct import WeightUpdateMeta

    model, processor = tiny
    model.save_pretrained(tmp_path / "a")
    processor.save_pretrained(tmp_path / "a")
    other, _ = tiny_qwen2vl(seed=1)
    other.save_pretrained(tmp_path / "b")
    req = ModelRequest(
        input_ids=text_prompt(), gconfig=gconfig(greedy=True, min_new_tokens=6, max_new_tokens=6)
    )
    with LocalInferenceEngine(model, processor) as eng:
        (expected,) = generate(eng, req)
    with LocalInferenceEngine(other, processor) as eng:
        (expected_b,) = generate(eng, req)
    with LocalInferenceEngine.from_pretrained(str(tmp_path / "a"), dtype=torch.float32) as eng:
        assert eng.processor is not None and eng.banned_token_ids
        (loaded,) = generate(eng, req)
        eng.update_weights_from_disk(
            WeightUpdateMeta(type="disk", path=str(tmp_path / "b"))
        ).result()
        (updated,) = generate(eng, req)
    assert loaded.output_tokens == expected.output_tokens
    assert updated.output_tokens == expected_b.output_tokens
    torch.testing.assert_close(
        updated.output_logprobs, expected_b.output_logprobs, atol=1e-5, rtol=0
    )


def test_generation_stops_at_the_end_of_the_models_context(tiny, text_prompt):
    """As a server answers for its context length: the engine never decodes positions the model
    has no embedding for, whatever gconfig.max_tokens (AReaL's default is far larger) says."""
    model, processor = tiny
    context = model.config.text_config.max_position_embeddings
    prompt = text_prompt()
    with LocalInferenceEngine(model, processor) as eng:
        long = prompt + [prompt[-2]] * (context - len(prompt) - 3)
        (resp,) = generate(eng, ModelRequest(input_ids=long, gconfig=gconfig(min_new_tokens=12)))
        assert len(long) + resp.output_len == context and resp.stop_reason == "length"
        with pytest.raises(ValueError, match="No room"):
            generate(eng, ModelRequest(input_ids=long + [prompt[-2]] * 3, gconfig=gconfig()))


def test_a_stop_string_longer_than_the_decode_window_still_stops(logit_bias, text_prompt):
    """ " fox" repeated 30 times is 120 characters (30 tokens): the engine looks far enough back
    for the longest stop string, as SGLang and vLLM match one of any length."""
    model, processor = tiny_qwen2vl(seed=0)
    (fox,) = processor.tokenizer.encode(" fox")
    logit_bias(model, {fox: 30.0})
    stop = " fox" * 30 + " fox" * 20  # 50 tokens, 200 characters
    with LocalInferenceEngine(model, processor) as eng:
        (resp,) = generate(
            eng,
            ModelRequest(input_ids=text_prompt(), gconfig=gconfig(stop=[stop], max_new_tokens=80)),
        )
    assert resp.stop_reason == "stop" and resp.output_tokens == [fox] * 50


@pytest.mark.parametrize(("skips", "reason", "length"), [(False, "stop", 1), (True, "length", 4)])
def test_a_stop_string_is_matched_in_the_text_with_or_without_special_tokens(
    logit_bias, text_prompt, skips, reason, length
):
    """SGLang matches stop strings in text with special tokens kept; vLLM in the text its client
    gets (``metadata["stop_skips_special"]``), where a special token's text never appears."""
    model, processor = tiny_qwen2vl(seed=0)
    tok = processor.tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    logit_bias(model, {end: 30.0})
    req = ModelRequest(
        input_ids=text_prompt(),
        gconfig=gconfig(stop=["<|im_end|>"], max_new_tokens=4, ignore_eos=True),
        metadata={"stop_skips_special": True} if skips else {},
    )
    with LocalInferenceEngine(model, processor) as eng:
        (resp,) = generate(eng, req)
    assert (resp.stop_reason, resp.output_len) == (reason, length)
