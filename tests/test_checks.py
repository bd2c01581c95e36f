"""Parity and images-reach checks."""

from __future__ import annotations

import pytest
from areal.api import ModelRequest
from PIL import Image

from vlrollout.checks import (
    ImagesMissingError,
    ParityError,
    VideosMissingError,
    check_processor_parity,
    check_request_images,
    placeholder_runs,
)
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.tiny.tokenizer import build_qwen2vl_processor
from vlrollout.workflows.steps import build_request

ITEM = {
    "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
    "images": [Image.new("RGB", (90, 60), "green")],
}


def test_placeholder_runs_counts_images_not_tokens():
    assert placeholder_runs([1, 9, 9, 9, 2, 9, 9, 3], 9) == 2
    assert placeholder_runs([1, 2], 9) == 0


def test_prepared_requests_pass_and_stripped_requests_fail(qwen2vl_processor):
    from areal.api.cli_args import GenerationHyperparameters

    pre = AutoProcessorPreprocessor(qwen2vl_processor)
    prepared = pre.prepare(dict(ITEM))
    req = build_request(prepared, GenerationHyperparameters(), qwen2vl_processor.tokenizer)
    check_request_images(req, prepared.image_token_id)  # does not raise

    blind = ModelRequest(input_ids=req.input_ids, image_data=[], vision_msg_vllm=None, metadata={})
    with pytest.raises(ImagesMissingError) as e:
        check_request_images(blind, prepared.image_token_id)
    message = str(e.value)
    assert "hold 1 image(s) but" in message
    assert (
        "image_data has 0 images" in message
        and "vision_msg_vllm" in message
        and "pixel_values" in message
    )


def test_same_processor_has_parity(qwen2vl_processor):
    check_processor_parity(qwen2vl_processor, AutoProcessorPreprocessor(qwen2vl_processor))


def test_engine_with_other_max_pixels_fails_parity(tokenizer, qwen2vl_processor):
    engine_side = build_qwen2vl_processor(tokenizer, max_pixels=224 * 224)
    with pytest.raises(ParityError, match="max_pixels: engine 50176, trainer 12544"):
        check_processor_parity(engine_side, AutoProcessorPreprocessor(qwen2vl_processor))


def test_trainer_resize_override_fails_parity(qwen2vl_processor):
    pre = AutoProcessorPreprocessor(qwen2vl_processor, max_pixels=56 * 56)
    with pytest.raises(ParityError, match="max_pixels"):
        check_processor_parity(qwen2vl_processor, pre)


def _engine(tokenizer, reads_tensors: bool, **processor_kwargs):
    """A scripted engine with a processor; ``reads_tensors=False``: one that would process
    ``image_data`` with that processor itself (so its resize settings must be the trainer's)."""
    from vlrollout.testing.scripted_engine import ScriptedEngine

    engine = ScriptedEngine([[tokenizer.eos_token_id]] * 4)
    engine.reads_multi_modal_input = reads_tensors
    engine.processor = build_qwen2vl_processor(tokenizer, **processor_kwargs)
    return engine


def _workflow(tokenizer, processor, **kwargs):
    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.workflows import VisionRLVRWorkflow

    reward = "tests.workflows.reward_fns.contains_answer"
    return VisionRLVRWorkflow(reward, GenerationHyperparameters(), tokenizer, processor, **kwargs)


def test_an_engine_that_processes_images_itself_fails_parity_on_every_episode(
    tokenizer, qwen2vl_processor
):
    import asyncio

    engine = _engine(tokenizer, reads_tensors=False, max_pixels=224 * 224)
    wf = _workflow(tokenizer, qwen2vl_processor)
    for n in range(2):  # not only the first episode: the engine is wrong for all of them
        with pytest.raises(ParityError):
            asyncio.run(wf.arun_episode(engine, {"id": f"p{n}", **ITEM}))


def test_an_engine_that_reads_the_prepared_tensors_is_not_held_to_resize_parity(
    tokenizer, qwen2vl_processor
):
    # vlrollout run --max-pixels: the workflow resizes, the local engine gets its tensors.
    import asyncio

    engine = _engine(tokenizer, reads_tensors=True)
    wf = _workflow(tokenizer, qwen2vl_processor, max_pixels=56 * 56)
    for n in range(2):
        assert asyncio.run(wf.arun_episode(engine, {"id": f"p{n}", **ITEM})) is not None


def _video_request(prepared, mm):
    return ModelRequest(
        input_ids=list(prepared.input_ids), image_data=[], metadata={"multi_modal_input": mm}
    )


def test_video_requests_need_video_tensors_not_images(qwen2vl_processor):
    import io

    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=2)
        stream.width = stream.height = 32
        for k in range(2):
            frame = np.full((32, 32, 3), 60 * k, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    pre = AutoProcessorPreprocessor(qwen2vl_processor, video_min_pixels=28 * 28)
    prepared = pre.prepare({"messages": "<video>Where?", "videos": [buf.getvalue()]})
    ids = (prepared.image_token_id, prepared.video_token_id)
    # A video-only request is complete with its video tensors: no "missing images".
    check_request_images(
        _video_request(prepared, prepared.multi_modal_input), ids[0], video_token_id=ids[1]
    )
    with pytest.raises(VideosMissingError, match="1 video placeholder run"):
        check_request_images(_video_request(prepared, {}), ids[0], video_token_id=ids[1])
    # the video token defaults to the request processor's
    blind = _video_request(prepared, {})
    blind.processor = qwen2vl_processor
    with pytest.raises(VideosMissingError):
        check_request_images(blind, ids[0])


def test_image_placeholders_of_video_frames_are_not_missing_images():
    import torch

    # GLM-4.1V / InternVL spell a video as one image per frame: two runs here, no image item.
    req = ModelRequest(
        input_ids=[1, 9, 9, 2, 9, 9],
        image_data=[],
        metadata={"multi_modal_input": {"pixel_values": torch.zeros(1)}},
    )
    check_request_images(req, 9, require_vllm_messages=False, video_frame_images=2)
    with pytest.raises(ImagesMissingError, match="hold 1 image"):
        check_request_images(req, 9, require_vllm_messages=False, video_frame_images=1)


def test_an_engine_processor_that_resamples_otherwise_fails_parity(qwen2vl_processor):
    """Another resampling filter gives other pixels from the same image and the same sizes: the
    probe's token counts agree, so only the setting tells."""
    import copy

    engine_side = copy.deepcopy(qwen2vl_processor)
    engine_side.image_processor.resample = 0 if qwen2vl_processor.image_processor.resample else 3
    with pytest.raises(ParityError, match="resample"):
        check_processor_parity(engine_side, AutoProcessorPreprocessor(qwen2vl_processor))
