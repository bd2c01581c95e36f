"""Turn tool outcomes into observation tokens and image tensors, exactly as the chat template would.

The observation is everything between the assistant's end-of-turn token and the next generation:
for Qwen ``\\n<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n``.
Its text is derived from the chat template itself, as
:func:`vlrollout.workflows.multi_attempt.feedback_token_ids` does: render a probe conversation with
and without the tool turn and keep what follows the assistant's end-of-turn token. The processor
then tokenises that text together with the tool's images, so every ``<|image_pad|>`` is expanded to
the image's token count and the image tensors come from the same call. The tokens after a special
token do not depend on what precedes it, so the packed trajectory equals processing the whole
conversation at once; :class:`ObservationEncoder` checks this on a probe when it is built.

Tool results are wrapped as Qwen2.5's chat template renders ``role: "tool"`` messages
(Qwen/Qwen2.5-7B-Instruct ``tokenizer_config.json``): in a ``user`` turn, each result inside
``<tool_response>\\n...\\n</tool_response>``, consecutive results separated by ``\\n``. Each tool image
is announced as ``Image <k>: `` so the model can refer to it by index later.

Text the tokenizer would read as one of its special tokens (an image placeholder, a turn end) cannot
go into an observation, whether the model wrote it (a label, a tool name echoed in an error) or a
tool returned it: it would add an image the turn does not carry, or end a turn inside it. Such a
call becomes an error outcome, shown to the model as any failed call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from vlrollout.processors.auto import TEXT_KEYS, AutoProcessorPreprocessor
from vlrollout.processors.base import ImageGeometry
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.image_loading import LoadedImage, load_image
from vlrollout.processors.turns import special_token_texts, turn_end_token_id

from .base import ToolResult
from .runner import ToolOutcome

IMAGE_MARK = "<image>"
"""How images appear in :attr:`Observation.text` (the conversation text rewards see)."""

_PROBE = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def response_parts(outcomes: Sequence[ToolOutcome], first_image_index: int) -> list[dict[str, Any]]:
    """Chat-message content parts for the tool turn (text parts and ``{"type": "image"}`` parts)."""
    parts: list[dict[str, Any]] = []
    pending = ""
    k = first_image_index
    for i, outcome in enumerate(outcomes):
        pending += ("\n" if i else "") + "<tool_response>\n"
        for _ in outcome.result.images:
            parts.append({"type": "text", "text": pending + f"Image {k}: "})
            parts.append({"type": "image"})
            pending, k = "\n", k + 1
        pending += outcome.result.text + "\n</tool_response>"
    parts.append({"type": "text", "text": pending})
    return parts


SPECIAL_TEXT_ERROR = (
    "the tool's output holds text the model's tokenizer reads as a special token (an image "
    "placeholder or a turn marker), which a tool turn cannot show"
)


def parts_text(parts: Sequence[dict[str, Any]]) -> str:
    """The parts as one string, images as ``<image>``."""
    return "".join(p["text"] if p["type"] == "text" else IMAGE_MARK for p in parts)


@dataclass
class Observation:
    """One tool turn, ready for ``TrajectoryBuilder.add_observation`` and the next request.

    Attributes:
        token_ids: Observation tokens (placeholders expanded); starts with the end-of-turn token
            when the generated turn lacked it.
        multi_modal_input: The new images' tensors (``pixel_values``, ``image_grid_thw``), empty
            when the turn has no image.
        mm_token_type_ids: Per-token modality ids when the processor returns them, else ``None``.
        images: The new images as loaded (RGB).
        geometry: One :class:`ImageGeometry` per new image.
        outcomes: The outcomes shown (an image the processor rejected turns its call into an error).
        parts: The message content parts; ``text``: the same as one string with ``<image>`` marks.
        image_data: Base64 of each new image for the engine (a lossless encoding of exactly these pixels).
    """

    token_ids: list[int]
    multi_modal_input: dict[str, torch.Tensor] = field(default_factory=dict)
    mm_token_type_ids: list[int] | None = None
    images: list[LoadedImage] = field(default_factory=list)
    geometry: list[ImageGeometry] = field(default_factory=list)
    outcomes: list[ToolOutcome] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)
    image_data: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return parts_text(self.parts)

    @property
    def num_errors(self) -> int:
        return sum(not o.ok for o in self.outcomes)


class ObservationEncoder:
    """Encodes tool turns with a preprocessor's processor, resize budget and chat template.

    Args:
        preprocessor: The :class:`AutoProcessorPreprocessor` whose processor, ``processor_kwargs``
            (pixel budget), image limits and chat-template kwargs the prompt was built with.
        role: The role of the tool turn in the chat template (``"user"``, as Qwen2.5 renders tool
            results; use ``"tool"`` for templates that render that role natively).

    Raises:
        ValueError: the template renders earlier turns differently once a tool turn follows,
            or tokenises the observation differently on its own than inside the whole
            conversation.
    """

    def __init__(self, preprocessor: AutoProcessorPreprocessor, role: str = "user") -> None:
        self.pre = preprocessor
        self.processor = preprocessor.processor
        self.tokenizer = preprocessor.tokenizer
        self.role = role
        # The template's end of an assistant turn (Gemma 3's <end_of_turn>, Qwen's <|im_end|>).
        self.eos_token_id = turn_end_token_id(self.tokenizer)
        self.eos_token = self.tokenizer.convert_ids_to_tokens(self.eos_token_id)
        self.special_texts = special_token_texts(self.tokenizer)
        self._check_probe()

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        owner = self.processor if getattr(self.processor, "chat_template", None) else self.tokenizer
        text = owner.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.pre.chat_template_kwargs,
        )
        return text if isinstance(text, str) else text[0]

    def _turn_end(self, first: str) -> int:
        """Where the rendered probe's assistant turn ends: after its end-of-turn token, or, for a
        template that writes none (LLaVA-1.5), at the end of the rendered turn (the model's
        own stop token, generated, then closes the turn)."""
        end = first.rfind(self.eos_token)
        return len(first) if end < 0 else end + len(self.eos_token)

    def observation_text(self, parts: list[dict[str, Any]]) -> str:
        """Template text after the assistant's end-of-turn token, through the next generation prompt."""
        first = self._render(_PROBE, add_generation_prompt=False)
        message = {"role": self.role, "content": parts}
        both = self._render([*_PROBE, message], add_generation_prompt=True)
        end = self._turn_end(first)
        if both[:end] != first[:end]:
            raise ValueError(
                "the chat template renders earlier turns differently after a tool turn"
            )
        return both[end:]

    def _call(self, text: str, images: list[LoadedImage]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "text": [text],
            "return_tensors": "pt",
            "add_special_tokens": False,
        }
        if images:
            kwargs["images"] = [[im.image for im in images]]
            kwargs.update(self.pre.processor_kwargs)
        return dict(self.processor(**kwargs))

    def _check_probe(self) -> None:
        parts = response_parts([ToolOutcome("probe", ToolResult(text="ok 1, 2"))], 0)
        ours = self._call(self.observation_text(parts), [])["input_ids"][0].tolist()
        first = self._render(_PROBE, add_generation_prompt=False)
        end = self._turn_end(first)
        both = self._render([*_PROBE, {"role": self.role, "content": parts}], True)
        whole = self._call(both, [])["input_ids"][0].tolist()
        prefix = self._call(first[:end], [])["input_ids"][0].tolist()
        if whole[: len(prefix)] != prefix or whole[len(prefix) :] != ours:
            raise ValueError(
                "tokenising the tool turn on its own differs from tokenising the whole "
                "conversation (the tokenizer merges across the end-of-turn token); "
                "tool-turn tokens would drift from what the engine sees"
            )

    def encode(
        self, outcomes: Sequence[ToolOutcome], first_image_index: int, close_turn: bool
    ) -> Observation:
        """Tokens and tensors of the tool turn for ``outcomes``.

        Args:
            outcomes: The turn's tool outcomes, in call order.
            first_image_index: Index the first new image gets (the number of images so far).
            close_turn: Prepend the eos token (the generated turn was cut off before it).

        An image that fails to load (over the image limits) or that the processor rejects (e.g.
        Qwen's aspect-ratio limit of 200) turns its call into an error outcome instead of raising.
        """
        outcomes = [self._plain_text(o) for o in outcomes]
        loaded: list[LoadedImage] = []
        for i, outcome in enumerate(outcomes):
            try:
                loaded += [
                    self._load(im, first_image_index + len(loaded) + j)
                    for j, im in enumerate(outcome.result.images)
                ]
            except PreprocessError as e:
                outcomes[i] = ToolOutcome.failure(
                    outcome.name, f"the tool's image is unusable: {e.detail}"
                )
        parts = response_parts(outcomes, first_image_index)
        text = self.observation_text(parts)
        try:
            out = self._call(text, loaded)
        except ValueError as e:
            if not loaded:
                raise
            outcomes = [
                ToolOutcome.failure(o.name, f"the tool's image could not be processed: {e}")
                if o.result.images
                else o
                for o in outcomes
            ]
            return self.encode(outcomes, first_image_index, close_turn)
        ids = out["input_ids"][0].tolist()
        types = out.get(self.pre.adapter.mm_type_key)
        types = types[0].tolist() if isinstance(types, torch.Tensor) else None
        if close_turn:
            ids = [self.eos_token_id, *ids]
            types = [0, *types] if types is not None else None
        mm: dict[str, torch.Tensor] = {}
        geometry: list[ImageGeometry] = []
        if loaded:
            mm = {
                k: v for k, v in out.items() if k not in TEXT_KEYS and isinstance(v, torch.Tensor)
            }
            sizes = [im.original_size for im in loaded]
            geometry = self.pre.adapter.geometry(self.processor, sizes, out)
        b64 = [im.to_base64() for im in loaded]
        return Observation(ids, mm, types, loaded, geometry, outcomes, parts, b64)

    def _plain_text(self, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome``, or an error outcome when its text holds a special token's text."""
        if any(t in outcome.result.text for t in self.special_texts):
            return ToolOutcome.failure(outcome.name, SPECIAL_TEXT_ERROR)
        return outcome

    def _load(self, image: Any, index: int) -> LoadedImage:
        return load_image(
            image,
            f"tool image {index}",
            max_pixels=self.pre.max_image_pixels,
            max_bytes=self.pre.max_image_bytes,
        )


def vllm_message(observation: Observation, role: str) -> dict[str, Any]:
    """The tool turn as an OpenAI-style message with ``data:`` URLs (AReaL's vLLM client input)."""
    content: list[dict[str, Any]] = []
    images = iter(zip(observation.images, observation.image_data, strict=True))
    for part in observation.parts:
        if part["type"] == "image":
            image, b64 = next(images)
            url = f"data:{image.mime};base64,{b64}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        else:
            content.append({"type": "text", "text": part["text"]})
    return {"role": role, "content": content}
