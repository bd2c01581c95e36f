"""The processor copy that merges (and validates) its call arguments once gives exactly the
plain processor's outputs, on every call, for every offline family, and never touches the
caller's processor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.processors.merge_kwargs_cache import with_merged_kwargs_cache
from vlrollout.testing.offline_processors import OFFLINE_BUILDERS


def _image(seed: int, size=(90, 70)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def _prompt(processor) -> str:
    content = [{"type": "image"}, {"type": "text", "text": "What is this?"}]
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert isinstance(b[key], torch.Tensor), key
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("family", sorted(OFFLINE_BUILDERS))
def test_every_call_gives_the_plain_processors_outputs(family):
    plain = OFFLINE_BUILDERS[family]()
    fast = with_merged_kwargs_cache(plain)
    text = _prompt(plain)
    for seed in range(3):  # later calls reuse the merged arguments of the first
        images = [[_image(seed, (90 + 14 * seed, 70))]]
        want = plain(text=[text], images=images, return_tensors="pt")
        got = fast(text=[text], images=images, return_tensors="pt")
        # Processors pop return_tensors from the merged arguments: a shared dict would turn the
        # second call's outputs into lists.
        _same(dict(want), dict(got))


def test_arguments_are_merged_once_per_distinct_set_and_the_callers_processor_is_untouched(
    monkeypatch,
):
    plain = OFFLINE_BUILDERS["qwen2_5_vl"]()
    kinds = type(plain)
    calls = []
    original = kinds._merge_kwargs

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("images_kwargs"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(kinds, "_merge_kwargs", counting)
    fast = with_merged_kwargs_cache(plain)
    assert fast is not plain and "_merge_kwargs" not in vars(plain)
    assert fast.tokenizer is plain.tokenizer and fast.image_processor is plain.image_processor
    text, images = _prompt(plain), [[_image(0)]]
    for _ in range(3):
        fast(text=[text], images=images, return_tensors="pt")
    assert len(calls) == 1
    small = {"max_pixels": 56 * 56}
    out = fast(text=[text], images=images, return_tensors="pt", images_kwargs=small)
    fast(text=[text], images=images, return_tensors="pt", images_kwargs=dict(small))
    assert len(calls) == 2
    assert out["image_grid_thw"].prod() <= 4 * 4  # the new arguments took effect
    plain(text=[text], images=images, return_tensors="pt")
    assert len(calls) == 3  # the plain processor still merges on every call


def test_bad_arguments_are_still_rejected():
    fast = with_merged_kwargs_cache(OFFLINE_BUILDERS["qwen2_5_vl"]())
    text, images = _prompt(fast), [[_image(0)]]
    for _ in range(2):  # a failed merge is not remembered
        with pytest.raises(Exception, match="do_resize"):  # huggingface_hub's validation error
            fast(text=[text], images=images, return_tensors="pt", images_kwargs={"do_resize": "x"})


def test_a_bare_tokenizer_is_returned_as_is():
    tokenizer = OFFLINE_BUILDERS["qwen2_5_vl"]().tokenizer
    assert with_merged_kwargs_cache(tokenizer) is tokenizer


def test_the_preprocessor_merges_its_arguments_once(monkeypatch):
    plain = OFFLINE_BUILDERS["qwen2_5_vl"]()
    kinds, calls = type(plain), []
    original = kinds._merge_kwargs
    monkeypatch.setattr(
        kinds, "_merge_kwargs", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    pre = AutoProcessorPreprocessor(plain)
    assert pre.processor is plain  # the caller's object, for parity checks and plug-ins
    for seed in range(3):
        prepared = pre.prepare(
            {"messages": [{"role": "user", "content": "<image>What?"}], "images": [_image(seed)]}
        )
        assert isinstance(prepared.multi_modal_input["pixel_values"], torch.Tensor)
    assert len(calls) == 1


class _Echo:
    """A processor whose merged arguments show the tokenizer settings they were merged with."""

    def _merge_kwargs(self, kinds, tokenizer_init_kwargs=None, **kwargs):
        return {"text_kwargs": {**(tokenizer_init_kwargs or {}), **kwargs}}


def test_a_new_settings_dict_at_a_freed_ones_address_is_merged_anew():
    """The memo must not key on ``id()`` of the tokenizer's settings: once a dict is freed, a new
    one with other contents can get its address."""
    fast = with_merged_kwargs_cache(_Echo())
    first = {"padding_side": "left"}
    assert fast._merge_kwargs(dict, tokenizer_init_kwargs=first)["text_kwargs"] == first
    freed = id(first)
    del first
    kept = []  # dicts that did not land on the freed address stay alive, so it stays free
    for _ in range(1000):
        second = {"padding_side": "right"}
        if id(second) == freed:
            break
        kept.append(second)
    else:
        pytest.skip("the interpreter did not reuse the freed address")
    assert fast._merge_kwargs(dict, tokenizer_init_kwargs=second)["text_kwargs"] == second


def test_settings_changed_in_place_are_merged_anew():
    fast = with_merged_kwargs_cache(_Echo())
    settings = {"padding_side": "left"}
    fast._merge_kwargs(dict, tokenizer_init_kwargs=settings)
    settings["padding_side"] = "right"
    assert fast._merge_kwargs(dict, tokenizer_init_kwargs=settings)["text_kwargs"] == settings
