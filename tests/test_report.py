"""The report's picture of what the model saw, and the report page itself."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vlrollout.run.report_images import images_seen_by_model


def test_unpatchify_inverts_the_qwen2vl_processor(qwen2vl_processor):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, size=(56, 84, 3), dtype=np.uint8)  # multiple of 28: no resize
    out = qwen2vl_processor.image_processor(images=[Image.fromarray(array)], return_tensors="pt")
    (seen,) = images_seen_by_model(out, qwen2vl_processor)
    assert seen.size == (84, 56)
    assert np.abs(np.asarray(seen).astype(int) - array.astype(int)).max() <= 1


def test_two_images_come_back_in_order(qwen2vl_processor):
    red, blue = Image.new("RGB", (56, 56), (255, 0, 0)), Image.new("RGB", (28, 56), (0, 0, 255))
    out = qwen2vl_processor.image_processor(images=[red, blue], return_tensors="pt")
    first, second = images_seen_by_model(out, qwen2vl_processor)
    assert first.getpixel((5, 5))[0] > 250 and second.getpixel((5, 5))[2] > 250
    _, h, w = out["image_grid_thw"][1].tolist()
    assert second.size == (w * 14, h * 14)  # the size the model saw, after the processor's resize


def test_report_shows_completions_rewards_rejections_and_tool_images(
    tokenizer, qwen2vl_processor, tmp_path
):
    import asyncio
    import json

    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.datasets import load_items
    from vlrollout.run.report import write_report
    from vlrollout.run.runner import Runner
    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.workflows import VisionToolWorkflow

    Image.new("RGB", (112, 84), (0, 128, 255)).save(tmp_path / "a.png")
    rows = [
        {
            "id": "ok",
            "messages": [{"role": "user", "content": "<image>Where is it?"}],
            "images": ["a.png"],
            "answer": "blue",
            "boxes": [[10, 10, 50, 40]],
        },
        {
            "id": "missing",
            "messages": [{"role": "user", "content": "<image>?"}],
            "images": ["nope.png"],
            "answer": "x",
        },
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    call = '<tool_call>{"name": "rotate", "arguments": {"angle": 90}}</tool_call>'
    turns = iter([call, "blue <|box_start|>(100,100),(500,500)<|box_end|>"] * 4)
    eos = tokenizer.eos_token_id
    engine = ScriptedEngine(
        lambda req: tokenizer.encode(next(turns), add_special_tokens=False) + [eos]
    )
    wf = VisionToolWorkflow(
        "tests.workflows.reward_fns.contains_answer",
        GenerationHyperparameters(),
        tokenizer,
        qwen2vl_processor,
        tools=("rotate",),
        max_turns=3,
    )
    items = load_items(tmp_path / "d.jsonl")
    out = tmp_path / "out"
    summary = asyncio.run(
        Runner(wf, engine, tokenizer, out, group_size=1).run(items, progress=False)
    )
    page = write_report(out, items, summary, processor=qwen2vl_processor).read_text()
    assert page.count("tool image 1") == 1  # one accepted item with one rotated image
    assert "image_not_found" in page  # the rejected item is listed with its reason
    assert "blue &lt;|box_start|&gt;" in page and "1.000" in page
    assert (
        page.count("<img") == 2
    )  # the item image with boxes and its tool image; none for the missing one
