"""Fixtures for the local engine tests: a tiny random Qwen2-VL, prompts and a reference forward."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from PIL import Image

from vlrollout.testing.tiny_model import tiny_qwen2vl


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # The machine's 2 cores are shared; OpenMP spinning on both makes the tiny model ~30x slower.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny():
    """``(model, processor)``; do not mutate the model (build your own with ``tiny_qwen2vl``)."""
    return tiny_qwen2vl(seed=0)


def make_image(seed: int, width: int = 100, height: int = 90) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def to_base64(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture
def vision_prompt(tiny):
    """Build a prepared vision prompt the way a preprocessor does (one processor call)."""
    _, processor = tiny

    def build(seed: int = 0, question: str = "What is in the image?", n_images: int = 1, **size):
        images = [make_image(seed + i, **size) for i in range(n_images)]
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": question}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        out = processor(text=[text], images=images, return_tensors="pt")
        return {
            "input_ids": out["input_ids"][0].tolist(),
            "mm": {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]},
            "mm_token_type_ids": out["mm_token_type_ids"][0].tolist(),
            "image_data": [to_base64(im) for im in images],
        }

    return build


@pytest.fixture
def text_prompt(tiny):
    _, processor = tiny

    def build(question: str = "How many shapes are there?"):
        text = processor.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        return processor.tokenizer(text)["input_ids"]

    return build


def teacher_forced_logprobs(model, prompt_ids, completion, temperature, mm=None, mm_types=None):
    """The trainer's recompute: one forward over prompt + completion, AReaL's gather_logprobs.

    ``areal.utils.functional.vocab_parallel.gather_logprobs`` is what ``FSDPEngine`` calls; it is
    wrapped in ``torch.compile``, which is disabled here (no compiler needed, same math).
    """
    from areal.utils.functional.vocab_parallel import gather_logprobs

    ids = torch.tensor([list(prompt_ids) + list(completion)])
    kwargs = {}
    if mm:
        types = list(mm_types) + [0] * len(completion)
        kwargs = dict(mm, mm_token_type_ids=torch.tensor([types]))
    model.model.rope_deltas = None  # transformers caches it on the module between calls
    with torch.no_grad():
        logits = model(input_ids=ids, **kwargs).logits[0]
    labels = torch.roll(ids[0], shifts=-1)
    with torch._dynamo.config.patch(disable=True):
        logprobs = gather_logprobs(logits, labels, temperature=temperature)
    return logprobs[len(prompt_ids) - 1 : -1]


class LogitBias:
    """Add a bias to the model's output logits (a forward hook on ``lm_head``)."""

    def __init__(self, model, bias: dict[int, float]):
        self.vector = torch.zeros(model.lm_head.out_features)
        for token, value in bias.items():
            self.vector[token] = value
        self.handle = model.lm_head.register_forward_hook(lambda m, i, out: out + self.vector)

    def remove(self):
        self.handle.remove()


@pytest.fixture
def teacher_forced():
    return teacher_forced_logprobs


@pytest.fixture
def logit_bias():
    """``logit_bias(model, {token: value})``; the hooks are removed after the test."""
    made: list[LogitBias] = []

    def add(model, bias):
        made.append(LogitBias(model, bias))
        return made[-1]

    yield add
    for b in made:
        b.remove()
