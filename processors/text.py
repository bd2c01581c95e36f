"""The text-only preprocessor: chat template → ``PreparedPrompt`` without images.

Text workflows share the vision workflows' code path; this is their preprocessor.
"""

from __future__ import annotations

from typing import Any

from areal.utils.hf_utils import apply_chat_template

from vlrollout.processors.base import PreparedPrompt
from vlrollout.processors.errors import PreprocessError


def item_label(data: dict[str, Any]) -> str:
    """How errors name a data item: its ``id``/``uid``/``query_id`` field, else ``"item"``."""
    for key in ("id", "uid", "query_id"):
        if key in data:
            return f"item {data[key]}"
    return "item"


class TextPreprocessor:
    """Applies the tokenizer's chat template to ``data["messages"]``.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        enable_thinking: Passed to the chat template (Qwen3-style thinking switch).

    >>> from vlrollout.tiny.tokenizer import build_bpe_tokenizer
    >>> p = TextPreprocessor(build_bpe_tokenizer())
    >>> p.prepare({"messages": [{"role": "user", "content": "hi"}]}).prompt_text
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    def __init__(self, tokenizer: Any, enable_thinking: bool = False) -> None:
        self.tokenizer = tokenizer
        self.processor = None
        self.enable_thinking = enable_thinking

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise PreprocessError(
                item_label(data),
                "bad_messages",
                f"'messages' must be a non-empty list of chat messages, got {type(messages).__name__}",
            )
        if data.get("images"):
            raise PreprocessError(
                item_label(data),
                "unexpected_images",
                f"the item has {len(data['images'])} image(s) but this workflow is text-only; "
                "use a vision workflow with a processor",
            )
        kwargs = {"add_generation_prompt": True, "enable_thinking": self.enable_thinking}
        text = apply_chat_template(self.tokenizer, messages, tokenize=False, **kwargs)
        input_ids = apply_chat_template(self.tokenizer, messages, tokenize=True, **kwargs)
        return PreparedPrompt(input_ids=list(input_ids), prompt_text=text)
