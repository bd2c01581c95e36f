"""The preprocessor contract: what every preprocessor returns and the protocol it implements.

A preprocessor turns one data item (chat messages + images) into a :class:`PreparedPrompt`,
which carries everything both sides of RL need: the engine's request fields (``input_ids``,
``image_data``, ``vision_msg_vllm``) and the trainer's tensors (``multi_modal_input``), built from
the same pixels by construction, plus the geometry rewards need to convert coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vlrollout.geometry import ImageGeometry

if TYPE_CHECKING:
    import torch


@dataclass
class PreparedPrompt:
    """A data item ready for the engine and the trainer.

    Attributes:
        input_ids: Prompt token ids with image placeholders already expanded by the processor.
        prompt_text: The chat-templated prompt text (before placeholder expansion).
        image_data: One base64 string per image for the engine (SGLang's ``image_data``).
        multi_modal_input: Tensors the model's forward needs for the images, e.g.
            ``pixel_values`` (float32, ``[num_patches, patch_dim]`` for Qwen2-VL) and
            ``image_grid_thw`` (int64, ``[num_images, 3]``). Empty for text-only items.
        mm_token_type_ids: Per-token modality ids (0 text, 1 image) where the processor returns
            them (transformers >= 5 for Qwen-VL families); ``None`` otherwise.
        geometry: One :class:`ImageGeometry` per image, in prompt order.
        vision_msg_vllm: OpenAI-style messages with ``data:`` URLs, which AReaL's vLLM client needs
            to send images at all; ``None`` for text-only items.
        image_token_id: The placeholder token id the processor expands, if the family has one.
        templated: The item came already chat-templated (AReaL's dataset format); vLLM then gets
            the item's ``messages_chat`` if it has one, else nothing (``vision_msg_vllm`` is None).
    """

    input_ids: list[int]
    prompt_text: str
    image_data: list[str] = field(default_factory=list)
    multi_modal_input: dict[str, torch.Tensor] = field(default_factory=dict)
    mm_token_type_ids: list[int] | None = None
    geometry: list[ImageGeometry] = field(default_factory=list)
    vision_msg_vllm: list[dict[str, Any]] | None = None
    image_token_id: int | None = None
    templated: bool = False

    @property
    def num_images(self) -> int:
        return len(self.geometry)

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    def engine_image_nbytes(self) -> int:
        """Bytes held for the engine's copy of the images (the base64 strings)."""
        return sum(len(s) for s in self.image_data)


@runtime_checkable
class Preprocessor(Protocol):
    """Turns a data item into a :class:`PreparedPrompt`.

    ``data`` is the dataset row: ``messages`` (OpenAI-style) and ``images`` (paths, bytes, base64,
    ``data:`` URLs or PIL images), plus task fields the preprocessor ignores. Implementations raise
    :class:`vlrollout.processors.errors.PreprocessError` (naming the item and the reason) for bad input.

    ``tokenizer`` and ``processor`` are what the engine's ``ModelRequest`` carries.
    """

    tokenizer: Any
    processor: Any

    def prepare(self, data: dict[str, Any]) -> PreparedPrompt: ...
