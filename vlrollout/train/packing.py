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

Positions alone cannot separate sequences for a model with linear-attention layers (Qwen3.5's
Gated DeltaNet, ``modeling_qwen3_5.py``): its convolution and recurrent state run along the whole
row (``seq_idx=None``, ``initial_state=None``), whatever the mask, so a packed sequence starts
from the state its predecessor left (0.017 nats off on the tiny Qwen3.5). For such a model the
wrapper asks AReaL for one sequence per micro-batch (:func:`linear_attention_layers`); trailing
padding after the sequence cannot reach it, the state running forward only.

AReaL computes 3-D positions only for the model types its ``is_qwen_vl_model`` knows (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL); any other family with M-RoPE (``vlrollout.families``: Qwen3.5) gets
``0..L-1``, which the model spreads over all three axes, so image tokens sit at text positions
(0.36 nats off on the tiny Qwen3.5). :func:`mrope_positions` gives such a micro-batch the model's
own ``get_rope_index``, one packed sequence at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from areal.api.cli_args import MicroBatchSpec
from areal.engine.core.model import is_qwen_vl_model

from vlrollout.compat.areal import wrap_prepare_mb_list
from vlrollout.compat.transformers import rope_index
from vlrollout.families import FAMILIES
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


def mrope_positions(model: Any, mb: dict[str, Any]) -> torch.Tensor:
    """``[3, 1, L]`` 3-D positions of a packed micro-batch, from the model's own
    ``get_rope_index`` over each sequence alone (images and videos assigned to sequences in order,
    one grid row per run of image or video tokens in ``mm_token_type_ids``); trailing padding
    gets ``0..n-1``.
    """
    ids, types = mb["input_ids"], mb["mm_token_type_ids"]
    bounds = [int(b) for b in mb["cu_seqlens"].tolist()]
    grids = {1: mb.get("image_grid_thw"), 2: mb.get("video_grid_thw")}
    used = {1: 0, 2: 0}
    pos = text_positions(mb["cu_seqlens"].cpu(), ids.shape[-1]).to(ids.device)
    pos = pos.view(1, 1, -1).repeat(3, 1, 1)
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        seq_types = types[0, start:end]
        seq_grids = {}
        for kind, grid in grids.items():
            n = _runs(seq_types, kind)
            if n and (grid is None or used[kind] + n > len(grid)):
                raise ValueError(
                    f"a packed sequence has {n} runs of modality {kind} tokens but only "
                    f"{0 if grid is None else len(grid) - used[kind]} grid rows are left"
                )
            seq_grids[kind] = grid[used[kind] : used[kind] + n] if n else None
            used[kind] += n
        seq_pos, _ = rope_index(
            model,
            ids[:, start:end],
            image_grid_thw=seq_grids[1],
            video_grid_thw=seq_grids[2],
            attention_mask=torch.ones_like(ids[:, start:end]),
            mm_token_type_ids=types[:, start:end],
        )
        pos[:, :, start:end] = seq_pos.to(pos.dtype)
    return pos


def linear_attention_layers(hf_config: Any) -> int:
    """How many decoder layers of a model config are linear attention (``layer_types``).

    A model with any cannot be packed: see the module docstring.

    >>> from transformers import Qwen2Config
    >>> linear_attention_layers(Qwen2Config())
    0
    """
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return sum(t == "linear_attention" for t in getattr(text, "layer_types", None) or ())


def _one_sequence_per_micro_batch(engine: Any, original: Any, input_: dict[str, Any]) -> Any:
    """``original(input_)`` with AReaL's micro-batch spec asking for one micro-batch per
    sequence (at least as many micro-batches as sequences, every sequence fitting in one)."""
    spec = engine.config.mb_spec
    n_seqs = input_["attention_mask"].shape[0]
    if spec.granularity != 1:
        raise ValueError(
            f"{engine.model_config.model_type} has linear-attention layers and must run one "
            f"sequence per micro-batch, but mb_spec.granularity={spec.granularity} keeps "
            "sequences together: set actor.mb_spec.granularity=1"
        )
    longest = int(input_["attention_mask"].sum(1).max())
    engine.config.mb_spec = MicroBatchSpec.new(
        spec, n_mbs=n_seqs, max_tokens_per_mb=max(longest, spec.max_tokens_per_mb or 0)
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


def install(engine: Any) -> bool:
    """Wrap ``engine._prepare_mb_list`` unless flash-attn keeps packed sequences apart already.

    Returns whether the wrapper was installed (idempotent). Tree training builds its own
    attention and is left alone. With flash-attn too, a model with linear-attention layers gets
    one sequence per micro-batch (the varlen kernels do not reach those layers) and an M-RoPE
    model AReaL does not know its 3-D positions (module docstring).
    """
    if getattr(engine, "_vlrollout_packing_fix", False):
        return True
    model_type = engine.model_config.model_type
    unpackable = linear_attention_layers(engine.model_config) > 0
    family = FAMILIES.get(model_type)
    own_mrope = family is not None and family.positions == "mrope"
    own_mrope = own_mrope and not is_qwen_vl_model(model_type)
    fast = engine.config.attn_impl.startswith("flash") and has_flash_attn()
    if fast and not unpackable and not own_mrope:
        return False

    def keeping_sequences_apart(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def prepare(input_: dict[str, Any]):
            if getattr(engine, "enable_tree_training", False):
                return original(input_)
            if unpackable:
                mb_list = _one_sequence_per_micro_batch(engine, original, input_)
            else:
                mb_list = original(input_)
            # Only the padded micro-batches reach the model.
            for mb in mb_list.padded_mbs:
                if own_mrope:
                    mb["position_ids"] = mrope_positions(engine.model.model, mb)
                separate_packed_sequences(mb)
            return mb_list

        return prepare

    wrap_prepare_mb_list(engine, keeping_sequences_apart)
    engine._vlrollout_packing_fix = True
    return True
