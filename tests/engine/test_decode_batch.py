"""The decode batch's speed mechanics keep results intact: the incremental mask, one prefill for
requests that arrive together, and the SDPA 4-D mask against the 2-D mask path."""

from __future__ import annotations

import time

import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.batches import (
    assert_as_if_alone,
    generate_all,
    generate_together,
    shrinking_requests,
)
from vlrollout.engine import LocalInferenceEngine
from vlrollout.engine.batch import MaskBuffer
from vlrollout.testing.tiny_families import count_image_encodings
from vlrollout.testing.tiny_model import tiny_qwen2_text, tiny_qwen2vl


def test_mask_buffer_adds_columns_past_its_spare_room():
    """The bool mask and its additive SDPA form (0 attend, -inf padding) stay in step as columns
    are added, within the spare room and past it."""
    buf = MaskBuffer(torch.tensor([[0, 1], [1, 1]]), spare=1)
    for added in range(3):
        four_d = buf.for_sdpa(torch.float32)
        assert four_d.shape == (2, 1, 1, 2 + added) and four_d.dtype == torch.float32
        assert (four_d[:, 0, 0] == 0).tolist() == buf.mask.tolist()
        assert four_d[0, 0, 0, 0] == float("-inf")
        buf.add_column()
    assert buf.mask.tolist() == [[False, True, True, True, True], [True] * 5]
    four_d = buf.for_sdpa(torch.bfloat16)
    assert four_d.shape == (2, 1, 1, 5) and four_d.dtype == torch.bfloat16
    assert (four_d[:, 0, 0] == 0).tolist() == buf.mask.tolist()


def bursts_until_one_prefill(engine, reqs, tries: int = 5) -> list[int]:
    """Prefill batches of each burst of ``reqs`` (one ``asyncio.gather``), stopping at the
    first burst that took one: on a starved machine a submitter descheduled for longer than the
    worker's arrival gap splits a burst, as it should; an engine that does not wait never
    takes one for a burst (its first request prefills alone, the rest after)."""
    batches = []
    for _ in range(tries):
        before = engine.stats()
        generate_all(engine, reqs)
        after = engine.stats()
        assert after["prefills"] - before.get("prefills", 0) == len(reqs)
        batches.append(after["prefill_batches"] - before.get("prefill_batches", 0))
        if batches[-1] == 1:
            break
    return batches


def test_requests_arriving_together_share_one_prefill(tiny, vision_prompt):
    """``asyncio.gather`` submits requests a fraction of a millisecond apart; an idle worker
    waits for the burst instead of prefilling the first request alone."""
    model, processor = tiny
    reqs = shrinking_requests(vision_prompt, 6)
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        batches = bursts_until_one_prefill(engine, reqs)
    assert batches[-1] == 1, batches


def test_sdpa_decode_mask_matches_the_eager_two_d_path(vision_prompt):
    """SDPA models get a prepared 4-D bool mask each step, other attention implementations the
    2-D mask; both give the same tokens and logprobs on a shrinking, left-padded batch."""
    reqs = shrinking_requests(vision_prompt, 5)
    results = {}
    for impl in ("sdpa", "eager"):
        model, processor = tiny_qwen2vl(seed=0)
        model.set_attn_implementation(impl)
        with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
            results[impl] = generate_all(engine, reqs)
            assert engine.stats()["decode_rows"] > 2 * engine.stats()["decode_steps"]
    for a, b in zip(results["sdpa"], results["eager"], strict=True):
        assert a.output_tokens == b.output_tokens and len(a.output_tokens) >= 3
        torch.testing.assert_close(a.output_logprobs, b.output_logprobs, atol=1e-5, rtol=0)


def test_sliding_window_model_keeps_its_window(recwarn):
    """A sliding-window model gets the 2-D mask (the model builds its windowed masks): greedy
    tokens past the window equal ``model.generate``'s."""
    model = tiny_qwen2_text(
        use_sliding_window=True, sliding_window=4, max_window_layers=0, attn_implementation="sdpa"
    )
    torch.nn.init.normal_(model.lm_head.weight, std=2.0)
    prompt = [5, 9, 3, 7, 11, 2, 8]
    with torch.no_grad():
        ref = model.generate(
            torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False
        )[0, len(prompt) :].tolist()
    req = ModelRequest(
        input_ids=prompt,
        gconfig=GenerationHyperparameters(max_new_tokens=12, min_new_tokens=12, greedy=True),
    )
    with LocalInferenceEngine(model, None, max_batch_size=4) as engine:
        (resp,) = generate_all(engine, [req])
    assert resp.output_tokens == ref


