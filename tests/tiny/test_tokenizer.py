"""The tiny tokenizer: exact round trips and short sequences for the synthetic task texts."""

from __future__ import annotations

import pytest

from vlrollout.tiny.synthetic import COLOURS, PROMPTS, SHAPES, generate_items
from vlrollout.tiny.tokenizer import QWEN2VL_SPECIAL_TOKENS, build_bpe_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_bpe_tokenizer()


def _task_texts():
    texts = [PROMPTS["count"], PROMPTS["caption"]]
    texts += [PROMPTS["ground"].format(colour=c, shape=s) for c in COLOURS for s in SHAPES]
    for item in generate_items("mix", 60, seed=3):
        texts.append(item["solution"])
        texts += item.get("captions", [])
    return texts


def test_task_texts_round_trip(tok):
    for text in _task_texts():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids, skip_special_tokens=False) == text


def test_task_vocabulary_is_one_token_per_word(tok):
    for word in [*COLOURS, *SHAPES, "shapes", "many", "Answer", "Describe", "sentence"]:
        assert len(tok(" " + word, add_special_tokens=False)["input_ids"]) == 1, word
    assert len(tok(PROMPTS["count"], add_special_tokens=False)["input_ids"]) <= 12


def test_digits_are_single_tokens_and_box_markers_special(tok):
    text = "<|box_start|>(125,250),(375,1000)<|box_end|>"
    pieces = [tok.decode([i]) for i in tok(text, add_special_tokens=False)["input_ids"]]
    assert pieces[0] == "<|box_start|>" and pieces[-1] == "<|box_end|>"
    digits = [p for p in pieces if p.isdigit()]
    assert digits == list("1252503751000")


def test_special_tokens_have_fixed_ids_and_eos_pad(tok):
    ids = tok.convert_tokens_to_ids(QWEN2VL_SPECIAL_TOKENS)
    assert ids == list(range(len(QWEN2VL_SPECIAL_TOKENS)))
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_deterministic(tok):
    again = build_bpe_tokenizer()
    assert again.get_vocab() == tok.get_vocab()
