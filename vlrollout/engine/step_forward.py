"""The forward of a decode step: the model's text decoder and LM head, called directly.

A decode step feeds one text token per row with explicit positions and a prepared mask. For a
vision-language model the outer forward (``Qwen2VLForConditionalGeneration`` ->
``Qwen2VLModel``) only hands those to the text decoder, after checks for images that a decode
step never has, and then applies the LM head; each level also builds an output dataclass.
:class:`DirectStep` calls the decoder and the head itself, and hands an SDPA model's prepared
decode mask over as the per-attention-type mapping that transformers' decoders take as-is (the
form ``generate`` prepares), so the decoder builds no mask either. ``bench/bench_engine.py``
measures the engine's time inside these calls against ``model.generate``.

The direct path is used only where it gives bit-identical logits to the model's own forward on
a probe of two one-token steps over two rows, run once on the worker thread; a model whose outer
forward does more (soft-capping or scaling logits, extra inputs, a decoder that builds its own
masks) keeps :class:`FullStep`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)


class FullStep:
    """A decode step through the model's own forward.

    ``step(ids, mask, positions, cache) -> (logits [rows, vocab], cache)``, with ``mask`` the
    2-D decode mask or the prepared ``[rows, 1, 1, columns]`` SDPA mask.
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __call__(self, ids, mask, positions, cache) -> tuple[torch.Tensor, Any]:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits[:, -1], out.past_key_values


class DirectStep:
    """The same step through ``decoder`` and ``head``; with ``prepared_mask`` the mask is the
    ``[rows, 1, 1, columns]`` SDPA mask, handed over as ``{"full_attention": mask}``."""

    def __init__(self, decoder: torch.nn.Module, head: torch.nn.Module, prepared_mask: bool):
        self.decoder, self.head, self.prepared_mask = decoder, head, prepared_mask

    def __call__(self, ids, mask, positions, cache) -> tuple[torch.Tensor, Any]:
        out = self.decoder(
            input_ids=ids,
            attention_mask={"full_attention": mask} if self.prepared_mask else mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        # The same [rows, 1, hidden] operand as the model's own head call: the same kernel.
        return self.head(out.last_hidden_state[:, -1:])[:, -1], out.past_key_values


@torch.inference_mode()
def choose_step(
    model: torch.nn.Module, device: torch.device, mrope: bool, prepared_mask: bool
) -> FullStep | DirectStep:
    """A :class:`DirectStep` if it matches the model's forward bit for bit on a probe, else a
    :class:`FullStep`.

    The probe: two rows, two one-token steps (the second reads the cache of the first), through
    each path with its own cache, masks and positions built as the decode batch builds them.
    """
    full = FullStep(model)
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers decoder model
        return full
    if decoder is None or head is None or decoder is model:
        return full
    direct = DirectStep(decoder, head, prepared_mask)
    caches: dict[Any, Any] = {full: None, direct: None}
    logits: dict[Any, list[torch.Tensor]] = {full: [], direct: []}
    try:
        for step in range(2):
            mask = torch.ones(2, step + 1, dtype=torch.bool, device=device)
            if prepared_mask:
                mask = mask[:, None, None, :]
            positions = torch.full((2, 1), step, device=device)
            if mrope:
                positions = positions.view(1, 2, 1).expand(3, 2, 1)
            ids = torch.tensor([[1 + step], [2 + step]], device=device)
            for path in (full, direct):
                out, caches[path] = path(ids, mask, positions, caches[path])
                logits[path].append(out)
    except Exception as e:  # a decoder that cannot be driven this way
        logger.info("Decode steps use %s's full forward (%s).", type(model).__name__, e)
        return full
    if all(torch.equal(a, b) for a, b in zip(logits[full], logits[direct], strict=True)):
        return direct
    logger.info(
        "Decode steps use %s's full forward: its logits differ from its decoder + LM head.",
        type(model).__name__,
    )
    return full
