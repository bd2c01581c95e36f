"""Prepared prompts keyed on content, one state per configuration, AReaL's per-item construction."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
from areal.api.cli_args import GenerationHyperparameters
from areal.infra.remote_inf_engine import RemoteInfEngine
from areal.infra.workflow_executor import check_trajectory_format
from PIL import Image

from vlrollout.rewards.caller import RewardCaller
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.workflows import VisionRLVRWorkflow
from vlrollout.workflows import episode as episode_mod

GCONFIG = GenerationHyperparameters(max_new_tokens=8)
REWARD = "tests.workflows.reward_fns.contains_answer"


def _item(image, text="How many?", item_id=1):
    return {
        "id": item_id,
        "messages": [{"role": "user", "content": f"<image>{text}"}],
        "images": [image],
        "answer": "3",
    }


def test_items_sharing_an_id_get_their_own_prompt_and_image(tokenizer, qwen2vl_processor):
    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    first = _item(Image.new("RGB", (200, 160), "red"), "Count the rockets.")
    second = _item(Image.new("RGB", (60, 60), "blue"), "Name the camera.")

    async def main():
        return [await wf.arun_episode(engine, it) for it in (first, second)]

    a, b = asyncio.run(main())
    direct = qwen2vl_processor(
        images=[second["images"][0]],
        text=[
            qwen2vl_processor.apply_chat_template(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image"},
                            {"type": "text", "text": "Name the camera."},
                        ],
                    }
                ],
                tokenize=False,
                add_generation_prompt=True,
            )
        ],
        return_tensors="pt",
    )
    grid_b = b["multi_modal_input"][0]["image_grid_thw"].tolist()
    assert grid_b == direct["image_grid_thw"].tolist()
    assert grid_b != a["multi_modal_input"][0]["image_grid_thw"].tolist()
    assert (
        b["input_ids"][0].tolist()[: direct["input_ids"].shape[1]]
        == direct["input_ids"][0].tolist()
    )


def _resolve(path, kwargs, group_size):
    """AReaL's own ``RemoteInfEngine._resolve_workflow`` (what ``submit`` calls per item)."""
    fake = SimpleNamespace(config=SimpleNamespace(agent=None), logger=logging.getLogger("t"))
    return RemoteInfEngine._resolve_workflow(fake, path, kwargs, group_size)


def test_areal_per_item_construction_keeps_prepare_once_checks_and_ledger(
    tokenizer, qwen2vl_processor, monkeypatch
):
    parity_calls, reward_builds = [], []
    real_parity = episode_mod.check_processor_parity
    monkeypatch.setattr(
        episode_mod,
        "check_processor_parity",
        lambda *a, **k: parity_calls.append(1) or real_parity(*a, **k),
    )
    real_init = RewardCaller.__init__

    def counting_init(self, *a, **k):
        reward_builds.append(1)
        real_init(self, *a, **k)

    monkeypatch.setattr(RewardCaller, "__init__", counting_init)
    kwargs = {
        "reward_fn": REWARD,
        "gconfig": GCONFIG,
        "tokenizer": tokenizer,
        "processor": qwen2vl_processor,
        "share": "run-1",
    }
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    engine.processor = qwen2vl_processor  # an engine with its own processor that would
    engine.reads_multi_modal_input = False  # process image_data itself: the parity check runs
    colours = ["red", "green", "blue", "white"]
    items = [_item(Image.new("RGB", (64, 48 + 8 * i), c), item_id=i) for i, c in enumerate(colours)]
    items.append(
        {
            "id": "bad",
            "messages": [{"role": "user", "content": "<image>x"}],
            "images": ["/nope.png"],
        }
    )
    group = 4

    async def main():
        # submit() resolves a new workflow per item, then runs its group concurrently
        tasks = [
            _resolve("vlrollout.workflows.VisionRLVRWorkflow", kwargs, group).arun_episode(
                engine, it
            )
            for it in items
        ]
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    kept = [r for r in results if r is not None]
    assert len(kept) == len(colours) and all(check_trajectory_format(r) for r in kept)
    assert all(r["input_ids"].shape[0] == group for r in kept)

    wf = VisionRLVRWorkflow(**kwargs)  # the same share name: the state the items used
    assert wf.ctx.prompts.misses == len(items)  # one preparation per group (the bad one too)
    assert len(parity_calls) == 1
    assert len(reward_builds) == 1
    ledger = wf.ledger
    assert ledger.submitted == group * len(items) == ledger.accepted + ledger.rejected
    assert ledger.accepted == group * len(colours)
    assert ledger.by_reason == {"image_not_found": group}
    assert len(wf.ctx.prompts) == 0  # every group is done: nothing held
    assert wf.ctx.prompts.peak_bytes > 0


