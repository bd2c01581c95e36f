"""The packaging core: the one place AReaL trajectory dicts are built.

Every workflow (text, vision, multi-attempt, tool use) describes an episode as a prompt followed by
segments: generated turns (from ``ModelResponse``) and observations (feedback or tool tokens the
model did not generate). :class:`TrajectoryBuilder` keeps the running token sequence, which is also
the next request's ``input_ids``: engines that generate from token ids (ours, SGLang) see exactly
the tokens the trainer sees. AReaL's vLLM client sends chat messages instead
(``vision_msg_vllm``) and the server re-renders them with its own chat template, so there the
equality holds only if that template renders the conversation to the same tokens; each generated
turn is still checked to continue the exact token prefix (:meth:`TrajectoryBuilder.add_generated`).

Output (every tensor has batch dimension 1, ``L`` = total tokens):

================== ============ =====================================================
key                dtype        meaning
================== ============ =====================================================
input_ids          int64 [1,L]  prompt + every segment
loss_mask          int32 [1,L]  1 exactly on generated tokens
logprobs           float32[1,L] rollout log-probability on generated tokens, else 0
versions           int32 [1,L]  weight version per generated token, else -1
attention_mask     bool  [1,L]  all True
rewards            float32[1]   the episode's scalar reward
mm_token_type_ids  int64 [1,L]  only when the processor returned them (0 text, 1 image, 2 video)
multi_modal_input  list[dict]   one dict per sequence: the model's image and video tensors, with
                                those of every segment concatenated in order (pixel_values,
                                image_grid_thw, pixel_values_videos, video_grid_thw on dim 0, ...)
================== ============ =====================================================

AReaL's own workflows disagree on the dtype of ``input_ids`` (int32 in ``RLVRWorkflow``, int64 in
``VisionRLVRWorkflow``); we use int64 everywhere so text and vision trajectories concatenate.
"""

from __future__ import annotations

import math
import numbers
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from areal.api import ModelResponse

from vlrollout.families import VIDEO_INPUT_KEYS
from vlrollout.processors.base import PreparedPrompt

INPUT_IDS_DTYPE = torch.int64
MASK_DTYPE = torch.int32
VERSION_DTYPE = torch.int32


class PackingError(ValueError):
    """The pieces of an episode do not fit together (a bug in a workflow or an engine)."""


# -- fast list -> tensor conversion ----------------------------------------------------------
# ``torch.tensor(list)`` unboxes element by element through torch's generic sequence path: about
# 3-4x slower than filling a C ``array`` and viewing it (bench/bench_packaging.py). Both helpers
# keep ``torch.tensor``'s / ``int()``'s / ``float()``'s semantics by falling back to them for
# anything ``array`` refuses (floats among ids, strings, ints beyond int64).


def _int_array(values: Sequence[Any], what: str) -> array:
    """``values`` as a C int64 array. An element that is no whole number (``8.9``, ``"8"``) is
    refused naming ``what`` and its position: ``int()`` would truncate it."""
    try:
        return array("q", values)
    except TypeError:
        return array("q", [_whole(v, what, k) for k, v in enumerate(values)])


def _whole(value: Any, what: str, k: int) -> int:
    if isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and float(value).is_integer()
    ):
        return int(value)
    raise PackingError(f"{what} {k} is {value!r}, not a whole number")


def _float_array(values: Sequence[Any], what: str) -> array:
    """``values`` as a C double array; an element that is no real number (a string holding
    digits) is refused naming ``what`` and its position."""
    try:
        return array("d", values)
    except TypeError:
        for k, v in enumerate(values):
            if isinstance(v, (str, bytes)) or not isinstance(v, (numbers.Real, torch.Tensor)):
                raise PackingError(f"{what} {k} is {v!r}, not a number") from None
        return array("d", [float(v) for v in values])


def _from_array(buf: array, dtype: torch.dtype) -> torch.Tensor:
    """An owned 1-D tensor of ``dtype`` with ``buf``'s values (int64/float64 buffers)."""
    if len(buf) == 0:
        return torch.empty(0, dtype=dtype)
    view = torch.frombuffer(buf, dtype=torch.int64 if buf.typecode == "q" else torch.float64)
    return view.clone() if view.dtype == dtype else view.to(dtype)


