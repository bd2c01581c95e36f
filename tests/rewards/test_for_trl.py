"""``TRLReward``: TRL's reward-function contract, scores equal to our ``RewardCaller``'s, and one
real GRPO step of TRL's ``GRPOTrainer`` on the tiny model with our grounding and caption rewards."""

import asyncio
import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from vlrollout.processors.for_trainers import model_inputs
from vlrollout.rewards.caller import RewardCaller
from vlrollout.rewards.for_trl import AsyncTRLReward, TRLReward
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.rewards.registry import get_reward
from vlrollout.testing.offline_processors import build_qwen2_5_vl
from vlrollout.tiny.synthetic import make_item

TINY = Path(__file__).resolve().parents[2] / "assets" / "tiny-qwen2vl"


def _ours(reward, prompt, completion, ids, task_data, geometry):
    return asyncio.run(RewardCaller(reward)(prompt, completion, [], ids, task_data, geometry))


def test_boxes_are_read_in_the_frame_of_the_images_column():
    # Qwen2.5-VL writes pixels of the resized image: 200x100 becomes 112x56 under max_pixels.
    processor = build_qwen2_5_vl()
    image = Image.new("RGB", (200, 100))
    geometry = model_inputs({"messages": "<image>Where?", "images": [image]}, processor)["geometry"]
    sx = geometry[0]["model_width"] / 200
    sy = geometry[0]["model_height"] / 100
    assert (sx, sy) != (1.0, 1.0)
    model_box = [round(20 * sx, 3), round(10 * sy, 3), round(100 * sx, 3), round(50 * sy, 3)]
    text = json.dumps({"bbox_2d": model_box})
    reward = TRLReward(GroundingReward("qwen2_5_vl"), processor, name="iou")
    conversational = [
        [{"role": "assistant", "content": text}],
        [{"role": "assistant", "content": "none"}],
    ]
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where?"}]}]
    scores = reward(
        prompts=[prompt, prompt],
        completions=conversational,
        completion_ids=[processor.tokenizer.encode(text), processor.tokenizer.encode("none")],
        images=[[image], [image]],
        boxes=[[20, 10, 100, 50]] * 2,
        trainer_state=None,
        log_extra=None,
        log_metric=None,
    )
    # Without the processor there is no geometry: the first completion is rejected, not zeroed.
    bare = TRLReward(GroundingReward("qwen2_5_vl"))(
        prompts=["Where?"],
        completions=[text],
        completion_ids=[[1]],
        images=[[image]],
        boxes=[[20, 10, 100, 50]],
    )
    assert scores[0] == pytest.approx(1.0, abs=1e-3) and scores[1] == 0.0
    assert reward.__name__ == "iou"
    assert bare == [None]


def test_a_geometry_column_is_used_as_given_and_equals_the_reward_caller():
    reward = GroundingReward("qwen2_5_vl")
    geometry = [
        {"original_width": 200, "original_height": 100, "model_width": 100, "model_height": 50}
    ]
    text = '{"bbox_2d": [10, 5, 50, 25]}'
    adapter = AsyncTRLReward(reward)
    from trl.trainer.utils import is_async_callable  # how GRPOTrainer decides to await a reward

    assert is_async_callable(adapter) and not is_async_callable(TRLReward(reward))
    got = asyncio.run(
        adapter(
            prompts=["p"],
            completions=[text],
            completion_ids=[[3]],
            geometry=[geometry],
            boxes=[[20, 10, 100, 50]],
        )
    )
    assert got == [_ours(reward, "p", text, [3], {"boxes": [20, 10, 100, 50]}, geometry)] == [1.0]
    # Conversational prompts and completions without a processor: the last message's text.
    chat = asyncio.run(
        adapter(
            prompts=[[{"role": "user", "content": "Where?"}]] * 2,
            completions=[
                [{"role": "assistant", "content": text}],
                [{"role": "assistant", "content": "?"}],
            ],
            completion_ids=[[3], [3]],
            geometry=[geometry] * 2,
            boxes=[[20, 10, 100, 50]] * 2,
        )
    )
    assert chat == [1.0, 0.0]


def test_rejections_score_none_with_their_reason_counted():
    adapter = TRLReward("iou", family="qwen2_5_vl")
    assert adapter(prompts=["p"], completions=["x"], completion_ids=[[1]]) == [
        None
    ]  # no boxes column
    assert adapter.rejected == {"reward_error": 1}
    with pytest.raises(ValueError, match="one of each per completion"):
        adapter(prompts=["p"], completions=["x", "y"], completion_ids=[[1]])