def test_sharing_is_by_name_and_only_when_asked(tokenizer, qwen2vl_processor):
    from vlrollout.workflows.shared import release

    a = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, share="s")
    c = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, share="s")
    assert a.ledger is c.ledger and a.ctx.prompts is c.ctx.prompts
    # The default written as a YAML int is the same configuration.
    d = VisionRLVRWorkflow(
        REWARD, GCONFIG, tokenizer, qwen2vl_processor, reward_timeout_s=15, share="s"
    )
    assert d.ledger is a.ledger
    own = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    again = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    assert own.ledger is not again.ledger and own.ledger is not a.ledger
    with pytest.raises(ValueError, match="'s' belongs to another configuration"):
        VisionRLVRWorkflow(
            REWARD, GCONFIG, tokenizer, qwen2vl_processor, max_pixels=3136, share="s"
        )
    release("s")
    fresh = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, share="s")
    assert fresh.ledger is not a.ledger


def test_a_workflow_without_a_share_name_is_freed_with_it(tokenizer, qwen2vl_processor):
    import gc
    import weakref

    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    ledger = weakref.ref(wf.ledger)
    del wf
    gc.collect()
    assert ledger() is None


def test_cache_bytes_is_a_setting(tokenizer, qwen2vl_processor):
    from vlrollout.processors.cache import DEFAULT_CACHE_BYTES, set_default_cache_bytes

    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    assert wf.ctx.prompts.max_bytes == DEFAULT_CACHE_BYTES
    set_default_cache_bytes(1 << 20)
    try:
        wf2 = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, max_pixels=3136)
        assert wf2.ctx.prompts.max_bytes == 1 << 20
    finally:
        set_default_cache_bytes(DEFAULT_CACHE_BYTES)
    with pytest.raises(ValueError):
        set_default_cache_bytes(-1)


class _CropByField:
    """A plug-in whose output depends on a field other than the prompt and the media: it keeps
    the left ``crop`` pixels of each image."""

    def __init__(self, processor):
        from vlrollout.processors.auto import AutoProcessorPreprocessor

        self.inner = AutoProcessorPreprocessor(processor)
        self.processor, self.tokenizer = processor, processor.tokenizer
        self.calls = 0

    def prepare(self, data):
        self.calls += 1
        crop = data.get("crop")  # the contract's probe item has none
        images = [im.crop((0, 0, crop or im.width, im.height)) for im in data["images"]]
        return self.inner.prepare({**data, "images": images})


def test_a_plugin_reading_other_fields_prepares_each_item_from_its_own(
    tokenizer, qwen2vl_processor
):
    plugin = _CropByField(qwen2vl_processor)
    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, preprocessor=plugin)
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    probed = plugin.calls  # the contract's check at load
    image = Image.new("RGB", (224, 56), "red")
    items = [{**_item(image, item_id=k), "crop": crop} for k, crop in enumerate((224, 56))]

    async def main():
        return await asyncio.gather(*(wf.arun_episode(engine, it) for it in items))

    wide, narrow = asyncio.run(main())
    grids = [t["multi_modal_input"][0]["image_grid_thw"].tolist() for t in (wide, narrow)]
    assert grids[0] != grids[1], grids
    assert plugin.calls - probed == 2


def test_the_default_preprocessor_shares_items_that_differ_only_in_labels(
    tokenizer, qwen2vl_processor, monkeypatch
):
    from vlrollout.processors.auto import AutoProcessorPreprocessor

    calls = []
    real = AutoProcessorPreprocessor.prepare
    monkeypatch.setattr(
        AutoProcessorPreprocessor, "prepare", lambda self, d: calls.append(1) or real(self, d)
    )
    wf = VisionRLVRWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor)
    engine = ScriptedEngine([[tokenizer.eos_token_id]])
    image = Image.new("RGB", (64, 48), "red")
    items = [{**_item(image, item_id=k), "answer": str(k)} for k in range(3)]

    async def main():
        return await asyncio.gather(*(wf.arun_episode(engine, it) for it in items))

    asyncio.run(main())
    assert len(calls) == 1


@pytest.mark.parametrize(
    "build, other",
    [
        ("multi_attempt", {"max_turns": 3}),
        ("multi_attempt", {"turn_discount": 0.5}),
        ("multi_attempt", {"feedback": "Try once more."}),
        ("tools", {"tools": ["rotate"]}),
        ("tools", {"max_turns": 6}),
        ("tools", {"box_frame": "model"}),
    ],
)
def test_a_multi_turn_workflow_with_other_episode_settings_is_another_configuration(
    tokenizer, qwen2vl_processor, build, other
):
    """Two episode shapes under one name would add up in one ledger."""
    from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionToolWorkflow
    from vlrollout.workflows.shared import release

    def make(**kw):
        if build == "multi_attempt":
            kw = {"max_turns": 2, "turn_discount": 0.9, **kw}
            return VisionMultiAttemptWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, **kw)
        kw = {"tools": ["zoom_in"], "max_turns": 2, **kw}
        return VisionToolWorkflow(REWARD, GCONFIG, tokenizer, qwen2vl_processor, **kw)

    name = f"episode-settings-{build}"
    try:
        first = make(share=name)
        assert make(share=name).ledger is first.ledger
        with pytest.raises(ValueError, match="belongs to another configuration"):
            make(share=name, **other)
    finally:
        release(name)
