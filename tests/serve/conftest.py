"""Fixtures for ``vlrollout serve`` tests: the tiny model served on a free localhost port.

Servers run on a background thread (:class:`vlrollout.serve.background.BackgroundServer`), are
bounded in time by AReaL's own client timeouts, and are always stopped by the fixture.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from vlrollout.engine import LocalInferenceEngine
from vlrollout.serve.app import build_app
from vlrollout.serve.background import BackgroundServer

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets" / "tiny-qwen2vl"
SAMPLES = ROOT / "assets" / "samples" / "data.jsonl"


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # The machine's cores are shared; OpenMP spinning on all of them makes the tiny model slow.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def load_engine(**kwargs) -> LocalInferenceEngine:
    kwargs.setdefault("dtype", torch.float32)
    return LocalInferenceEngine.from_pretrained(str(ASSET), **kwargs).initialize()


@contextmanager
def serving(protocol: str, engine: LocalInferenceEngine | None = None, **app_kwargs):
    """``(server, engine)``: ``engine`` (default: the tiny model) served until the block ends."""
    own = engine is None
    engine = engine or load_engine()
    server = BackgroundServer(build_app(engine, protocol, **app_kwargs)).start()
    try:
        yield server, engine
    finally:
        server.stop()
        if own:
            engine.destroy()


@pytest.fixture(scope="module")
def sglang_server():
    with serving("sglang") as pair:
        yield pair


@pytest.fixture(scope="module")
def vllm_server():
    with serving("vllm") as pair:
        yield pair


def areal_client(protocol: str, address: str, tokenizer_path: str | Path = ASSET, **config):
    """AReaL's own remote engine for ``protocol``, connected to ``address`` (the tokenizer of
    ``tokenizer_path``, default the shipped model); destroy it after."""
    from vlrollout.engine.factory import remote_engine

    config.setdefault("setup_timeout", 20)
    config.setdefault("request_timeout", 60)
    config.setdefault("request_retries", 1)
    config.setdefault("pause_grace_period", 0.0)
    config.setdefault("max_head_offpolicyness", 100)
    config.setdefault("consumer_batch_size", 4)
    engine = remote_engine(
        protocol, tokenizer_path=str(tokenizer_path), max_concurrent_rollouts=8, **config
    )
    engine.initialize(addr=address)
    return engine


def vision_prompt(processor, images, question: str = "How many shapes are there?"):
    """``(input_ids, multi_modal_input, messages)`` for a user turn with ``images``."""
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": question}]
    messages = [{"role": "user", "content": content}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = processor(text=[text], images=[list(images)] if images else None, return_tensors="pt")
    mm = {k: out[k] for k in ("pixel_values", "image_grid_thw") if k in out}
    return out["input_ids"][0].tolist(), mm, messages


def teacher_forced(model, prompt_ids, completion, temperature=1.0, mm=None):
    """The trainer's recompute: one forward over prompt + completion, AReaL's gather_logprobs."""
    from areal.utils.functional.vocab_parallel import gather_logprobs

    ids = torch.tensor([list(prompt_ids) + list(completion)])
    kwargs = {}
    if mm:
        image_id = model.config.image_token_id
        kwargs = dict(mm, mm_token_type_ids=(ids == image_id).long())
    model.model.rope_deltas = None
    with torch.no_grad():
        logits = model(input_ids=ids, **kwargs).logits[0].float()
    labels = torch.roll(ids[0], shifts=-1)
    with torch._dynamo.config.patch(disable=True):
        logprobs = gather_logprobs(logits, labels, temperature=temperature)
    return logprobs[len(prompt_ids) - 1 : -1]
