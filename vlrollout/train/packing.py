"""Keep packed sequences apart in AReaL's trainer when flash-attn is absent.

AReaL 1.0's ``FSDPEngine._prepare_mb_list`` packs several sequences into one row and passes
``attention_mask={"full_attention": None, ...}``: flash-attn's varlen kernels separate the sequences by ``cu_seqlens``. With
``sdpa`` or ``eager`` (the CPU) that mask means one causal mask over the whole row, so later
sequences attend to earlier ones: trainer logprobs off by up to 14 nats, silently.

transformers separates packed sequences itself when there is no mask and the *text* positions
restart at 0 for each sequence (``masking_utils.find_packed_sequence_indices``). Qwen-VL models
take those text positions as a fourth row in front of their 3-D (t, h, w) positions
(``modeling_qwen2_vl.py``: ``position_ids.shape[0] == 4``). :func:`separate_packed_sequences`
does exactly that to AReaL's prepared micro-batches, and :func:`install` wraps one engine's
``_prepare_mb_list`` with it: nothing of AReaL is copied or forked.

Positions alone cannot separate sequences for a model with linear-attention or convolution
layers (Qwen3.5's Gated DeltaNet, ``modeling_qwen3_5.py``; LFM2's short convolutions): its convolution and recurrent state run along the whole
row (``seq_idx=None``, ``initial_state=None``), whatever the mask, so a packed sequence starts
from the state its predecessor left (0.017 nats off on the tiny Qwen3.5). For such a model the
wrapper asks AReaL for one sequence per micro-batch (:func:`linear_attention_layers`); trailing
padding after the sequence cannot reach it, the state running forward only.

AReaL computes 3-D positions only for the model types its ``is_qwen_vl_model`` knows (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL); any other family with M-RoPE (``vlrollout.families``: Qwen3.5) gets
``0..L-1``, which the model spreads over all three axes, so image tokens sit at text positions
(0.36 nats off on the tiny Qwen3.5). :func:`mrope_positions` gives such a micro-batch the model's
own ``get_rope_index``, one packed sequence at a time.

Videos: AReaL 1.0.4 forwards only ``pixel_values``, ``image_grid_thw`` and ``video_grid_thw`` of
each sequence's ``multi_modal_input`` to the model, so the frames (``pixel_values_videos``) never
reach it and its video placeholders are read as text (:func:`forward_inputs` passes every
tensor). Its 3-D positions leave out Qwen2.5-VL's ``second_per_grid_ts`` (the frames' spacing in
M-RoPE time), recomputed here per sequence where a batch has it, and raise on Qwen3-VL's video
grids unless they come in the per-run form of :func:`vlrollout.families.rope_grids`
(:func:`sequence_inputs`). Videos that no forward can take together (LLaVA-OneVision clips of
other frame counts, :func:`ragged_videos`) run one sequence per micro-batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from areal.api.cli_args import MicroBatchSpec
from areal.engine.core.model import is_qwen_vl_model

from vlrollout.compat.areal import wrap_prepare_mb_list
from vlrollout.compat.transformers import rope_index
from vlrollout.families import FAMILIES, POSITION_KEYS, VIDEO_INPUT_KEYS, rope_grids
from vlrollout.train.cpu import has_flash_attn


def text_positions(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """Positions ``0..n-1`` restarting at every packed sequence; trailing padding counts as one
    more sequence.

    Args:
        cu_seqlens: ``[n_seqs + 1]`` int offsets of the packed sequences.
        length: Tokens in the row (``>= cu_seqlens[-1]``).

    Returns:
        ``[length]`` int64.

    >>> text_positions(torch.tensor([0, 2, 5]), 6).tolist()
    [0, 1, 0, 1, 2, 0]
    """
    bounds = [int(b) for b in cu_seqlens.tolist()]
    if bounds[-1] < length:
        bounds.append(length)
    pos = torch.empty(length, dtype=torch.long)
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        pos[start:end] = torch.arange(end - start)
    return pos


def separate_packed_sequences(mb: dict[str, Any]) -> None:
    """Rewrite one prepared micro-batch (in place) so sdpa/eager keep its sequences apart.

    Drops the attention mask and gives the text positions per sequence: Qwen-VL's
    ``[3, 1, L]`` positions become ``[4, 1, L]`` (text row first); 1-D ``[1, L]`` positions are
    replaced by the per-sequence ones.
    """
    length = mb["input_ids"].shape[-1]
    text = text_positions(mb["cu_seqlens"].cpu(), length).to(mb["input_ids"].device)
    pos = mb.get("position_ids")
    if pos is not None and pos.ndim == 3 and pos.shape[0] == 3:
        mb["position_ids"] = torch.cat([text.view(1, 1, -1).to(pos.dtype), pos], dim=0)
    elif pos is None or pos.ndim == 2:
        mb["position_ids"] = text.view(1, -1)
    else:
        raise ValueError(
            f"unexpected position_ids shape {tuple(pos.shape)} in a packed micro-batch "
            f"(expected [3, 1, L] or [1, L])"
        )
    mb["attention_mask"] = None


def _runs(types: torch.Tensor, value: int) -> int:
    """Contiguous runs of ``value`` in a 1-D tensor (one per image or video)."""
    hit = (types == value).to(torch.int8)
    return int((torch.diff(hit, prepend=hit.new_zeros(1)) == 1).sum())


def _grids_by_sequence(mb: dict[str, Any], bounds: list[int]) -> list[dict[str, torch.Tensor]]:
    """Each packed sequence's image and video grid rows, cut from the micro-batch's in order:
    one row per run of image or video tokens in ``mm_token_type_ids``."""
    types = mb["mm_token_type_ids"]
    grids = {
        1: ("image_grid_thw", mb.get("image_grid_thw")),
        2: ("video_grid_thw", mb.get("video_grid_thw")),
    }
    used = {1: 0, 2: 0}
    out = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        seq: dict[str, torch.Tensor] = {}
        for kind, (key, grid) in grids.items():
            n = _runs(types[0, start:end], kind)
            if n and (grid is None or used[kind] + n > len(grid)):
                raise ValueError(
                    f"a packed sequence has {n} runs of modality {kind} tokens but only "
                    f"{0 if grid is None else len(grid) - used[kind]} grid rows are left"
                )
            if n:
                seq[key] = grid[used[kind] : used[kind] + n]
            used[kind] += n
        out.append(seq)
    return out


def mrope_positions(
    model: Any, mb: dict[str, Any], inputs: Sequence[Mapping[str, torch.Tensor]] | None = None
) -> torch.Tensor:
    """``[3, 1, L]`` 3-D positions of a packed micro-batch, from the model's own
    ``get_rope_index`` over each sequence alone; trailing padding gets ``0..n-1``.

    Args:
        model: The inner model (``...ForConditionalGeneration.model``).
        mb: The packed micro-batch (``input_ids``, ``mm_token_type_ids``, ``cu_seqlens``).
        inputs: Each packed sequence's own ``multi_modal_input``, in packing order (what
            ``get_rope_index`` reads of it: grids, Qwen2.5-VL's ``second_per_grid_ts``). Without
            it the image and video grids of ``mb`` are assigned to sequences in order, one row
            per run of image or video tokens.
    """
    ids, types = mb["input_ids"], mb["mm_token_type_ids"]
    bounds = [int(b) for b in mb["cu_seqlens"].tolist()]
    if inputs is None:
        inputs = _grids_by_sequence(mb, bounds)
    pos = text_positions(mb["cu_seqlens"].cpu(), ids.shape[-1]).to(ids.device)
    pos = pos.view(1, 1, -1).repeat(3, 1, 1)
    for start, end, seq in zip(bounds[:-1], bounds[1:], inputs, strict=False):
        seq_types = types[:, start:end]
        grids = rope_grids({k: v for k, v in seq.items() if k in POSITION_KEYS}, seq_types)
        seq_pos, _ = rope_index(
            model,
            ids[:, start:end],
            attention_mask=torch.ones_like(ids[:, start:end]),
            mm_token_type_ids=seq_types,
            **grids,
        )
        pos[:, :, start:end] = seq_pos.to(pos.dtype)
    return pos


def sequence_inputs(input_: Mapping[str, Any]) -> list[dict[str, torch.Tensor]] | None:
    """Each sequence's ``multi_modal_input`` of a padded batch, its grids in the form
    ``get_rope_index`` reads (:func:`vlrollout.families.rope_grids`, from the sequence's own
    ``mm_token_type_ids``); ``None`` for a batch without images or videos."""
    mm = input_.get("multi_modal_input")
    if not mm or not any(mm):
        return None
    types = input_.get("mm_token_type_ids")
    if types is None:
        return [dict(d) for d in mm]
    mask = input_["attention_mask"].bool()
    return [rope_grids(d, types[i][mask[i]].unsqueeze(0)) if d else {} for i, d in enumerate(mm)]


def ragged_videos(inputs: Sequence[Mapping[str, torch.Tensor]] | None) -> bool:
    """Whether the sequences' video tensors differ past their first dimension, so no forward
    can take them together: LLaVA-OneVision's ``[videos, frames, C, H, W]`` with other frame
    counts (padding would add frames the model encodes; each video also ends in one newline
    token, so frames cannot pass as videos of their own)."""
    for key in VIDEO_INPUT_KEYS:
        shapes = {tuple(seq[key].shape[1:]) for seq in inputs or () if key in seq}
        if len(shapes) > 1:
            return True
    return False


def sequences_of(mb_list: Any) -> list[list[int]]:
    """For each micro-batch of AReaL's ``MicroBatchList``, the batch rows packed into it, in
    packing order (``forward_indices`` cut by each micro-batch's sequence count)."""
    order = [int(i) for i in mb_list.forward_indices]
    out, start = [], 0
    for mb in mb_list.mbs:
        n = len(mb["cu_seqlens"]) - 1
        out.append(order[start : start + n])
        start += n
    return out


def forward_inputs(padded_mb: dict[str, Any], inputs: Sequence[Mapping[str, torch.Tensor]]) -> None:
    """Put every tensor of the packed sequences' ``multi_modal_input`` into the forward's
    micro-batch (in place), concatenated in packing order.

    AReaL 1.0.4 forwards only ``pixel_values``, ``image_grid_thw`` and ``video_grid_thw``: the
    frames (``pixel_values_videos``), Qwen2.5-VL's ``second_per_grid_ts`` and LLaVA-OneVision's
    ``image_sizes`` would never reach the model, which would then read its video placeholders as
    text embeddings.
    """
    keys = dict.fromkeys(k for seq in inputs for k in seq)
    for key in keys:
        padded_mb[key] = torch.cat([torch.as_tensor(seq[key]) for seq in inputs if key in seq])


STATE_LAYER_TYPES = frozenset({"linear_attention", "conv"})
"""``layer_types`` entries whose state runs along the whole row whatever the mask: Qwen3.5's
linear attention, LFM2's short convolutions (``modeling_lfm2.py``)."""


def linear_attention_layers(hf_config: Any) -> int:
    """How many decoder layers of a model config carry state along the row (``layer_types`` in
    :data:`STATE_LAYER_TYPES`).

    A model with any cannot be packed: see the module docstring.

    >>> from transformers import Qwen2Config
    >>> linear_attention_layers(Qwen2Config())
    0
    """
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return sum(t in STATE_LAYER_TYPES for t in getattr(text, "layer_types", None) or ())


def _one_sequence_per_micro_batch(
    engine: Any, original: Any, input_: dict[str, Any], ungroup: bool = False
) -> Any:
    """``original(input_)`` with AReaL's micro-batch spec asking for one micro-batch per
    sequence (at least as many micro-batches as sequences, every sequence fitting in one).
    ``ungroup`` sets the spec's granularity to 1 for the call instead of refusing another."""
    spec = engine.config.mb_spec
    n_seqs = input_["attention_mask"].shape[0]
    if spec.granularity != 1 and not ungroup:
        raise ValueError(
            f"{engine.model_config.model_type} has linear-attention layers and must run one "
            f"sequence per micro-batch, but mb_spec.granularity={spec.granularity} keeps "
            "sequences together: set actor.mb_spec.granularity=1"
        )
    longest = int(input_["attention_mask"].sum(1).max())
    engine.config.mb_spec = MicroBatchSpec.new(
        spec,
        n_mbs=n_seqs,
        granularity=1,
        max_tokens_per_mb=max(longest, spec.max_tokens_per_mb or 0),
    )
    try:
        mb_list = original(input_)
    finally:
        engine.config.mb_spec = spec
    packed = [len(mb["cu_seqlens"]) - 1 for mb in mb_list.mbs]
    if any(n != 1 for n in packed):
        raise RuntimeError(
            f"asked AReaL for one sequence per micro-batch but got {packed} sequences per "
            "micro-batch"
        )
    return mb_list


def _fix_micro_batches(
    engine: Any, mb_list: Any, inputs: list[dict[str, torch.Tensor]] | None, fix: dict[str, bool]
) -> None:
    """Give each padded micro-batch (the ones that reach the model) its sequences' images and
    videos, its 3-D positions where AReaL's are not the model's, and per-sequence attention."""
    rows = sequences_of(mb_list) if inputs is not None else [None] * len(mb_list.padded_mbs)
    for mb, seqs in zip(mb_list.padded_mbs, rows, strict=True):
        mine = None if seqs is None else [inputs[i] for i in seqs]
        if mine is not None:
            forward_inputs(mb, mine)
        # AReaL's own 3-D positions leave out Qwen2.5-VL's second_per_grid_ts.
        spaced = mine is not None and any("second_per_grid_ts" in seq for seq in mine)
        if fix["own_mrope"] or (spaced and "mm_token_type_ids" in mb):
            mb["position_ids"] = mrope_positions(engine.model.model, mb, mine)
        if fix["separate"]:
            separate_packed_sequences(mb)


def install(engine: Any) -> bool:
    """Wrap ``engine._prepare_mb_list`` of a vision-language model, or of any model whose packed
    sequences flash-attn does not keep apart.

    Returns whether the wrapper was installed (idempotent). Tree training builds its own
    attention and is left alone. With flash-attn too, a model with linear-attention layers gets
    one sequence per micro-batch (the varlen kernels do not reach those layers), an M-RoPE
    model AReaL does not know its 3-D positions (module docstring), and every model its
    sequences' video tensors (:func:`forward_inputs`) and Qwen2.5-VL's frame spacing in its
    positions.
    """
    if getattr(engine, "_vlrollout_packing_fix", False):
        return True
    model_type = engine.model_config.model_type
    unpackable = linear_attention_layers(engine.model_config) > 0
    family = FAMILIES.get(model_type)
    own_mrope = family is not None and family.positions == "mrope"
    own_mrope = own_mrope and not is_qwen_vl_model(model_type)
    fast = engine.config.attn_impl.startswith("flash") and has_flash_attn()
    fix = {"own_mrope": own_mrope, "separate": not fast or unpackable or own_mrope}
    if not fix["separate"] and not hasattr(engine.model_config, "vision_config"):
        return False

    def keeping_sequences_apart(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def prepare(input_: dict[str, Any]):
            if getattr(engine, "enable_tree_training", False):
                return original(input_)
            inputs = sequence_inputs(input_)
            if inputs is not None:  # AReaL computes Qwen-VL positions from these grids
                input_ = {**input_, "multi_modal_input": inputs}
            if unpackable or ragged_videos(inputs):
                mb_list = _one_sequence_per_micro_batch(
                    engine, original, input_, ungroup=not unpackable
                )
            else:
                mb_list = original(input_)
            _fix_micro_batches(engine, mb_list, inputs, fix)
            return mb_list

        return prepare

    wrap_prepare_mb_list(engine, keeping_sequences_apart)
    engine._vlrollout_packing_fix = True
    return True