def test_pause_during_the_arrival_wait_generates_nothing(tiny, vision_prompt, monkeypatch):
    """A pause that lands while the idle worker waits for more arrivals holds the request: no
    token is generated after ``pause_generation`` returns, and it finishes after continue."""
    import threading
    import time

    import vlrollout.engine.worker as worker

    monkeypatch.setattr(worker, "_ARRIVAL_GAP_S", 0.3)  # widen the window to hit it surely
    monkeypatch.setattr(worker, "_ARRIVAL_MAX_S", 0.3)
    model, processor = tiny
    (req,) = shrinking_requests(vision_prompt, 1)
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        out = []
        thread = threading.Thread(target=lambda: out.extend(generate_all(engine, [req])))
        thread.start()
        time.sleep(0.1)  # the worker is now waiting for more arrivals
        engine.pause_generation()
        time.sleep(0.5)  # past the arrival window
        assert engine.stats().get("tokens", 0) == 0 and not out
        engine.continue_generation()
        thread.join(timeout=30)
    assert len(out[0].output_tokens) == 3


def _record_prefills(engine) -> list[tuple[int, int, int]]:
    """``(new rows, running rows, decode steps so far)`` for every prefill the worker runs."""
    worker, seen = engine._worker, []
    prefill = worker._prefill

    def recording(tasks):
        seen.append((len(tasks), len(worker._active), worker.stats["decode_steps"]))
        return prefill(tasks)

    worker._prefill = recording
    return seen


def _fixed_length(vision_prompt, seed: int, new: int) -> ModelRequest:
    p = vision_prompt(seed=seed, width=56 + 28 * (seed % 3))
    return ModelRequest(
        input_ids=p["input_ids"],
        metadata={"multi_modal_input": p["mm"]},
        gconfig=GenerationHyperparameters(max_new_tokens=new, min_new_tokens=new, greedy=True),
    )


def test_queued_requests_join_a_running_batch_in_groups(tiny, vision_prompt):
    """A prefill costs a few decode steps, a free row almost nothing: while rows run, queued
    requests are admitted a quarter of the batch at a time (2 of 8), not one per finished row;
    tokens are those of each request run alone."""
    model, processor = tiny
    reqs = [_fixed_length(vision_prompt, i, 2 + 3 * (i % 8)) for i in range(20)]
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        seen = _record_prefills(engine)
        batched = generate_all(engine, reqs)
    joined = [new for new, running, _ in seen if running]
    assert sum(new for new, _, _ in seen) == 20 and joined
    # Only the queue's last request may join alone (fewer queued than a quarter of the batch).
    assert all(n >= 2 for n in joined[:-1]), seen
    assert_as_if_alone(model, processor, reqs, batched)


def test_a_queued_request_waits_at_most_a_few_steps_for_company(tiny, vision_prompt):
    """One row falls free while the others run long: the queued requests (more than fit) wait
    for a second free row at most ``_ADMIT_MAX_WAIT_STEPS`` decode steps, never for the long
    rows to finish."""
    from vlrollout.engine.worker import _ADMIT_MAX_WAIT_STEPS

    model, processor = tiny
    reqs = [_fixed_length(vision_prompt, 0, 3)] + [
        _fixed_length(vision_prompt, i, 40) for i in range(1, 11)
    ]
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        seen = _record_prefills(engine)
        generate_all(engine, reqs)
    first, joined = seen[0], [s for s in seen if s[1]]
    assert first[0] == 8 and joined
    new, running, steps = joined[0]
    # The short row finished after 2 decode steps (its first token came from the prefill).
    assert running == 7 and new == 1
    assert steps == 2 + _ADMIT_MAX_WAIT_STEPS
    assert steps < 39  # not held until the long rows finish


