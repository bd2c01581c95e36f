"""Keep packed sequences apart in AReaL's trainer when flash-attn is absent.

AReaL 1.0.4's ``FSDPEngine._prepare_mb_list`` (``areal/engine/fsdp_engine.py:1792-1904``) packs
several sequences into one row and passes ``attention_mask={"full_attention": None, ...}``
(lines 1896-1901): flash-attn's varlen kernels separate the sequences by ``cu_seqlens``. With
``sdpa`` or ``eager`` (the CPU) that mask means one causal mask over the whole row, so later
sequences attend to earlier ones: trainer logprobs off by up to 14 nats, silently.

transformers separates packed sequences itself when there is no mask and the *text* positions
restart at 0 for each sequence (``masking_utils.find_packed_sequence_indices``). Qwen-VL models
take those text positions as a fourth row in front of their 3-D (t, h, w) positions
(``modeling_qwen2_vl.py``: ``position_ids.shape[0] == 4``). :func:`separate_packed_sequences`
does exactly that to AReaL's prepared micro-batches, and :func:`install` wraps one engine's
``_prepare_mb_list`` with it: nothing of AReaL is copied or forked.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


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


def install(engine: Any) -> bool:
    """Wrap ``engine._prepare_mb_list`` unless flash-attn keeps packed sequences apart already.

    Returns whether the wrapper was installed (idempotent). Tree training builds its own
    attention and is left alone.
    """
    from vlrollout.train.cpu import has_flash_attn

    if getattr(engine, "_vlrollout_packing_fix", False):
        return True
    if engine.config.attn_impl.startswith("flash") and has_flash_attn():
        return False
    original = engine._prepare_mb_list

    @functools.wraps(original)
    def prepare(input_: dict[str, Any]):
        mb_list = original(input_)
        if getattr(engine, "enable_tree_training", False):
            return mb_list
        # Only the padded micro-batches reach the model (``_prepare_mb_inputs``, line 1951).
        for mb in mb_list.padded_mbs:
            separate_packed_sequences(mb)
        return mb_list

    engine._prepare_mb_list = prepare
    engine._vlrollout_packing_fix = True
    return True
