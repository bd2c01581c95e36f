"""``vlrollout run``'s frame sampling keys reach the workflow's preprocessor; bad values are refused
naming the key; keys left out keep the family's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrollout.errors import ConfigError
from vlrollout.run.config import RunConfig
from vlrollout.run.main import build_workflow

REPO = Path(__file__).resolve().parents[2]
REWARD = "tests.workflows.test_video_workflows.never"


def _sampling(tokenizer, processor, *settings):
    cfg = RunConfig.load(dotlist=list(settings))
    return build_workflow(cfg, tokenizer, processor, REWARD).ctx.preprocessor.video_sampling


def test_frame_settings_reach_the_preprocessor(tokenizer, qwen2vl_processor):
    default = _sampling(tokenizer, qwen2vl_processor)
    s = _sampling(
        tokenizer,
        qwen2vl_processor,
        "video_fps=1.5",
        "video_max_frames=6",
        "video_min_pixels=3136",
        "video_max_pixels=12544",
    )
    assert (s.fps, s.max_frames, s.min_pixels, s.max_pixels) == (1.5, 6, 3136, 12544)
    assert (default.fps, default.max_frames) != (1.5, 6) and default.min_pixels is None
    assert _sampling(tokenizer, qwen2vl_processor, "video_max_frames=6").fps == default.fps


@pytest.mark.parametrize(
    "setting", ["video_fps=nan", "video_fps=0", "video_max_frames=0", "video_max_pixels=-1"]
)
def test_a_bad_frame_setting_names_its_key(setting):
    with pytest.raises(ConfigError, match=f"{setting.split('=')[0]} must be a positive number"):
        RunConfig.load(dotlist=[setting])


def test_the_video_example_loads_and_names_the_sample_videos():
    cfg = RunConfig.load(REPO / "examples" / "run_video.yaml")
    assert (cfg.video_fps, cfg.video_max_frames, cfg.video_max_pixels) == (2.0, 8, 3136)
    assert (REPO / cfg.data).is_file() and (REPO / cfg.engine.model / "config.json").is_file()
