"""Processor regression snapshots of every offline family on the sample images in assets/.

Golden files live in tests/snapshots/ and are regenerated only by `make snapshots` (review the
diff before committing).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from vlrollout.datasets import load_items
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.snapshots import (
    SnapshotError,
    assert_matches_snapshot,
    compare,
    load_snapshot,
    take_snapshot,
)
from vlrollout.testing.offline_processors import OFFLINE_BUILDERS, build_offline_processor

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "assets" / "samples" / "data.jsonl"
SNAPSHOTS = REPO / "tests" / "snapshots"
FAMILIES = [f for f in OFFLINE_BUILDERS if f != "smolvlm" or importlib.util.find_spec("num2words")]


def _items():
    return [i for i in load_items(DATA) if i.get("images")]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_its_snapshot(family):
    pre = AutoProcessorPreprocessor(build_offline_processor(family))
    assert_matches_snapshot(pre, _items(), SNAPSHOTS / f"{family}.json")


def test_changed_max_pixels_fails_and_names_the_field():
    from vlrollout.testing.offline_processors import build_qwen2_vl

    pre = AutoProcessorPreprocessor(build_qwen2_vl(max_pixels=56 * 56))
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    diffs = compare(expected, take_snapshot(pre, _items()))
    fields = {d.field for d in diffs}
    assert {"image_grid_thw", "image_token_count", "pixel_values.shape"} <= fields
    with pytest.raises(AssertionError, match=r"item \S+: image_grid_thw: expected"):
        assert_matches_snapshot(pre, _items(), SNAPSHOTS / "qwen2_vl.json")


def test_pixel_change_without_size_change_is_caught():
    """A brightness change keeps every size and count but moves the fingerprints."""
    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"))
    items = _items()[:1]
    from PIL import Image, ImageEnhance

    from vlrollout.processors.image_loading import load_image

    image = load_image(items[0]["images"][0]).image
    items[0]["images"] = [ImageEnhance.Brightness(image).enhance(1.05)]
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    expected["items"] = {k: v for k, v in expected["items"].items() if k == items[0]["id"]}
    diffs = compare(expected, take_snapshot(pre, items))
    fields = {d.field for d in diffs}
    assert "pixel_values[image 1]" in fields and "pixel_values.channel_mean" in fields
    assert "image_grid_thw" not in fields
    (pixel,) = [d for d in diffs if d.field == "pixel_values[image 1]"]
    assert pixel.max_abs > 0.05 and "exceeds the tolerance" in str(pixel)
    assert isinstance(image, Image.Image)


def _clis(*commands: list[str]) -> list[subprocess.CompletedProcess]:
    """``vlrollout COMMAND`` for each command, all started at once (each spends seconds importing
    on one core), and their results in order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "vlrollout.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for args in commands
    ]
    done = []
    for p in procs:
        out, err = p.communicate()
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def test_check_command_passes_on_a_clean_checkout_and_fails_on_max_pixels():
    base = [
        "check",
        "--processor",
        "offline:qwen2_vl",
        "--data",
        str(DATA),
        "--snapshot",
        str(SNAPSHOTS / "qwen2_vl.json"),
    ]
    ok, bad = _clis(base, base + ["--min-pixels", "784", "--max-pixels", "3136"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode == 1
    assert "image_grid_thw: expected" in bad.stdout


def _reworded(items):
    import json

    first = json.loads(json.dumps(items[0]))
    part = first["messages"][0]["content"][1]
    part["text"] = part["text"].replace("shapes", "squares")  # one word changed
    return [first]


def test_any_prompt_change_fails_on_the_input_ids_fingerprint():
    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"))
    items = _items()
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    expected["items"] = {items[0]["id"]: expected["items"][items[0]["id"]]}
    actual = take_snapshot(pre, _reworded(items))
    assert "input_ids_sha256" in {d.field for d in compare(expected, actual)}


def test_slow_to_fast_switch_reports_the_size_of_the_difference_and_the_settings():
    import copy

    from transformers import Qwen2VLImageProcessorFast

    from vlrollout.snapshots import Tolerances, format_report

    proc = copy.deepcopy(build_offline_processor("qwen2_vl"))
    slow = proc.image_processor
    proc.image_processor = Qwen2VLImageProcessorFast(
        size=dict(slow.size), patch_size=slow.patch_size, merge_size=slow.merge_size
    )
    expected = load_snapshot(SNAPSHOTS / "qwen2_vl.json")
    actual = take_snapshot(AutoProcessorPreprocessor(proc), _items())
    diffs = [d for d in compare(expected, actual) if d.field.startswith("pixel_values[")]
    report = format_report(diffs, expected, actual)
    if diffs:  # fast and slow may agree exactly on these images; then nothing to size
        worst = max(d.max_abs for d in diffs)
        assert "max |difference|" in report and "exceeds the tolerance 0" in report
        loose = Tolerances(pixel_max_abs=worst)
        assert not [
            d for d in compare(expected, actual, loose) if d.field.startswith("pixel_values[")
        ]
    assert "* image_processor: Qwen2VLImageProcessor | Qwen2VLImageProcessorFast" in report


def test_snapshot_commands_explain_a_bad_item_and_a_missing_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "broken-7", "messages": [{"role": "user", "content": "<image>Q"}], '
        '"images": ["does/not/exist.png"]}\n'
    )
    missing = tmp_path / "nope.json"
    processor = ["--processor", "offline:qwen2_vl"]
    *bad_item, no_file = _clis(
        ["snapshot", "--out", str(tmp_path / "s.json"), *processor, "--data", str(bad)],
        ["check", "--snapshot", str(SNAPSHOTS / "qwen2_vl.json"), *processor, "--data", str(bad)],
        ["check", *processor, "--data", str(DATA), "--snapshot", str(missing)],
    )
    for res in bad_item:
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert "item broken-7: image_not_found" in res.stderr and "fix the item" in res.stderr
    assert no_file.returncode == 2 and "Traceback" not in no_file.stderr
    assert (
        f"snapshot file {missing} does not exist" in no_file.stderr
        and "vlrollout snapshot" in no_file.stderr
    )


VIDEOS = REPO / "assets" / "samples" / "video.jsonl"


def _video_fields(diffs) -> set[str]:
    return {d.field for d in diffs}


def test_video_items_are_recorded_and_changed_frame_sampling_or_size_fails_the_check():
    items = list(load_items(VIDEOS))
    processor = build_offline_processor("qwen2_vl")
    expected = take_snapshot(AutoProcessorPreprocessor(processor), items)
    assert set(expected["items"]) == {item["id"] for item in items}
    assert compare(expected, take_snapshot(AutoProcessorPreprocessor(processor), items)) == []

    fewer_frames = AutoProcessorPreprocessor(processor, video_fps=1.0)
    fields = _video_fields(compare(expected, take_snapshot(fewer_frames, items)))
    assert {"video_frames", "video_grid_thw", "pixel_values_videos.shape"} <= fields

    smaller = AutoProcessorPreprocessor(
        processor, video_min_pixels=28 * 28, video_max_pixels=28 * 28 * 2
    )
    fields = _video_fields(compare(expected, take_snapshot(smaller, items)))
    assert {"video_grid_thw", "pixel_values_videos.shape"} <= fields
    assert "video_frames" not in fields


def test_a_pixel_change_of_a_video_is_caught_at_the_same_size():
    items = list(load_items(VIDEOS))[:1]
    processor = build_offline_processor("qwen2_vl")
    expected = take_snapshot(AutoProcessorPreprocessor(processor), items)
    processor.video_processor.image_mean = [m + 0.05 for m in processor.video_processor.image_mean]
    diffs = compare(expected, take_snapshot(AutoProcessorPreprocessor(processor), items))
    assert any(d.field.startswith("pixel_values_videos[video 1]") for d in diffs), diffs


def test_two_items_with_one_id_are_refused_naming_the_id():
    first, second = _items()[:2]
    with pytest.raises(SnapshotError, match=r"id 'dup-1'.*items 1 and 2"):
        take_snapshot(
            AutoProcessorPreprocessor(build_offline_processor("qwen2_vl")),
            [{**first, "id": "dup-1"}, {**second, "id": "dup-1"}],
        )


def test_snapshot_commands_record_every_item_and_refuse_no_items_or_bad_pixel_flags(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    out = tmp_path / "v.json"
    processor = ["--processor", "offline:qwen2_vl"]
    videos, nothing, zero, negative = _clis(
        ["snapshot", *processor, "--data", str(VIDEOS), "--out", str(out)],
        ["snapshot", *processor, "--data", str(empty), "--out", str(tmp_path / "e.json")],
        ["check", *processor, "--data", str(DATA), "--snapshot", str(SNAPSHOTS / "qwen2_vl.json"),
         "--max-pixels", "0"],
        ["snapshot", *processor, "--data", str(DATA), "--out", str(tmp_path / "n.json"),
         "--min-pixels", "-5"],
    )  # fmt: skip
    assert videos.returncode == 0, videos.stderr
    assert len(load_snapshot(out)["items"]) == len(list(load_items(VIDEOS)))
    assert nothing.returncode == 2 and "Traceback" not in nothing.stderr
    assert f"{empty} has no items" in nothing.stderr
    assert not (tmp_path / "e.json").exists()
    for res, flag in ((zero, "--max-pixels"), (negative, "--min-pixels")):
        assert res.returncode == 2 and f"argument {flag}: must be at least 1" in res.stderr
    assert not (tmp_path / "n.json").exists()


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_vl_moe"])
def test_a_family_that_shares_another_ones_processor_snapshots_offline(family, tmp_path):
    """Qwen3.5 and Qwen3-VL-MoE checkpoints ship Qwen3-VL's processor; ``offline:FAMILY`` builds
    it for them as it does for the families it names."""
    out = tmp_path / "snap.json"
    (res,) = _clis(
        ["snapshot", "--out", str(out), "--processor", f"offline:{family}", "--data", str(DATA)]
    )
    assert res.returncode == 0, res.stderr
    assert build_offline_processor(family) is build_offline_processor("qwen3_vl")


def test_pixel_limits_the_processor_refuses_are_a_usage_error(capsys):
    """Limits each valid alone but not together (--max-pixels below the processor's
    min_pixels) are the caller's error: one line, exit 2, not an internal error's exit 1."""
    from vlrollout.cli import main

    args = ["check", "--processor", "offline:qwen2_vl", "--data", str(DATA)]
    code = main([*args, "--snapshot", str(SNAPSHOTS / "qwen2_vl.json"), "--max-pixels", "3000"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("vlrollout check: max_pixels=3000")


def _noise_item(pixels) -> dict:
    from PIL import Image

    content = [{"role": "user", "content": "<image>What is this?"}]
    return {"id": "noise", "messages": content, "images": [Image.fromarray(pixels)]}


@pytest.fixture(scope="module")
def small_patch_change():
    """A noise picture and the same picture with one 6x6 block set to white: a change between
    the evenly spaced pixel samples a snapshot keeps."""
    import numpy as np

    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), max_pixels=313600)
    pixels = np.random.default_rng(8817).integers(0, 256, (392, 532, 3), dtype=np.uint8)
    changed = pixels.copy()
    changed[211:217, 37:43] = 255
    before = take_snapshot(pre, [_noise_item(pixels)])
    after = take_snapshot(pre, [_noise_item(changed)])
    return before, after


def test_a_change_between_the_pixel_samples_fails_the_check(small_patch_change):
    import copy

    before, after = copy.deepcopy(small_patch_change)
    diffs = compare(before, after)
    assert diffs and all(d.item == "noise" for d in diffs)
    assert {d.field for d in diffs} & {"pixel_values[image 1]", "pixel_values.hash"}
    for snapshot in (before, after):  # as written before block means were kept
        del snapshot["items"]["noise"]["pixel_values"]["blocks"]
    assert [d.field for d in compare(before, after)] == ["pixel_values.hash"]


def test_a_pixel_tolerance_still_sees_a_change_between_the_samples(small_patch_change):
    """With a tolerance the quantised hash cannot judge (tolerated noise moves it): the block
    means of the pixel values see a change the samples miss, sized at least as large."""
    from vlrollout.snapshots import Tolerances

    before, after = small_patch_change
    diffs = compare(before, after, Tolerances(pixel_max_abs=0.05))
    assert [d.field for d in diffs] == ["pixel_values[image 1]"]
    assert diffs[0].max_abs > 0.05
    assert compare(before, after, Tolerances(pixel_max_abs=diffs[0].max_abs)) == []


@pytest.mark.parametrize(
    "lines, reason",
    [
        (['{"id": "7", "messages": "hi"}', '{"id": 7, "messages": "hi again"}'], "duplicate_id"),
        (['{"id": "p", "messages": "hi"}', '{"id": "q", "messages": "hi",}'], "bad_json"),
    ],
    ids=["duplicate id", "bad json"],
)
def test_a_line_the_reader_refused_is_reported_with_the_readers_reason(tmp_path, lines, reason):
    """Not as the placeholder item's missing 'messages'."""
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n")
    pre = AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"))
    with pytest.raises(SnapshotError) as info:
        take_snapshot(pre, load_items(data))
    message = str(info.value)
    assert f": {reason}: " in message and "line-2" in message and "messages" not in message


def test_the_settings_a_snapshot_records_name_video_sampling_and_the_resample_filter():
    """A check that fails shows these beside the current ones: a changed ``video_fps`` or
    resampling filter is then named, not only its effect on the pixels."""
    from vlrollout.processors import AutoProcessorPreprocessor
    from vlrollout.snapshots import preprocessor_settings
    from vlrollout.testing.offline_processors import build_offline_processor

    processor = build_offline_processor("qwen3_vl")
    plain = preprocessor_settings(AutoProcessorPreprocessor(processor))
    sampled = preprocessor_settings(AutoProcessorPreprocessor(processor, video_fps=3.0))
    assert "image_processor.resample" in plain
    assert plain["video_sampling.fps"] != sampled["video_sampling.fps"] == 3.0


class _DropsImages:
    """A plug-in that keeps only an item's first image: its contract forbids it."""

    def __init__(self, processor):
        self.inner = AutoProcessorPreprocessor(processor)
        self.processor, self.tokenizer = self.inner.processor, self.inner.tokenizer

    def prepare(self, data):
        if len(data.get("images") or []) > 1:
            data = {**data, "images": data["images"][:1], "messages": "<image>Q"}
        return self.inner.prepare(data)


def test_a_snapshot_of_a_plug_in_that_drops_an_image_is_refused_not_recorded():
    """Recorded, the broken output would become the regression test's truth."""
    (item,) = _items()[:1]
    two = {**item, "id": "two", "messages": "<image><image>Q", "images": item["images"] * 2}
    with pytest.raises(SnapshotError, match="item two.*image"):
        take_snapshot(_DropsImages(build_offline_processor("qwen2_vl")), [two])
