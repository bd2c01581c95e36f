"""Tokenizer: hand-written expected tokens (PTB conventions noted per case)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlrollout.rewards.text_tokenize import tokenize, whitespace_tokenize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # lower-cased, final period dropped (the COCO toolkit removes "." tokens)
        ("A dog.", ["a", "dog"]),
        # PTB splits clitics: man's -> man 's; don't -> do n't
        ("The man's dog doesn't bark", ["the", "man", "'s", "dog", "does", "n't", "bark"]),
        # curly apostrophe normalised to ASCII before clitic splitting
        ("it\u2019s red", ["it", "'s", "red"]),
        # hyphenated words and decimals stay one token, as in PTB
        ("a black-and-white 3.5 m pole", ["a", "black-and-white", "3.5", "m", "pole"]),
        # punctuation-only tokens and symbols vanish; "--" is removed by the toolkit too
        ("wait -- what?!", ["wait", "what"]),
        # NFKC folds the full-width letters to ASCII
        ("\uff21\uff22 cd", ["ab", "cd"]),
        ("", []),
    ],
)
def test_tokenize_examples(text, expected):
    assert tokenize(text) == expected


def test_whitespace_tokenize_is_split():
    assert whitespace_tokenize("  a b\tc\n") == ["a", "b", "c"]


@given(st.text(max_size=200))
def test_tokenize_is_deterministic_idempotent_and_lowercase(text):
    tokens = tokenize(text)
    assert tokens == tokenize(text)
    # Tokenizing the joined tokens gives the same tokens: the output is a fixed point.
    assert tokenize(" ".join(tokens)) == tokens
    assert all(t and not any(c.isspace() for c in t) for t in tokens)
