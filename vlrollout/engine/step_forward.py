"""The forward of a decode step: the model's text decoder and LM head, called directly.

A decode step feeds one text token per row with explicit positions and a prepared mask. For a
vision-language model the outer forward (``Qwen2VLForConditionalGeneration`` ->
``Qwen2VLModel``) only hands those to the text decoder, after checks for images that a decode
step never has, and then applies the LM head; each level also builds an output dataclass.
:class:`DirectStep` calls the decoder and the head itself, and hands an SDPA model's prepared
4-D decode mask over as it is, which transformers' mask builders return unchanged, so the
decoder builds no mask either. ``bench/bench_engine.py``
measures the engine's time inside these calls against ``model.generate``.

The direct path is used only where it gives bit-identical logits to the model's own forward on
a probe of two one-token steps over two rows, run once on the worker thread; a model whose outer
forward does more (soft-capping or scaling logits, extra inputs, a decoder that builds its own
masks) keeps :class:`FullStep`.

With ``compile=True`` (``LocalInferenceEngine(compile_decode=True)``, ``vlrollout serve
--compile``) the step's decoder (or, without a separate one, the whole model) goes through
``torch.compile(dynamic=True)``, as SGLang's ``--enable-torch-compile`` does for its decode
batches: on a CPU most of a small model's decode step is per-operator overhead, which inductor's
fused kernels remove. Fused kernels round differently, so the compiled step is taken where its
log-probabilities on the probe are within :data:`COMPILED_LOGPROB_TOLERANCE` of the model's own
and it picks the same greedy tokens; the probe compiles both graphs the engine needs (several
rows and one row; sizes of 1 are specialised) when the engine is built, on the thread that
builds it (tens of seconds on a CPU), so no decode step compiles. Weight updates copy into the
same parameters and need no recompilation; moving the model to another device recompiles once
(on the worker thread). If compiling fails (no C++ compiler, an unsupported operator) the
engine warns and decodes uncompiled.
"""

from __future__ import annotations

from typing import Any

import torch

from vlrollout.compat.torch import maybe_mark_dynamic
from vlrollout.engine.batch import additive_mask
from vlrollout.logs import get_logger

logger = get_logger(__name__)

# Largest |difference| of a compiled step's log-probabilities from the model's own on the probe:
# the bar for remote vs teacher-forced logprobs in float32; wider for half precision.
COMPILED_LOGPROB_TOLERANCE = 1e-4
_HALF_PRECISION_TOLERANCE = 5e-2


