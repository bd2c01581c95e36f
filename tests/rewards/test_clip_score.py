"""CLIPScore / RefCLIPScore from a local CLIP folder (a tiny random CLIP built and saved in code)."""

from __future__ import annotations

import asyncio
import pickle

import pytest
import torch
from PIL import Image

from vlrollout.rewards import CLIPScoreReward
from vlrollout.rewards.registry import get_reward


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    from vlrollout.tiny.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer()
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=64,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.pad_token_id,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )
    path = tmp_path_factory.mktemp("clip")
    CLIPModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(path)
    return str(path)


def _manual(clip_dir, texts, image):
    """The paper's formula computed directly with the model (not through the reward's code)."""
    from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

    model = CLIPModel.from_pretrained(clip_dir).eval()
    tok = AutoTokenizer.from_pretrained(clip_dir)
    pixels = CLIPImageProcessor.from_pretrained(clip_dir)(images=[image], return_tensors="pt")[
        "pixel_values"
    ]
    with torch.no_grad():
        t = model.get_text_features(**tok(texts, return_tensors="pt", padding=True))
        v = model.get_image_features(pixel_values=pixels)
    t = t if torch.is_tensor(t) else t.pooler_output
    v = v if torch.is_tensor(v) else v.pooler_output
    return torch.nn.functional.cosine_similarity(t, v), torch.nn.functional.cosine_similarity(
        t[:1], t
    )


def test_clip_score_is_the_papers_formula(clip_dir):
    image = Image.new("RGB", (50, 40), (200, 20, 20))
    reward = CLIPScoreReward(clip_dir)
    value = reward("p", "a red square", [], [], images=[image])
    cos, _ = _manual(clip_dir, ["a red square"], image)
    assert value == pytest.approx(2.5 * max(float(cos[0]), 0.0), abs=1e-5)


def test_ref_clip_score_is_the_harmonic_mean(clip_dir):
    image = Image.new("RGB", (50, 40), (20, 20, 200))
    refs = ["a blue square", "one blue shape"]
    result = get_reward("ref_clip_score", model_path=clip_dir).score(
        "p", "a blue circle", [], [], images=[image], captions=refs
    )
    cos_img, cos_txt = _manual(clip_dir, ["a blue circle", *refs], image)
    clip = 2.5 * max(float(cos_img[0]), 0.0)
    ref = max(float(cos_txt[1:].max()), 0.0)
    expected = 0.0 if clip + ref == 0 else 2 * clip * ref / (clip + ref)
    assert result.value == pytest.approx(expected, abs=1e-5)
    assert result.details["clip_score"] == pytest.approx(clip, abs=1e-5)


def test_picklable_and_explicit_about_missing_images(clip_dir):
    reward = pickle.loads(pickle.dumps(CLIPScoreReward(clip_dir)))
    assert reward.needs_images
    with pytest.raises(KeyError, match="images"):
        reward("p", "a caption", [], [])
    assert (
        reward.score("p", "  ", [], [], images=[Image.new("RGB", (8, 8))]).reason == "empty_caption"
    )


def test_workflow_passes_images_only_to_rewards_that_need_them(
    clip_dir, tokenizer, qwen2vl_processor
):
    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.workflows import VisionRLVRWorkflow

    image = Image.new("RGB", (56, 56), (200, 20, 20))
    item = {
        "id": "c",
        "messages": [{"role": "user", "content": "<image>Describe."}],
        "images": [image],
    }
    out = tokenizer.encode("a red square", add_special_tokens=False) + [tokenizer.eos_token_id]
    wf = VisionRLVRWorkflow(
        CLIPScoreReward(clip_dir), GenerationHyperparameters(), tokenizer, qwen2vl_processor
    )
    traj = asyncio.run(wf.arun_episode(ScriptedEngine([out]), item))
    assert traj is not None, wf.ledger.summary()
    cos, _ = _manual(clip_dir, ["a red square"], image)
    assert traj["rewards"].item() == pytest.approx(2.5 * max(float(cos[0]), 0.0), abs=1e-5)


def test_thread_rewards_still_time_out_with_a_reason(tokenizer, qwen2vl_processor):
    from areal.api.cli_args import GenerationHyperparameters

    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.workflows import VisionRLVRWorkflow

    wf = VisionRLVRWorkflow(
        SlowThreadReward(),
        GenerationHyperparameters(),
        tokenizer,
        qwen2vl_processor,
        reward_timeout_s=0.3,
    )
    item = {
        "id": "s",
        "messages": [{"role": "user", "content": "<image>?"}],
        "images": [Image.new("RGB", (56, 56))],
    }
    assert asyncio.run(wf.arun_episode(ScriptedEngine([[tokenizer.eos_token_id]]), item)) is None
    assert wf.ledger.by_reason == {"reward_timeout": 1}


class SlowThreadReward:
    run_in_thread = True

    def __call__(self, *args, **kwargs):
        import time

        time.sleep(1.0)
        return 1.0