def test_the_output_cap_applies_through_the_adapter():
    geometry = [
        {"original_width": 100, "original_height": 100, "model_width": 100, "model_height": 100}
    ]
    box = '{"bbox_2d": [0, 0, 50, 50]}'
    adapter = TRLReward(GroundingReward("qwen2_5_vl"))
    columns = {"geometry": [geometry] * 2, "boxes": [[0, 0, 50, 50]] * 2}
    # A box past the first MAX_OUTPUT_CHARS characters of a 1 MB completion is not read.
    hostile = "x" * 1_000_000 + box
    got = adapter(
        prompts=["p", "p"], completions=[box, hostile], completion_ids=[[1], [1]], **columns
    )
    assert got == [1.0, 0.0]


def test_one_grpo_step_of_trl_scores_what_our_reward_caller_scores(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    items = [make_item("ground", 0, 0), make_item("caption", 0, 1)]
    processor = AutoProcessor.from_pretrained(TINY, local_files_only=True)
    rows = {
        "prompt": [
            [{"role": "user", "content": i["messages"][0]["content"][1]["text"]}] for i in items
        ],
        "images": [i["images"] for i in items],
        "task": [i["task"] for i in items],
        "boxes": [i.get("boxes") for i in items],
        "captions": [i.get("captions") for i in items],
        "item_index": [0, 1],
    }
    # CIDEr-D's document frequencies from more references than the two items; GIoU so a box that
    # misses still scores (a dense value, not 0 everywhere).
    corpus = items + [make_item("caption", 0, i) for i in range(2, 30)]
    adapter = TRLReward("tiny_task", processor, items=corpus, ground_metric="giou", name="shapes")
    seen = []

    class Trainer(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            seen.append(([x["item_index"] for x in inputs], completion_ids_list, out.clone()))
            return out

    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=24,
        learning_rate=1e-5,
        beta=0.0,
        loss_type="dapo",
        use_cpu=True,
        seed=0,
        shuffle_dataset=False,
        remove_unused_columns=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    model = AutoModelForImageTextToText.from_pretrained(TINY, dtype=torch.float32)
    trainer = Trainer(
        model=model,
        reward_funcs=[adapter],
        args=args,
        train_dataset=Dataset.from_dict(rows),
        processing_class=processor,
    )
    trainer.train()

    assert len(seen) == 1
    indices, completion_ids, trl_scores = seen[0]
    assert sorted(set(indices)) == [0, 1] and trl_scores.shape == (4, 1)
    reward = get_reward("tiny_task", items=corpus, ground_metric="giou")
    tokenizer = processor.tokenizer
    stop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    ours = []
    for index, ids in zip(indices, completion_ids, strict=True):
        ids = list(ids)
        while ids and ids[-1] in stop:
            ids.pop()
        item = items[index]
        task_data = {k: item.get(k) for k in ("task", "boxes", "captions", "item_index")}
        geometry = model_inputs(item, processor)["geometry"]
        text = tokenizer.decode(ids, skip_special_tokens=False)
        ours.append(_ours(reward, "", text, list(ids), task_data, geometry))
    assert trl_scores[:, 0].tolist() == pytest.approx(ours)
    assert len(set(ours)) > 1  # the comparison is not of zeros
    logged = [r for r in trainer.state.log_history if "rewards/shapes/mean" in r]
    assert logged and math.isclose(
        logged[0]["rewards/shapes/mean"], sum(ours) / len(ours), rel_tol=1e-5
    )
    assert not adapter.rejected


def _exif_rotated_jpeg(size=(640, 480)) -> Image.Image:
    """A JPEG whose EXIF says "rotate 90°", opened as TRL's dataset column may hold it."""
    import io

    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    buffer = io.BytesIO()
    Image.new("RGB", size, "white").save(buffer, format="JPEG", exif=exif)
    return Image.open(io.BytesIO(buffer.getvalue()))


def test_row_geometry_is_of_the_pixels_the_processor_gets_in_any_row_order():
    # transformers' processors take a PIL image's pixels as they are (no EXIF rotation), so the
    # geometry of a row is that of its images' stored size, whichever rows came before it.
    processor = build_qwen2_5_vl()
    plain, rotated = Image.new("RGB", (640, 480)), _exif_rotated_jpeg()
    seen = processor.image_processor(images=[rotated], return_tensors="pt")["image_grid_thw"][0]
    patch = processor.image_processor.patch_size
    want = {"original_width": 640, "original_height": 480}
    for order in ((plain, rotated), (rotated, plain)):
        reward = TRLReward("iou", processor, family="qwen2_5_vl")
        for image in order:
            geometry = reward.row_geometry({"images": [image]})[0]
            assert {k: geometry[k] for k in want} == want
            assert (geometry["model_height"], geometry["model_width"]) == (
                int(seen[1]) * patch,
                int(seen[2]) * patch,
            )


def test_the_sync_adapter_works_where_an_event_loop_runs_as_in_a_notebook():
    reward = TRLReward("count")
    columns = {"answer": ["3", "3"]}

    async def cell():  # a Jupyter cell runs inside the kernel's event loop
        return reward(["p", "p"], ["<answer>3</answer>", "two"], [[1], [2]], **columns)

    assert asyncio.run(cell()) == reward(
        ["p", "p"], ["<answer>3</answer>", "two"], [[1], [2]], **columns
    )
    assert asyncio.run(cell())[0] == 1.0


def test_a_message_without_content_is_empty_text_and_a_short_column_is_named():
    reward = TRLReward("count")
    tool_call = [{"role": "assistant", "content": None, "tool_calls": []}]
    assert reward(["p"], [tool_call], [[1]], answer=["3"]) == [0.0]  # nothing to read: no_number
    assert reward.rejected == {}
    with pytest.raises(ValueError, match=r"column 'answer' has 1 value\(s\) for 2 completions"):
        reward(["p", "p"], ["3", "3"], [[1], [1]], answer=["3"])


def test_an_images_column_of_one_image_per_row_is_read_as_that_image():
    """TRL datasets built with an `images` column of single images (not lists) are common."""
    processor = build_qwen2_5_vl()
    image = Image.new("RGB", (200, 100))
    reward = TRLReward(GroundingReward("qwen2_5_vl"), processor, name="iou")
    args = dict(prompts=["Where?"], completions=["(1,1),(5,5)"], completion_ids=[[1]])
    single = reward(**args, images=[image], boxes=[[20, 10, 100, 50]])
    listed = reward(**args, images=[[image]], boxes=[[20, 10, 100, 50]])
    assert single == listed and single[0] is not None


def test_the_first_rejection_of_each_reason_is_logged_with_its_detail(monkeypatch):
    import vlrollout.rewards.for_trl as for_trl

    warnings: list[str] = []
    monkeypatch.setattr(for_trl.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    adapter = TRLReward("iou", family="qwen2_5_vl")
    for _ in range(2):
        assert adapter(prompts=["p"], completions=["x"], completion_ids=[[1]]) == [None]
    assert adapter.rejected == {"reward_error": 2}
    assert len(warnings) == 1 and "reward_error" in warnings[0] and "boxes" in warnings[0]


def test_a_geometry_column_of_one_dict_per_row_is_each_rows_one_image():
    """The grounding rewards take one image's geometry as a dict; a TRL dataset's geometry
    column of one dict per row is that too, not a list to iterate."""
    geo = {"original_width": 640, "original_height": 480, "model_width": 644, "model_height": 476}
    reward = TRLReward("iou", family="qwen2_5_vl")
    kwargs = dict(prompts=["p"], completion_ids=[[1]], boxes=[[100, 100, 300, 300]])
    box = {"bbox_2d": [100 * 644 / 640, 100 * 476 / 480, 300 * 644 / 640, 300 * 476 / 480]}
    one = reward(completions=[json.dumps(box)], geometry=[geo], **kwargs)
    listed = reward(completions=[json.dumps(box)], geometry=[[geo]], **kwargs)
    assert one == listed and one[0] == pytest.approx(1.0)


def _a_function_reward(prompt, completions, prompt_ids, completion_ids, **task_data):
    return 0.0


def _another_function_reward(prompt, completions, prompt_ids, completion_ids, **task_data):
    return 1.0


def test_two_rewards_of_one_class_or_two_functions_log_under_their_own_names():
    """TRL logs ``rewards/<__name__>/mean``: two adapters of one name would share one curve."""
    names = [
        TRLReward(GroundingReward("qwen2_vl", "iou")).__name__,
        TRLReward(GroundingReward("qwen2_vl", "giou")).__name__,
        TRLReward(_a_function_reward).__name__,
        TRLReward(_another_function_reward).__name__,
    ]
    assert names == [
        "vlrollout_iou",
        "vlrollout_giou",
        "vlrollout__a_function_reward",
        "vlrollout__another_function_reward",
    ]