def test_a_group_sharing_a_prompt_computes_its_positions_once(tiny, vision_prompt, monkeypatch):
    """The n episodes of a GRPO group send one prompt n times: one M-RoPE position computation
    per distinct prompt in a prefill, and each episode's results are those of running alone."""
    model, processor = tiny
    calls = []
    rope_index = model.model.get_rope_index

    def counted(*args, **kwargs):
        calls.append(1)
        return rope_index(*args, **kwargs)

    monkeypatch.setattr(model.model, "get_rope_index", counted)
    reqs = [_fixed_length(vision_prompt, 0, 4)] * 4 + [_fixed_length(vision_prompt, 1, 6)]
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        together = generate_together(engine, reqs)
        assert engine.stats()["prefill_batches"] == 1
    assert len(calls) == 2
    assert_as_if_alone(model, processor, reqs, together)


def test_a_burst_whose_requests_take_longer_than_the_gap_to_prepare_shares_one_prefill(
    tiny, vision_prompt
):
    """Each request of a burst is prepared (its image tensors) before it reaches the queue; on
    a slow machine that takes longer than the arrival gap. A request being prepared counts as
    arriving, so the idle worker waits for it instead of prefilling those before it alone."""
    model, processor = tiny
    reqs = shrinking_requests(vision_prompt, 4)
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        acquire = engine._in_flight.acquire

        def slow_acquire(args):
            time.sleep(0.003)  # three arrival gaps; the GIL is free meanwhile
            return acquire(args)

        engine._in_flight.acquire = slow_acquire
        batches = bursts_until_one_prefill(engine, reqs, tries=1)
    assert batches == [1]


def test_a_pause_of_the_whole_process_does_not_split_a_burst(tiny, vision_prompt):
    """A garbage collection stops every thread: the worker's wait for the next arrival overruns
    while the submitter is stopped too. That is no quiet gap; the burst still shares one
    prefill. (The pause here: the submitting thread keeps the GIL for 50 ms.)"""
    import sys
    import time

    model, processor = tiny
    reqs = shrinking_requests(vision_prompt, 4)
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        submit, count = engine._worker.submit, [0]

        def pausing_submit(task):
            count[0] += 1
            future = submit(task)
            if count[0] == 2:
                interval = sys.getswitchinterval()
                sys.setswitchinterval(1.0)  # no forced GIL hand-over during the busy loop
                try:
                    end = time.perf_counter() + 0.05
                    while time.perf_counter() < end:
                        pass
                finally:
                    sys.setswitchinterval(interval)
            return future

        engine._worker.submit = pausing_submit
        batches = []
        for _ in range(5):  # see bursts_until_one_prefill: each burst pauses once
            count[0] = 0
            batches += bursts_until_one_prefill(engine, reqs, tries=1)
            if batches[-1] == 1:
                break
    assert batches[-1] == 1, batches


def test_a_group_sending_one_prompt_is_prefilled_once(tiny, vision_prompt):
    """A GRPO group's requests share their prompt: one prefill row serves the group, and each
    request still gets the tokens and logprobs it would get alone. Equal tokens with other
    pixels (same image size, other image) are another row."""
    model, processor = tiny
    group, other_pixels = vision_prompt(seed=0), vision_prompt(seed=1)
    assert group["input_ids"] == other_pixels["input_ids"]
    other_prompt = vision_prompt(seed=2, question="Where? And why?")

    def request(p, new):
        return ModelRequest(
            input_ids=p["input_ids"],
            metadata={"multi_modal_input": p["mm"]},
            gconfig=GenerationHyperparameters(max_new_tokens=new, min_new_tokens=new, greedy=True),
        )

    reqs = [request(group, 3 + i) for i in range(4)]
    reqs += [request(other_pixels, 4), request(other_prompt, 5), request(other_prompt, 2)]
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        results = generate_all(engine, reqs)
        stats = engine.stats()
    assert stats["prefill_batches"] == 1 and stats["prefills"] == 7
    assert stats["prefill_rows_run"] == 3
    assert_as_if_alone(model, processor, reqs, results)


def test_a_group_sharing_one_prepared_prompt_prepares_it_once(tiny, vision_prompt, monkeypatch):
    """The episodes of a group send one ``multi_modal_input`` object: its inputs are prepared
    once while the group is in flight (so it reaches the queue together), a later request
    prepares again, and each episode gets the tokens it would get alone."""
    import vlrollout.engine.in_flight as in_flight

    model, processor = tiny
    calls = []
    prepare = in_flight.prepare_inputs

    def counted(*args, **kwargs):
        calls.append(1)
        return prepare(*args, **kwargs)

    monkeypatch.setattr(in_flight, "prepare_inputs", counted)
    reqs = [_fixed_length(vision_prompt, 0, 3 + i) for i in range(4)]
    for r in reqs[1:]:
        r.metadata = reqs[0].metadata  # one object for the group, as a workflow sends it
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        together = generate_all(engine, reqs)
        assert len(calls) == 1
        mm = reqs[0].metadata["multi_modal_input"]
        mm["pixel_values"] = mm["pixel_values"].clone()
        generate_all(engine, reqs[:1])
        assert len(calls) == 2
    assert_as_if_alone(model, processor, reqs, together)


