"""The packaging core: the one place AReaL trajectory dicts are built.

Every workflow (text, vision, multi-attempt, tool use) describes an episode as a prompt followed by
segments: generated turns (from ``ModelResponse``) and observations (feedback or tool tokens the
model did not generate). :class:`TrajectoryBuilder` keeps the running token sequence, which is also
the next request's ``input_ids``, so the trainer sees exactly the tokens the engine saw.

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
mm_token_type_ids  int64 [1,L]  only when the processor returned them (0 text, 1 image)
multi_modal_input  list[dict]   one dict per sequence: the model's image tensors, with the images
                                of every segment concatenated in order (pixel_values on dim 0,
                                image_grid_thw on dim 0, ...)
================== ============ =====================================================

AReaL's own workflows disagree on the dtype of ``input_ids`` (int32 in ``RLVRWorkflow``, int64 in
``VisionRLVRWorkflow``); we use int64 everywhere so text and vision trajectories concatenate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from areal.api import ModelResponse

INPUT_IDS_DTYPE = torch.int64
MASK_DTYPE = torch.int32
VERSION_DTYPE = torch.int32


class PackingError(ValueError):
    """The pieces of an episode do not fit together (a bug in a workflow or an engine)."""


@dataclass
class _Segment:
    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    generated: bool
    mm_token_type_ids: list[int]


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
        self._segments.append(
            _Segment(
                tokens=list(self.prompt_ids),
                logprobs=[0.0] * len(self.prompt_ids),
                versions=[-1] * len(self.prompt_ids),
                generated=False,
                mm_token_type_ids=list(self.mm_token_type_ids or [0] * len(self.prompt_ids)),
            )
        )
        if self.multi_modal_input:
            self._images.append(self.multi_modal_input)

    @property
    def token_ids(self) -> list[int]:
        """The whole sequence so far: the next request's ``input_ids``."""
        return [t for s in self._segments for t in s.tokens]

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
        expected = self.token_ids
        if list(resp.input_tokens) != expected:
            raise PackingError(
                f"response.input_tokens ({resp.input_len} tokens) is not the sequence so far "
                f"({len(expected)} tokens): the engine saw different tokens than the trainer would"
            )
        self._segments.append(
            _Segment(
                tokens=list(resp.output_tokens),
                logprobs=[float(x) for x in resp.output_logprobs],
                versions=[int(v) for v in resp.output_versions],
                generated=True,
                mm_token_type_ids=[0] * n,
            )
        )

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
        self._segments.append(
            _Segment(
                tokens=list(token_ids),
                logprobs=[0.0] * len(token_ids),
                versions=[-1] * len(token_ids),
                generated=False,
                mm_token_type_ids=list(mm_token_type_ids or [0] * len(token_ids)),
            )
        )
        if multi_modal_input:
            self._images.append(multi_modal_input)

    def build(self, reward: float) -> dict[str, Any]:
        """The AReaL trajectory dict (see the module docstring for keys, dtypes and shapes)."""
        if self.num_generated_turns == 0:
            raise PackingError("no generated turn: there is nothing to train on")
        tokens = self.token_ids
        loss_mask = [int(s.generated) for s in self._segments for _ in s.tokens]
        logprobs = [x for s in self._segments for x in s.logprobs]
        versions = [v for s in self._segments for v in s.versions]
        traj: dict[str, Any] = {
            "input_ids": torch.tensor(tokens, dtype=INPUT_IDS_DTYPE),
            "loss_mask": torch.tensor(loss_mask, dtype=MASK_DTYPE),
            "logprobs": torch.tensor(logprobs, dtype=torch.float32),
            "versions": torch.tensor(versions, dtype=VERSION_DTYPE),
            "attention_mask": torch.ones(len(tokens), dtype=torch.bool),
            "rewards": torch.tensor(float(reward), dtype=torch.float32),
        }
        if self.mm_token_type_ids is not None:
            types = [t for s in self._segments for t in s.mm_token_type_ids]
            traj["mm_token_type_ids"] = torch.tensor(types, dtype=INPUT_IDS_DTYPE)
        traj = {k: v.unsqueeze(0) for k, v in traj.items()}
        if self._images:
            traj["multi_modal_input"] = [merge_multi_modal_inputs(self._images)]
        return traj


def merge_multi_modal_inputs(
    parts: Sequence[Mapping[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """Concatenate per-segment image tensors along dim 0, key by key, in order.

    Qwen-VL style models take all images of a sequence as one ``pixel_values`` of shape
    ``[sum of patches, patch_dim]`` and one ``image_grid_thw`` of shape ``[num_images, 3]``; both
    concatenate on dim 0, which is also right for ``[num_images, C, H, W]`` families.

    Raises:
        PackingError: when segments carry different keys (one model cannot take both).
    """
    keys = list(parts[0].keys())
    for i, part in enumerate(parts[1:], 1):
        if set(part.keys()) != set(keys):
            raise PackingError(
                f"image segment {i} has keys {sorted(part.keys())}, segment 0 has {sorted(keys)}"
            )
    if len(parts) == 1:
        return dict(parts[0])
    return {k: torch.cat([p[k] for p in parts], dim=0) for k in keys}


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
