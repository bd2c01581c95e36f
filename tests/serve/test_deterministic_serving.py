"""``vlrollout serve --deterministic``: what a client gets does not depend on what else is in flight."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import requests

from tests.engine.conftest import make_image as image
from tests.engine.conftest import to_base64 as png_base64
from tests.serve.conftest import load_engine, serving, vision_prompt


def _bodies(engine):
    bodies = []
    for seed in range(3):
        ids, _, _ = vision_prompt(engine.processor, [image(seed)])
        bodies.append({"input_ids": ids, "image_data": [png_base64(image(seed))]})
    bodies.append({"input_ids": engine.tokenizer("Describe it.")["input_ids"]})
    for body in bodies:
        body.update(sampling_params={"max_new_tokens": 6, "temperature": 1.0}, return_logprob=True)
    return bodies


def _serve_all(server, bodies, order, noise: int):
    def post(body):
        return requests.post(f"{server.url}/generate", json=body, timeout=60).json()

    noise_body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}}
    with ThreadPoolExecutor(8) as pool:
        futures = {i: pool.submit(post, bodies[i]) for i in order}
        extra = [pool.submit(post, noise_body) for _ in range(noise)]
        out = {i: f.result()["meta_info"]["output_token_logprobs"] for i, f in futures.items()}
        for f in extra:
            f.result()
    return out


def test_two_deterministic_servers_agree_under_different_load():
    results = []
    for order, noise in (([0, 1, 2, 3], 0), ([3, 2, 1, 0], 4)):
        engine = load_engine(seed=3, deterministic=True)
        with serving("sglang", engine) as (server, _):
            results.append(_serve_all(server, _bodies(engine), order, noise))
        engine.destroy()
    assert results[0] == results[1]  # tokens and logprobs, bit for bit
