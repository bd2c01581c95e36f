"""The packaging core against AReaL's own trajectory checks."""

from __future__ import annotations

import pytest
import torch
from areal.api import ModelResponse
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils.data import concat_padded_tensors

from vlrollout.packaging import (
    PackingError,
    TrajectoryBuilder,
    merge_multi_modal_inputs,
    pack_single_turn,
)


def _resp(prefix, out, version=3):
    return ModelResponse(
        input_tokens=list(prefix),
        output_tokens=list(out),
        output_logprobs=[-0.1 * (i + 1) for i in range(len(out))],
        output_versions=[version] * len(out),
    )


def test_single_turn_keys_dtypes_shapes_and_masks():
    traj = pack_single_turn([5, 6, 7], _resp([5, 6, 7], [8, 9]), reward=0.5)
    assert check_trajectory_format(traj)
    assert traj["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert traj["loss_mask"].tolist() == [[0, 0, 0, 1, 1]]
    assert traj["versions"].tolist() == [[-1, -1, -1, 3, 3]]
    assert torch.allclose(traj["logprobs"], torch.tensor([[0, 0, 0, -0.1, -0.2]]))
    assert traj["attention_mask"].dtype == torch.bool and traj["attention_mask"].all()
    assert traj["rewards"].shape == (1,) and traj["rewards"].item() == 0.5
    assert traj["input_ids"].dtype == torch.int64
    assert traj["loss_mask"].dtype == torch.int32
    assert traj["versions"].dtype == torch.int32
    assert traj["logprobs"].dtype == torch.float32
    assert "multi_modal_input" not in traj and "mm_token_type_ids" not in traj


def test_multi_turn_observation_is_masked_and_sequence_is_concatenation():
    b = TrajectoryBuilder(prompt_ids=[1, 2])
    b.add_generated(_resp([1, 2], [3, 4]))
    b.add_observation([10, 11, 12])
    b.add_generated(_resp([1, 2, 3, 4, 10, 11, 12], [5], version=4))
    traj = b.build(reward=1.0)
    assert check_trajectory_format(traj)
    assert traj["input_ids"].tolist() == [[1, 2, 3, 4, 10, 11, 12, 5]]
    assert traj["loss_mask"].tolist() == [[0, 0, 1, 1, 0, 0, 0, 1]]
    assert traj["versions"].tolist() == [[-1, -1, 3, 3, -1, -1, -1, 4]]
    lp = traj["logprobs"][0]
    assert (lp[traj["loss_mask"][0] == 0] == 0).all()
    assert torch.allclose(lp[traj["loss_mask"][0] == 1], torch.tensor([-0.1, -0.2, -0.1]))


def test_generated_turn_must_continue_the_sequence_exactly():
    b = TrajectoryBuilder(prompt_ids=[1, 2])
    with pytest.raises(PackingError, match="not the sequence so far"):
        b.add_generated(_resp([1, 99], [3]))


def test_response_with_mismatched_logprobs_is_rejected():
    bad = ModelResponse(
        input_tokens=[1], output_tokens=[2, 3], output_logprobs=[-1.0], output_versions=[0, 0]
    )
    with pytest.raises(PackingError, match="2 output tokens but 1 logprobs"):
        pack_single_turn([1], bad, 0.0)


def test_no_generated_turn_is_an_error():
    with pytest.raises(PackingError, match="no generated turn"):
        TrajectoryBuilder(prompt_ids=[1]).build(0.0)


def test_vision_images_of_all_segments_concatenate_in_order():
    img_a = {"pixel_values": torch.full((4, 6), 1.0), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    img_b = {"pixel_values": torch.full((8, 6), 2.0), "image_grid_thw": torch.tensor([[1, 2, 4]])}
    b = TrajectoryBuilder(
        prompt_ids=[1, 7, 2], multi_modal_input=img_a, mm_token_type_ids=[0, 1, 0]
    )
    b.add_generated(_resp([1, 7, 2], [3]))
    b.add_observation([7, 7], multi_modal_input=img_b, mm_token_type_ids=[1, 1])
    b.add_generated(_resp([1, 7, 2, 3, 7, 7], [4]))
    traj = b.build(reward=0.0)
    assert check_trajectory_format(traj)
    mm = traj["multi_modal_input"]
    assert len(mm) == 1
    assert mm[0]["pixel_values"].shape == (12, 6)
    assert mm[0]["pixel_values"][:4].eq(1).all() and mm[0]["pixel_values"][4:].eq(2).all()
    assert mm[0]["image_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 4]]
    assert traj["mm_token_type_ids"].tolist() == [[0, 1, 0, 0, 1, 1, 0]]


def test_merge_rejects_segments_with_different_keys():
    with pytest.raises(PackingError, match="keys"):
        merge_multi_modal_inputs(
            [{"pixel_values": torch.zeros(1)}, {"image_sizes": torch.zeros(1)}]
        )


def test_group_concatenates_with_areal_concat_padded_tensors():
    img = {"pixel_values": torch.zeros(4, 6), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    t1 = pack_single_turn([1, 2], _resp([1, 2], [3]), 1.0, multi_modal_input=img)
    t2 = pack_single_turn([1, 2], _resp([1, 2], [3, 4, 5]), 0.0, multi_modal_input=img)
    batch = concat_padded_tensors([t1, t2])
    assert check_trajectory_format(batch, batch_size=2)
    assert batch["input_ids"].shape == (2, 5)
    assert batch["attention_mask"].sum(1).tolist() == [3, 5]
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 0, 0], [0, 0, 1, 1, 1]]
    assert batch["rewards"].tolist() == [1.0, 0.0]
    assert len(batch["multi_modal_input"]) == 2


def test_merge_joins_a_video_segment_and_an_image_segment():
    video = {"pixel_values_videos": torch.ones(8, 6), "video_grid_thw": torch.tensor([[2, 2, 2]])}
    image = {"pixel_values": torch.zeros(4, 6), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    both = {
        **image,
        "pixel_values_videos": torch.full((4, 6), 2.0),
        "video_grid_thw": torch.tensor([[1, 2, 2]]),
    }
    merged = merge_multi_modal_inputs([video, image, both])
    assert merged["video_grid_thw"].tolist() == [[2, 2, 2], [1, 2, 2]]
    assert merged["image_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 2]]
    assert merged["pixel_values_videos"][8:].eq(2).all() and merged["pixel_values"].shape == (8, 6)
    with pytest.raises(PackingError, match="video segment 1 has keys"):
        merge_multi_modal_inputs([video, {"pixel_values_videos": torch.ones(8, 6)}])


def test_merge_never_pads_video_frames():
    clip = lambda frames: {"pixel_values_videos": torch.ones(1, frames, 3, 4, 4)}  # noqa: E731
    assert merge_multi_modal_inputs([clip(4), clip(4)])["pixel_values_videos"].shape[0] == 2
    with pytest.raises(PackingError, match="padding them would add frames"):
        merge_multi_modal_inputs([clip(4), clip(6)])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"output_tokens": [8.9, 9.2]}, "output token 0 is 8.9, not a whole number"),
        ({"output_logprobs": ["-0.1", -0.2]}, "output logprob 0 is '-0.1', not a number"),
        ({"output_logprobs": [-0.1, float("nan")]}, "logprobs that are not finite"),
        ({"output_logprobs": [float("-inf"), -0.2]}, "logprobs that are not finite"),
        ({"output_versions": [-1, 3]}, "a generated token's version is -1"),
    ],
)
def test_a_response_with_values_no_engine_gives_is_refused(change, words):
    """An engine's bug: AReaL's trainer would train on truncated ids, NaN ratios, or tokens
    marked as not generated."""
    fields = {
        "input_tokens": [5, 6, 7],
        "output_tokens": [8, 9],
        "output_logprobs": [-0.1, -0.2],
        "output_versions": [3, 3],
    }
    with pytest.raises(PackingError, match=words):
        pack_single_turn([5, 6, 7], ModelResponse(**{**fields, **change}), 1.0)


@pytest.mark.parametrize("reward", [float("nan"), float("inf")])
def test_a_reward_that_is_not_finite_is_refused(reward):
    with pytest.raises(PackingError, match="reward"):
        pack_single_turn([5, 6, 7], _resp([5, 6, 7], [8, 9]), reward)


def test_flat_patch_rows_of_different_widths_are_refused_not_padded():
    """Qwen-style ``pixel_values`` rows are flattened patches: zero columns would be pixels."""
    parts = [{"pixel_values": torch.zeros(4, 8)}, {"pixel_values": torch.zeros(4, 6)}]
    with pytest.raises(PackingError, match="pixel_values"):
        merge_multi_modal_inputs(parts)
