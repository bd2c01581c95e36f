"""The SGLang subset over real HTTP: what AReaL reads, equal to the in-process engine."""

from __future__ import annotations

import asyncio

import requests
import torch
from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest

from tests.engine.conftest import make_image as image
from tests.engine.conftest import to_base64 as png_base64
from tests.serve.conftest import teacher_forced, vision_prompt


def _generate(server, **body):
    return requests.post(f"{server.url}/generate", json=body, timeout=60)


def test_health(sglang_server):
    server, _ = sglang_server
    r = requests.get(f"{server.url}/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_generate_with_image_data_equals_the_in_process_engine(sglang_server):
    server, engine = sglang_server
    images = [image(1), image(2, 64, 120)]
    ids, mm, _ = vision_prompt(engine.processor, images)
    r = _generate(
        server,
        input_ids=ids,
        image_data=[png_base64(im) for im in images],
        sampling_params={"max_new_tokens": 8, "temperature": 0.0, "stop_token_ids": []},
        return_logprob=True,
        stream=False,
    )
    assert r.status_code == 200, r.text
    meta = r.json()["meta_info"]
    tokens = [t for _, t, _ in meta["output_token_logprobs"]]
    logprobs = [lp for lp, _, _ in meta["output_token_logprobs"]]
    assert meta["finish_reason"]["type"] in ("stop", "length")
    assert r.json()["output_ids"] == tokens and meta["completion_tokens"] == len(tokens)

    # The same prompt in-process, with the processor's own tensors: same tokens and logprobs.
    req = ModelRequest(
        input_ids=ids,
        metadata={"multi_modal_input": mm},
        gconfig=GenerationHyperparameters(max_new_tokens=8, greedy=True),
    )
    local = asyncio.run(engine.agenerate(req))
    assert local.output_tokens == tokens
    torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(local.output_logprobs))
    ref = teacher_forced(engine.model, ids, tokens, 1.0, mm)
    torch.testing.assert_close(torch.tensor(logprobs), ref, atol=1e-4, rtol=0)


def test_images_change_the_answer(sglang_server):
    """The images really reach the model: two images, two different greedy distributions."""
    server, engine = sglang_server
    firsts = []
    for seed in (3, 4):
        ids, _, _ = vision_prompt(engine.processor, [image(seed)])
        r = _generate(
            server,
            input_ids=ids,
            image_data=[png_base64(image(seed))],
            sampling_params={"max_new_tokens": 1, "temperature": 0.0},
            return_logprob=True,
        )
        firsts.append(r.json()["meta_info"]["output_token_logprobs"][0][0])
    assert firsts[0] != firsts[1]


def test_sampling_fields_areal_sends(sglang_server):
    """top_k=1e8, stop_token_ids, ignore_eos, frequency_penalty, skip_special_tokens, stop."""
    server, engine = sglang_server
    ids = engine.tokenizer("Hello")["input_ids"]
    r = _generate(
        server,
        input_ids=ids,
        image_data=None,
        sampling_params={
            "top_p": 1.0,
            "top_k": 100000000,
            "max_new_tokens": 5,
            "temperature": 1.0,
            "stop_token_ids": [],
            "ignore_eos": True,
            "skip_special_tokens": True,
            "frequency_penalty": 0.0,
        },
        return_logprob=True,
        stream=False,
    )
    assert r.status_code == 200, r.text
    meta = r.json()["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    assert len(meta["output_token_logprobs"]) == 5


def test_a_jpeg_whose_base64_starts_with_a_slash_is_an_image_not_a_path(sglang_server):
    """Every JPEG's base64 starts with "/9j/" (bytes FF D8 FF). Our preprocessor sends an RGB
    JPEG to the engine as its own bytes, so `vlrollout run --engine sglang` on photos had every
    JPEG item refused as a "server-side path" (400 -> engine_error)."""
    import base64
    import io

    from PIL import Image

    server, engine = sglang_server
    buf = io.BytesIO()
    image(5, 120, 80).save(buf, format="JPEG", quality=90)
    jpeg = base64.b64encode(buf.getvalue()).decode()
    assert jpeg.startswith("/9j/")
    decoded = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    ids, mm, _ = vision_prompt(engine.processor, [decoded])
    r = _generate(
        server,
        input_ids=ids,
        image_data=[jpeg],
        sampling_params={"max_new_tokens": 4, "temperature": 0.0},
        return_logprob=True,
    )
    assert r.status_code == 200, r.text
    tokens = [t for _, t, _ in r.json()["meta_info"]["output_token_logprobs"]]
    req = ModelRequest(
        input_ids=ids,
        metadata={"multi_modal_input": mm},
        gconfig=GenerationHyperparameters(max_new_tokens=4, greedy=True),
    )
    assert asyncio.run(engine.agenerate(req)).output_tokens == tokens


def test_a_stop_string_is_trimmed_and_named_in_finish_reason(sglang_server):
    import requests as http

    server, _ = sglang_server
    params = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": [1, 5, 9], "sampling_params": params}
    text = http.post(server.url + "/generate", json=body, timeout=60).json()["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip() and stop in text, text
    body["sampling_params"] = {**params, "stop": stop}
    out = http.post(server.url + "/generate", json=body, timeout=60).json()
    assert out["text"] == text[: text.index(stop)]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