def _id_tensor(values: Sequence[Any], dtype: torch.dtype) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` for token ids, without the slow generic path."""
    try:
        buf = array("q", values)
    except (TypeError, OverflowError):
        return torch.tensor(values, dtype=dtype)
    return _from_array(buf, dtype)


@dataclass
class _Segment:
    """Positions ``[start, end)`` of the sequence; generated turns carry logprobs and versions."""

    start: int
    end: int
    generated: bool
    logprobs: array | None = None
    versions: array | None = None
    mm_token_type_ids: list[int] | None = None  # None: all 0 (text)


@dataclass
class TrajectoryBuilder:
    """Accumulates one episode's tokens and images, then builds the trajectory dict.

    Args:
        prompt_ids: Prompt token ids (image placeholders already expanded).
        multi_modal_input: The prompt's image tensors (``pixel_values``, ``image_grid_thw``, ...),
            empty for text-only prompts.
        mm_token_type_ids: Per-token modality ids for the prompt, when the processor has them.

    >>> from areal.api import ModelResponse
    >>> b = TrajectoryBuilder(prompt_ids=[1, 2, 3])
    >>> b.add_generated(ModelResponse(input_tokens=[1, 2, 3], output_tokens=[4, 5],
    ...                               output_logprobs=[-0.1, -0.2], output_versions=[0, 0]))
    >>> traj = b.build(reward=1.0)
    >>> traj["loss_mask"].tolist()
    [[0, 0, 0, 1, 1]]
    """

    prompt_ids: Sequence[int]
    multi_modal_input: Mapping[str, torch.Tensor] = field(default_factory=dict)
    mm_token_type_ids: Sequence[int] | None = None
    _segments: list[_Segment] = field(default_factory=list, init=False, repr=False)
    _images: list[Mapping[str, torch.Tensor]] = field(default_factory=list, init=False, repr=False)
    # The whole sequence so far, kept flat: prefix checks and the next request need it per turn.
    _tokens: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise PackingError("prompt_ids is empty: an episode needs a prompt")
        if self.mm_token_type_ids is not None and len(self.mm_token_type_ids) != len(
            self.prompt_ids
        ):
            raise PackingError(
                f"mm_token_type_ids has {len(self.mm_token_type_ids)} entries but the prompt has "
                f"{len(self.prompt_ids)} tokens"
            )
        self._append(self.prompt_ids, mm_token_type_ids=self.mm_token_type_ids)
        if self.multi_modal_input:
            self._images.append(self.multi_modal_input)

    def _append(
        self,
        tokens: Sequence[int],
        *,
        generated: bool = False,
        logprobs: array | None = None,
        versions: array | None = None,
        mm_token_type_ids: Sequence[int] | None = None,
    ) -> None:
        start = len(self._tokens)
        self._tokens.extend(tokens)
        self._segments.append(
            _Segment(
                start=start,
                end=len(self._tokens),
                generated=generated,
                logprobs=logprobs,
                versions=versions,
                mm_token_type_ids=list(mm_token_type_ids) if mm_token_type_ids else None,
            )
        )

    @classmethod
    def from_prepared(cls, prepared: PreparedPrompt) -> TrajectoryBuilder:
        """A builder whose prompt is a preprocessor's :class:`PreparedPrompt`."""
        return cls(
            prompt_ids=prepared.input_ids,
            multi_modal_input=prepared.multi_modal_input,
            mm_token_type_ids=prepared.mm_token_type_ids,
        )

    @property
    def token_ids(self) -> list[int]:
        """The whole sequence so far: the next request's ``input_ids`` (a fresh list)."""
        return list(self._tokens)

    @property
    def num_generated_turns(self) -> int:
        return sum(s.generated for s in self._segments)

    @property
    def multi_modal_inputs(self) -> list[Mapping[str, torch.Tensor]]:
        """Image tensors of every segment so far, in order (for the engine's next request)."""
        return list(self._images)

    def add_generated(self, resp: ModelResponse) -> None:
        """Append a generated turn; ``resp.input_tokens`` must equal the sequence so far.

        Raises:
            PackingError: if the engine was given a different prefix (re-tokenisation drift) or
                the response's per-token lists disagree in length.
        """
        n = resp.output_len
        if len(resp.output_logprobs) != n or len(resp.output_versions) != n:
            raise PackingError(
                f"response has {n} output tokens but {len(resp.output_logprobs)} logprobs and "
                f"{len(resp.output_versions)} versions"
            )
        prefix = resp.input_tokens
        if not isinstance(prefix, list):
            prefix = list(prefix)
        if prefix != self._tokens:
            raise PackingError(
                f"response.input_tokens ({resp.input_len} tokens) is not the sequence so far "
                f"({len(self._tokens)} tokens): the engine saw different tokens than the trainer "
                "would"
            )
        logprobs = _float_array(resp.output_logprobs, "output logprob")
        versions = _int_array(resp.output_versions, "output version")
        _int_array(resp.output_tokens, "output token")  # a float id would be truncated
        if not math.isfinite(math.fsum(logprobs)):  # any NaN or infinity makes the sum one
            raise PackingError("response has logprobs that are not finite (NaN or infinite)")
        if n and min(versions) < 0:
            raise PackingError(
                f"a generated token's version is {min(versions)}: -1 marks tokens the model did "
                "not generate, and no weight version is negative"
            )
        self._append(resp.output_tokens, generated=True, logprobs=logprobs, versions=versions)

    def add_observation(
        self,
        token_ids: Sequence[int],
        multi_modal_input: Mapping[str, torch.Tensor] | None = None,
        mm_token_type_ids: Sequence[int] | None = None,
    ) -> None:
        """Append tokens the model did not generate (feedback, tool results, chat scaffolding).

        They carry ``loss_mask`` 0, logprob 0 and version -1. Images in ``multi_modal_input`` are
        appended after all earlier images, matching the order of their placeholders.
        """
        if mm_token_type_ids is not None and len(mm_token_type_ids) != len(token_ids):
            raise PackingError(
                f"observation has {len(token_ids)} tokens but {len(mm_token_type_ids)} "
                "mm_token_type_ids"
            )
        self._append(token_ids, mm_token_type_ids=mm_token_type_ids)
        if multi_modal_input:
            self._images.append(multi_modal_input)

    def build(self, reward: float) -> dict[str, Any]:
        """The AReaL trajectory dict (see the module docstring for keys, dtypes and shapes).

        Constant runs (prompt and observation positions, the mask) are filled in place; only
        token ids and generated turns' logprobs/versions are converted from Python lists.
        """
        if self.num_generated_turns == 0:
            raise PackingError("no generated turn: there is nothing to train on")
        if not math.isfinite(float(reward)):
            raise PackingError(f"reward {reward!r} is not finite: no advantage can be computed")
        length = len(self._tokens)
        loss_mask = torch.zeros(length, dtype=MASK_DTYPE)
        logprobs = torch.zeros(length, dtype=torch.float32)
        versions = torch.full((length,), -1, dtype=VERSION_DTYPE)
        for s in self._segments:
            if s.generated and s.end > s.start:
                loss_mask[s.start : s.end] = 1
                logprobs[s.start : s.end] = _from_array(s.logprobs, torch.float32)
                versions[s.start : s.end] = _from_array(s.versions, VERSION_DTYPE)
        traj: dict[str, Any] = {
            "input_ids": _id_tensor(self._tokens, INPUT_IDS_DTYPE),
            "loss_mask": loss_mask,
            "logprobs": logprobs,
            "versions": versions,
            "attention_mask": torch.ones(length, dtype=torch.bool),
            "rewards": torch.tensor(float(reward), dtype=torch.float32),
        }
        if self.mm_token_type_ids is not None:
            types = torch.zeros(length, dtype=INPUT_IDS_DTYPE)
            for s in self._segments:
                if s.mm_token_type_ids:
                    types[s.start : s.end] = _id_tensor(s.mm_token_type_ids, INPUT_IDS_DTYPE)
            traj["mm_token_type_ids"] = types
        traj = {k: v.unsqueeze(0) for k, v in traj.items()}
        if self._images:
            traj["multi_modal_input"] = [merge_multi_modal_inputs(self._images)]
        return traj


def merge_multi_modal_inputs(
    parts: Sequence[Mapping[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """Concatenate per-segment image and video tensors along dim 0, key by key, in order.

    Qwen-VL style models take all images of a sequence as one ``pixel_values`` of shape
    ``[sum of patches, patch_dim]`` and one ``image_grid_thw`` of shape ``[num_images, 3]``; both
    concatenate on dim 0, which is also right for ``[num_images, C, H, W]`` families. Tensors
    whose later dimensions differ between segments (LLaVA-OneVision's ``[images, patches, C, H,
    W]`` with a different patch count per image, Idefics3's ``[1, tiles, C, H, W]``) are padded
    with zeros to the largest first, as the processors pad several images of one call: the
    models drop the padding (LLaVA-OneVision by ``image_sizes``, Idefics3 by skipping all-zero
    tiles).

    A segment may carry images, videos or both: keys of one modality
    (:data:`vlrollout.families.VIDEO_INPUT_KEYS` for videos) concatenate over the segments that
    have them. Video tensors are never padded: a padded frame would be encoded as a frame.

    Raises:
        PackingError: when two segments carry the same modality with different keys (one model
            cannot take both), or video tensors whose later dimensions differ (LLaVA-OneVision's
            ``[videos, frames, C, H, W]`` with another frame count).
    """
    for videos in (False, True):
        seen = [
            (i, keys)
            for i, part in enumerate(parts)
            if (keys := {k for k in part if (k in VIDEO_INPUT_KEYS) == videos})
        ]
        for i, keys in seen[1:]:
            if keys != seen[0][1]:
                raise PackingError(
                    f"{'video' if videos else 'image'} segment {i} has keys {sorted(keys)}, "
                    f"segment {seen[0][0]} has {sorted(seen[0][1])}"
                )
    if len(parts) == 1:
        return dict(parts[0])
    keys = dict.fromkeys(k for part in parts for k in part)
    merged = {}
    for k in keys:
        tensors = [p[k] for p in parts if k in p]
        if k in VIDEO_INPUT_KEYS and len({t.shape[1:] for t in tensors}) > 1:
            raise PackingError(
                f"video segments' {k} have shapes {sorted(tuple(t.shape) for t in tensors)}: "
                "padding them would add frames the model encodes"
            )
        merged[k] = _cat_padded(k, tensors)
    return merged


def _cat_padded(key: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat`` on dim 0 after zero-padding every later dimension to the largest. Rows of a
    2-D tensor (Qwen's flattened patches) are never padded: zero columns would be pixels."""
    shapes = {t.shape[1:] for t in tensors}
    if len(shapes) == 1:
        return torch.cat(tensors, dim=0)
    if len({t.dim() for t in tensors}) != 1:
        raise PackingError(f"{key} tensors of different ranks: {sorted(map(tuple, shapes))}")
    if tensors[0].dim() <= 2:
        raise PackingError(
            f"{key} rows of different widths {sorted(s[0] for s in shapes)}: segments built "
            "with different patch sizes or channel counts"
        )
    size = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].dim())]
    padded = []
    for t in tensors:
        pad: list[int] = []
        for d in reversed(range(1, t.dim())):
            pad += [0, size[d - 1] - t.shape[d]]
        padded.append(torch.nn.functional.pad(t, pad))
    return torch.cat(padded, dim=0)


def pack_single_turn(
    prompt_ids: Sequence[int],
    resp: ModelResponse,
    reward: float,
    multi_modal_input: Mapping[str, torch.Tensor] | None = None,
    mm_token_type_ids: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Shortcut for a prompt followed by one generated turn."""
    builder = TrajectoryBuilder(
        prompt_ids=prompt_ids,
        multi_modal_input=multi_modal_input or {},
        mm_token_type_ids=mm_token_type_ids,
    )
    builder.add_generated(resp)
    return builder.build(reward)
