"""Where the chat template ends an assistant turn: what later turns (feedback, tool results)
must follow, and what a turn cut off by the token limit is closed with."""

from __future__ import annotations

from typing import Any


def _ids(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = False):
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return tokenizer.encode(text, add_special_tokens=False)


def turn_end_token_id(tokenizer: Any) -> int:
    """The token the chat template writes to end an assistant turn.

    The first special token the template writes after an assistant message's text
    (``<|im_end|>`` for Qwen, ``<end_of_turn>`` for Gemma 3, ``<end_of_utterance>`` for
    Idefics3), which need not be the tokenizer's eos token; the eos token when the template ends
    turns with plain text (LLaVA-1.5's ``"ASSISTANT: ... "``), as the model then stops on eos.

    Raises:
        ValueError: the tokenizer has no eos token and the template writes no end-of-turn token.
    """
    probe = [{"role": "user", "content": "q"}]
    answer = "turn end probe"
    prompt = _ids(tokenizer, probe, add_generation_prompt=True)
    whole = _ids(tokenizer, [*probe, {"role": "assistant", "content": answer}])
    special = set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if t.special
    }
    if whole[: len(prompt)] == prompt:
        text = tokenizer.encode(answer, add_special_tokens=False)
        tail = whole[len(prompt) :]
        start = len(text) if tail[: len(text)] == text else 0
        for token in tail[start:]:
            if token in special:
                return int(token)
    if tokenizer.eos_token_id is None:
        raise ValueError(
            "the chat template writes no end-of-turn token and the tokenizer has no eos token: "
            "later turns cannot tell where a generated turn ends"
        )
    return int(tokenizer.eos_token_id)


def special_token_texts(tokenizer: Any) -> tuple[str, ...]:
    """The strings ``tokenizer`` reads as special tokens (its special tokens and the added tokens
    marked special), as the processor tokenises text."""
    specials = getattr(tokenizer, "all_special_tokens", None) or []
    added = (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
    texts = set(specials) | {str(t) for t in added if getattr(t, "special", False)}
    return tuple(sorted(t for t in texts if t))