class FullStep:
    """A decode step through the model's own forward.

    ``step(ids, mask, positions, cache) -> (logits [rows, vocab], cache)``, with ``mask`` the
    2-D decode mask or the prepared ``[rows, 1, 1, columns]`` additive SDPA mask.
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's queries (its input embeddings')."""
        return self.model.get_input_embeddings().weight.dtype

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
    ``[rows, 1, 1, columns]`` additive SDPA mask, which transformers' mask builders return as
    given (a decoder that builds its masks itself, as Qwen3-VL's does, takes it too)."""

    def __init__(self, decoder: torch.nn.Module, head: torch.nn.Module, prepared_mask: bool):
        self.decoder, self.head, self.prepared_mask = decoder, head, prepared_mask

    def __call__(self, ids, mask, positions, cache) -> tuple[torch.Tensor, Any]:
        out = self.decoder(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        # The same [rows, 1, hidden] operand as the model's own head call: the same kernel.
        return self.head(out.last_hidden_state[:, -1:])[:, -1], out.past_key_values


class CompiledStep:
    """A :class:`DirectStep` or :class:`FullStep` over a ``torch.compile``d module, fed fresh
    row-major copies of its small inputs: one memory layout, so one compiled graph serves every
    step (the decode mask is otherwise a view into a buffer with spare columns, and a view's
    strides are guarded). ``marking``: mark rows and columns dynamic (set while probing)."""

    def __init__(self, inner: FullStep | DirectStep):
        self.inner = inner
        self.marking = False

    def __call__(self, ids, mask, positions, cache) -> tuple[torch.Tensor, Any]:
        ids, mask, positions = (
            t.clone(memory_format=torch.contiguous_format) for t in (ids, mask, positions)
        )
        if self.marking:
            _mark_dynamic(ids, mask, positions, cache)
        return self.inner(ids, mask, positions, cache)


def choose_step(
    model: torch.nn.Module,
    device: torch.device,
    mrope: bool,
    prepared_mask: bool,
    compile: bool = False,
) -> FullStep | DirectStep | CompiledStep:
    """The step the engine decodes with: with ``compile``, a compiled step if it passes its
    probe (see the module docstring); else a :class:`DirectStep` if it matches the model's
    forward bit for bit on a probe; else a :class:`FullStep`.

    The probe: two rows, two one-token steps (the second reads the cache of the first), through
    each path with its own cache, masks and positions built as the decode batch builds them.
    """
    full = FullStep(model)
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers decoder model
        decoder = head = None
    separate = decoder is not None and head is not None and decoder is not model
    if compile:
        compiled = _compiled(model, decoder, head, device, mrope, prepared_mask, separate)
        if compiled is not None:
            return compiled
    if not separate:
        return full
    direct = DirectStep(decoder, head, prepared_mask)
    try:
        logits = _probe(full, direct, device, mrope, prepared_mask, rows=2, warm=0)
    except Exception as e:  # a decoder that cannot be driven this way
        logger.info(
            "Decode steps use %s's full forward: its decoder cannot be driven alone (%s: %s).",
            type(model).__name__,
            type(e).__name__,
            e,
        )
        return full
    if all(torch.equal(a, b) for a, b in logits):
        return direct
    logger.info(
        "Decode steps use %s's full forward: its logits differ from its decoder + LM head.",
        type(model).__name__,
    )
    return full


def _compiled(
    model: torch.nn.Module,
    decoder: torch.nn.Module | None,
    head: torch.nn.Module | None,
    device: torch.device,
    mrope: bool,
    prepared_mask: bool,
    separate: bool,
) -> CompiledStep | None:
    """The compiled step if it compiles and passes its probe (one row and three), else
    ``None`` after a warning."""
    full = FullStep(model)
    step = CompiledStep(
        DirectStep(torch.compile(decoder, dynamic=True), head, prepared_mask)
        if separate
        else FullStep(torch.compile(model, dynamic=True))
    )
    half = next(model.parameters()).dtype.itemsize < 4
    tolerance = _HALF_PRECISION_TOLERANCE if half else COMPILED_LOGPROB_TOLERANCE
    step.marking = True
    try:
        pairs = [
            pair
            for rows in (3, 1)
            for pair in _probe(full, step, device, mrope, prepared_mask, rows=rows, warm=2)
        ]
    except Exception as e:  # no C++ compiler, an operator inductor cannot lower, ...
        logger.warning(
            "Decode steps are not compiled: torch.compile failed on %s (%s: %s).",
            type(model).__name__,
            type(e).__name__,
            str(e).splitlines()[0] if str(e) else "",
        )
        return None
    finally:
        step.marking = False
    worst = max(
        float((a.float().log_softmax(-1) - b.float().log_softmax(-1)).abs().max()) for a, b in pairs
    )
    same_tokens = all(torch.equal(a.argmax(-1), b.argmax(-1)) for a, b in pairs)
    if worst <= tolerance and same_tokens:
        logger.info("Decode steps are compiled (logprobs within %.1e on the probe).", worst)
        return step
    logger.warning(
        "Decode steps are not compiled: the compiled %s's logprobs differ from its own by "
        "%.2e (tolerance %.0e)%s.",
        type(model).__name__,
        worst,
        tolerance,
        "" if same_tokens else " and pick other greedy tokens",
    )
    return None


@torch.inference_mode()
def _probe(
    reference: FullStep,
    candidate: FullStep | DirectStep | CompiledStep,
    device: torch.device,
    mrope: bool,
    prepared_mask: bool,
    rows: int,
    warm: int,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(reference logits, candidate logits)`` of two one-token steps over ``rows`` rows, each
    path with its own cache. The first ``warm`` steps go through ``reference`` on both caches:
    a compiled candidate (its inputs marked dynamic in rows and columns) then compiles one graph
    for any number of rows above 1 and any length (a size of 1 would be specialised, hence at
    least two cached columns), and with ``rows=1`` the other graph it needs."""
    caches: dict[Any, Any] = {"reference": None, "candidate": None}
    pairs = []
    for step in range(warm + 2):
        mask = torch.ones(rows, step + 1, dtype=torch.bool, device=device)
        if prepared_mask:  # as MaskBuffer.for_sdpa hands it over
            mask = additive_mask(mask, reference.dtype)[:, None, None, :]
        positions = torch.full((rows, 1), step, device=device)
        if mrope:
            positions = positions.view(1, rows, 1).expand(3, rows, 1)
        ids = (torch.arange(rows, device=device) + 1 + step).view(rows, 1)
        out = {}
        for name, path in (("reference", reference), ("candidate", candidate)):
            path = reference if step < warm else path
            out[name], caches[name] = path(ids, mask, positions, caches[name])
        if step >= warm:
            pairs.append((out["reference"], out["candidate"]))
    return pairs


def _mark_dynamic(ids, mask, positions, cache) -> None:
    """Mark the row and column dimensions of a decode step's inputs dynamic for compiling."""
    mark = maybe_mark_dynamic
    mark(ids, 0)
    mark(mask, 0)
    mark(mask, mask.dim() - 1)
    mark(positions, positions.dim() - 2)
    for layer in getattr(cache, "layers", []):
        for t in (layer.keys, layer.values):
            mark(t, 0)
            mark(t, 2)