def _group(prompt, n: int) -> list[ModelRequest]:
    return [
        ModelRequest(
            input_ids=prompt["input_ids"],
            metadata={"multi_modal_input": prompt["mm"]},
            gconfig=GenerationHyperparameters(
                max_new_tokens=3 + i, min_new_tokens=3 + i, greedy=True
            ),
        )
        for i in range(n)
    ]


def test_a_group_larger_than_the_free_rows_encodes_its_image_once(vision_prompt):
    """Five requests of one prompt on two rows prefill in three forwards or more; the image is
    encoded by the first only and every request still gets what it gets alone. The features are
    kept only while the engine has requests: the same group sent again once it is idle is
    encoded again."""
    model, processor = tiny_qwen2vl(seed=0)
    encoded = count_image_encodings(model)
    reqs = _group(vision_prompt(seed=3), 5)
    with LocalInferenceEngine(model, processor, max_batch_size=2, seed=0) as engine:
        results = generate_all(engine, reqs)
        assert engine.stats()["prefill_batches"] >= 3 and encoded == [1]
        time.sleep(0.5)  # the worker finds itself idle (and forgets) right after the last answer
        generate_all(engine, reqs)
    assert encoded == [1, 1]
    assert_as_if_alone(model, processor, reqs, results)


def test_new_weights_drop_the_kept_image_features(vision_prompt):
    model, processor = tiny_qwen2vl(seed=0)
    encoded = count_image_encodings(model)
    prompt = vision_prompt(seed=3)
    with LocalInferenceEngine(model, processor, max_batch_size=2, seed=0) as engine:
        inputs = {
            "input_ids": torch.tensor([prompt["input_ids"]]),
            **{k: v for k, v in prompt["mm"].items() if k in ("pixel_values", "image_grid_thw")},
        }
        with torch.inference_mode():
            model(**inputs)
            model(**inputs)  # kept: not encoded again
        engine.update_weights_from_state_dict({}).result()
        with torch.inference_mode():
            model(**inputs)
    assert encoded == [1, 1]


def _decode_masks(model) -> tuple[list, object]:
    """The attention masks the decoder gets in decode steps (one new token a row)."""
    seen: list = []

    def spy(_module, _args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[-1] == 1:
            mask = kwargs.get("attention_mask")
            seen.append(mask.get("full_attention") if isinstance(mask, dict) else mask)

    return seen, model.get_decoder().register_forward_pre_hook(spy, with_kwargs=True)


def test_a_decode_batch_without_padding_hands_the_decoder_no_mask(vision_prompt):
    """Rows of one prompt have no padding, so a decode step needs no mask: transformers' SDPA
    path then reads grouped key/value heads in place (``enable_gqa``) instead of copying them
    for every query head in every layer, as ``generate`` does. A left-padded batch keeps its
    mask; every row gets the tokens and logprobs it gets alone."""
    model, processor = tiny_qwen2vl(seed=0)
    p = vision_prompt(seed=0)
    gconfig = GenerationHyperparameters(max_new_tokens=4, min_new_tokens=4, greedy=True)
    group = [
        ModelRequest(
            input_ids=p["input_ids"], metadata={"multi_modal_input": p["mm"]}, gconfig=gconfig
        )
        for _ in range(3)
    ]
    padded = shrinking_requests(vision_prompt, 3)
    with LocalInferenceEngine(model, processor, max_batch_size=8) as engine:
        seen, hook = _decode_masks(model)  # after the engine's probe of its step
        try:
            results = generate_together(engine, group)
            group_masks = list(seen)
            seen.clear()
            padded_results = generate_together(engine, padded)
        finally:
            hook.remove()
    assert group_masks and all(m is None for m in group_masks)
    assert seen and all(isinstance(m, torch.Tensor) for m in seen[:2])
    assert_as_if_alone(model, processor, group, results)
    assert_as_if_alone(model, processor, padded, padded_results)
