"""get_reward: built-ins, import paths, clear errors."""

import functools
import subprocess
import sys

import pytest

from vlrollout.registry import UnknownNameError
from vlrollout.rewards.answer import CountReward, clevr_count_reward
from vlrollout.rewards.caption import CaptionReward
from vlrollout.rewards.grounding import GroundingReward
from vlrollout.rewards.registry import BUILTINS, get_reward
from vlrollout.rewards.temporal import TemporalIoUReward


def test_builtins_build_the_right_objects():
    assert isinstance(get_reward("count", tolerance=2), CountReward)
    g = get_reward("giou", family="qwen3_vl")
    assert isinstance(g, GroundingReward) and (g.metric, g.family) == ("giou", "qwen3_vl")
    c = get_reward("cider_d", corpus=[["a dog"], ["a cat"]])
    assert isinstance(c, CaptionReward) and c.cider.num_docs == 2
    assert get_reward("clevr_count") is clevr_count_reward
    t = get_reward("temporal_iou", unit="frames")
    assert isinstance(t, TemporalIoUReward) and (t.metric, t.unit) == ("iou", "frames")
    assert get_reward("temporal_acc@iou", iou_threshold=0.7).metric == "acc"
    video = get_reward("video_task", metric="acc")
    assert video.rewards["temporal"].metric == "acc"
    assert video("p", "[1, 2]", [], [], task="temporal", segments=[1, 2]) == 1.0
    assert video("p", "3", [], [], task="video_count", answer=3) == 1.0
    for name in ("bleu4", "rouge_l", "iou", "box_f1", "point_in_box", "choice", "numeric",
                 "math", "format_think_answer"):  # fmt: skip
        assert callable(get_reward(name)), name


def test_import_paths_both_spellings():
    assert get_reward("vlrollout.rewards.answer:clevr_count_reward") is clevr_count_reward
    assert get_reward("vlrollout.rewards.answer.clevr_count_reward") is clevr_count_reward
    r = get_reward("vlrollout.rewards.answer:CountReward", tolerance=3)
    assert isinstance(r, CountReward) and r.tolerance == 3
    bound = get_reward("vlrollout.rewards.answer:clevr_count_reward", answer="3")
    assert isinstance(bound, functools.partial) and bound("p", "[3]", [], []) == 1.0


def test_errors_name_the_path():
    with pytest.raises(UnknownNameError, match="unknown reward 'iouu'"):
        get_reward("iouu")
    with pytest.raises(ImportError, match="no_such_pkg.mod:fn"):
        get_reward("no_such_pkg.mod:fn")
    with pytest.raises(AttributeError, match="vlrollout.rewards.answer:nope"):
        get_reward("vlrollout.rewards.answer:nope")
    with pytest.raises(TypeError, match="non-callable"):
        get_reward("vlrollout.rewards.answer:WORD_NUMBERS")


def test_builtin_names_cover_the_documented_set():
    for name in ("cider_d", "bleu4", "rouge_l", "iou", "giou", "box_f1", "point_in_box", "count",
                 "choice", "numeric", "math", "format_think_answer", "temporal_iou",
                 "temporal_acc@iou"):  # fmt: skip
        assert name in BUILTINS


def test_package_import_is_cheap():
    code = (
        "import sys, vlrollout.rewards as r; r.get_reward; r.WeightedSum; r.TemporalIoUReward; "
        "print(sorted(m for m in ('torch', 'torchvision', 'math_verify', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_exports_stay_what_they_name_after_their_modules_load():
    """A submodule named like an export replaces it on the package once anything imports the
    submodule (``from vlrollout.rewards import ptb_tokenize`` would give the module), so every
    export is the object its module defines, whichever modules loaded first."""
    code = (
        "import importlib, pkgutil, types, vlrollout.rewards as r\n"
        "for m in pkgutil.iter_modules(r.__path__):\n"
        "    importlib.import_module(f'vlrollout.rewards.{m.name}')\n"
        "print(sorted(n for n in r.__all__ if isinstance(getattr(r, n), types.ModuleType)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
