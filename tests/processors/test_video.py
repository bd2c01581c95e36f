"""Video items through the auto preprocessor, against the transformers processor called directly.

Clips are written here: MPEG-4 with PyAV (a red square moving right on black, 32x32) and GIF with
PIL. The honest reference for each family is its own processor called on the same frames (decoded
independently, sampled by the documented rule) with the same metadata.
"""

from __future__ import annotations

import base64
import io
import re
import struct
import warnings
from fractions import Fraction

import av
import numpy as np
import pytest
import torch
from PIL import Image

from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError
from vlrollout.processors.video_loading import LoadedVideo, load_video
from vlrollout.processors.video_sampling import VideoSampling
from vlrollout.testing.offline_processors import build_offline_processor

SIZE = 32
QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
FAMILIES = (*QWEN, "llava_onevision")
SMALL = {"video_min_pixels": 32 * 32, "video_max_pixels": 64 * 64}


def square_frames(frames: int, size: int = SIZE) -> list[np.ndarray]:
    """RGB frames of a red square moving left to right."""
    out = []
    for k in range(frames):
        pixels = np.zeros((size, size, 3), np.uint8)
        x = k * (size - 8) // max(1, frames - 1)
        pixels[12:20, x : x + 8] = (255, 0, 0)
        out.append(pixels)
    return out


def mp4_bytes(frames: int = 8, fps: int = 4, size: int = SIZE) -> bytes:
    """An MPEG-4 clip of :func:`square_frames` at ``fps``."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for pixels in square_frames(frames, size):
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def gif_bytes(frames: int = 5, ms: int = 250) -> bytes:
    images = [Image.fromarray(f) for f in square_frames(frames)]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=ms, loop=0)
    return buf.getvalue()


def decoded(raw: bytes) -> list[np.ndarray]:
    """Every frame of ``raw``, decoded here independently of the code under test."""
    with av.open(io.BytesIO(raw)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def processor(family: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = build_offline_processor(family)
    if family == "llava_onevision" and "'video'" not in proc.chat_template:
        # The hub template renders a video part as "<video>\n", like an image part.
        proc.chat_template = proc.chat_template.replace(
            "{% elif part['type'] == 'text' %}",
            "{% elif part['type'] == 'video' %}<video>\n{% elif part['type'] == 'text' %}",
        )
    return proc


def preprocessor(family: str, **kwargs):
    proc = processor(family)
    extra = SMALL if family in QWEN else {}
    return proc, AutoProcessorPreprocessor(proc, **{**extra, **kwargs})


def item(*videos, text="<video>What does the red square do?", **fields):
    return {
        "id": "v1",
        "messages": [{"role": "user", "content": text}],
        "videos": list(videos),
        **fields,
    }


def reference(proc, family, prompt_text, frames, metadata, images=None):
    kwargs = {"do_sample_frames": False, "video_metadata": metadata}
    if family in QWEN:
        kwargs["size"] = {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}
    extra = {"images": [images]} if images else {}
    return proc(
        text=[prompt_text], videos=frames, videos_kwargs=kwargs, return_tensors="pt", **extra
    )


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("clips") / "clip.mp4"
    path.write_bytes(mp4_bytes())
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_prepared_video_equals_the_processor_on_the_same_frames(family, clip_path):
    proc, pre = preprocessor(family)
    prepared = pre.prepare(item(str(clip_path)))
    clip = prepared.videos[0]
    # 8 frames at 4 fps, sampled at the default 2 fps: every second frame, from the first.
    assert clip.frame_indices == [0, 2, 4, 6]
    assert clip.timestamps_s == [0.0, 0.5, 1.0, 1.5]
    assert (clip.fps, clip.source_fps, clip.total_frames) == (2.0, 4.0, 8)
    frames = np.stack([decoded(clip_path.read_bytes())[k] for k in (0, 2, 4, 6)])
    metadata = [
        {
            "total_num_frames": 8,
            "fps": 4.0,
            "frames_indices": [0, 2, 4, 6],
            "width": SIZE,
            "height": SIZE,
            "duration": 2.0,
        }
    ]
    ref = reference(proc, family, prepared.prompt_text, [frames], metadata)
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    video_keys = {k for k in ref if "video" in k or k == "second_per_grid_ts"}
    assert video_keys and video_keys <= prepared.multi_modal_input.keys()
    for key in video_keys:
        assert torch.equal(prepared.multi_modal_input[key], ref[key]), key
    n_tokens = prepared.input_ids.count(proc.video_token_id)
    if family in QWEN:
        grid = prepared.multi_modal_input["video_grid_thw"]
        assert n_tokens == int(grid.prod()) // proc.video_processor.merge_size**2
        assert grid[0, 0] == 2  # 4 frames, 2 per temporal patch
        assert set(prepared.mm_token_type_ids) == {0, 2}
    else:
        assert prepared.multi_modal_input["pixel_values_videos"].shape[1] == 4
    assert n_tokens > 0 and prepared.video_token_id == proc.video_token_id
    if family == "qwen2_5_vl":  # temporal_patch_size / sampled fps
        assert prepared.multi_modal_input["second_per_grid_ts"].tolist() == [2 / 2.0]
    if family == "qwen3_vl":  # the prompt states the sampled frames' times (pairs averaged)
        text = proc.tokenizer.decode(prepared.input_ids)
        assert "<0.2 seconds>" in text and "<1.2 seconds>" in text


def test_sources_bytes_data_url_and_frames_agree(clip_path):
    _, pre = preprocessor("qwen2_vl")
    raw = clip_path.read_bytes()
    by_path = pre.prepare(item(str(clip_path)))
    by_bytes = pre.prepare(item(raw))
    by_url = pre.prepare(item("data:video/mp4;base64," + base64.b64encode(raw).decode()))
    for other in (by_bytes, by_url):
        assert other.input_ids == by_path.input_ids
        assert torch.equal(
            other.multi_modal_input["pixel_values_videos"],
            by_path.multi_modal_input["pixel_values_videos"],
        )
    assert by_bytes.videos[0].source_kind == "bytes"
    # a list of frames is taken as sampled at the sampling fps: all four kept
    frames = [Image.fromarray(f) for f in decoded(raw)[::2]]
    by_frames = pre.prepare(item(frames))
    assert by_frames.videos[0].frame_indices == [0, 1, 2, 3]
    assert by_frames.videos[0].timestamps_s == [0.0, 0.5, 1.0, 1.5]
    assert torch.equal(
        by_frames.multi_modal_input["pixel_values_videos"],
        by_path.multi_modal_input["pixel_values_videos"],
    )


def test_gif_decodes_with_its_frame_rate():
    _, pre = preprocessor("qwen2_vl", video_fps=4.0)
    prepared = pre.prepare(item(gif_bytes(frames=5, ms=250)))
    clip = prepared.videos[0]
    assert clip.source_fps == 4.0 and clip.total_frames == 5
    assert clip.frame_indices == [0, 1, 2, 3]  # 5 frames at 4 fps: rounded down to pairs
    assert len(clip.thumbnails) == 4 and clip.thumbnails[0].height == 56


@pytest.mark.parametrize(
    ("kwargs", "indices"),
    [
        ({}, [0, 2, 4, 6]),
        ({"video_fps": 4.0}, list(range(8))),
        ({"video_fps": 1.0}, [0, 2, 4, 6]),  # 2 frames, raised to Qwen's min_frames=4
        ({"video_max_frames": 2}, [0, 4]),
    ],
)
def test_sampling_settings(kwargs, indices, clip_path):
    _, pre = preprocessor("qwen2_5_vl", **kwargs)
    prepared = pre.prepare(item(str(clip_path)))
    assert prepared.videos[0].frame_indices == indices
    assert prepared.multi_modal_input["second_per_grid_ts"].tolist() == [2 / prepared.videos[0].fps]


def test_family_defaults_come_from_the_video_processor():
    _, qwen3 = preprocessor("qwen3_vl")
    assert qwen3.video_sampling.fps == 2 and qwen3.video_sampling.max_frames == 768
    assert qwen3.video_sampling.min_frames == 4 and qwen3.video_sampling.frame_factor == 2
    _, llava = preprocessor("llava_onevision")
    assert (llava.video_sampling.fps, llava.video_sampling.frame_factor) == (2.0, 1)
    with pytest.raises(ValueError, match="fixed size"):
        AutoProcessorPreprocessor(processor("llava_onevision"), video_max_pixels=64 * 64)


def test_sampling_rule_edges():
    rule = VideoSampling(fps=2.0, max_frames=6, min_frames=4, frame_factor=2)
    assert rule.indices(1, 30.0) == [0]  # a one-frame clip: that frame
    assert rule.indices(3, 30.0) == [0, 1]  # below min_frames: whole pairs
    assert rule.count(3000, 30.0) == 6  # capped
    assert rule.count(10, 30.0) == 4  # raised to min_frames


def test_image_and_video_in_one_item(clip_path):
    proc, pre = preprocessor("qwen2_5_vl")
    image = Image.new("RGB", (56, 56), "blue")
    data = item(str(clip_path), text="<image><video>Same colour?", images=[image])
    prepared = pre.prepare(data)
    assert {"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"} <= set(
        prepared.multi_modal_input
    )
    assert set(prepared.mm_token_type_ids) == {0, 1, 2}
    assert prepared.num_images == 1 and prepared.num_videos == 1
    assert prepared.video_frame_images == 0  # Qwen spells a video with its own token
    frames = np.stack([decoded(clip_path.read_bytes())[k] for k in (0, 2, 4, 6)])
    metadata = [{"total_num_frames": 8, "fps": 4.0, "frames_indices": [0, 2, 4, 6]}]
    ref = reference(proc, "qwen2_5_vl", prepared.prompt_text, [frames], metadata, [image])
    assert prepared.input_ids == ref["input_ids"][0].tolist()
    assert torch.equal(prepared.multi_modal_input["pixel_values"], ref["pixel_values"])


@pytest.mark.parametrize(
    ("source", "kwargs", "reason"),
    [
        ("missing/clip.mp4", {}, "video_not_found"),
        ("https://example.com/clip.mp4", {}, "video_source"),
        (b"not a video at all" * 20, {}, "video_decode"),
        ("MP4", {"max_video_frames": 3}, "video_too_large"),
        ("MP4", {"max_video_frame_pixels": 16 * 16}, "video_too_large"),
        ("MP4", {"max_video_bytes": 100}, "video_too_large"),
        ([], {}, "video_empty"),
        (Image.new("RGB", (8, 8)), {}, "video_source"),
    ],
)
def test_bad_videos_name_the_item_video_and_reason(source, kwargs, reason):
    _, pre = preprocessor("qwen2_vl", **kwargs)
    source = mp4_bytes() if source == "MP4" else source
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(source))
    assert e.value.reason == reason
    assert e.value.item == "item v1, video 1"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "TIFF"])
def test_a_still_image_under_a_video_name_is_no_video(tmp_path, fmt):
    """FFmpeg opens a still image as a one-frame clip of made-up timing (25 fps, 0.04 s), so a
    picture given as a video would run, every temporal label out of its reach."""
    path = tmp_path / "clip.mp4"
    Image.new("RGB", (16, 16), "red").save(path, format=fmt)
    _, pre = preprocessor("qwen2_vl")
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(str(path)))
    assert e.value.reason == "video_decode"
    assert f"a {fmt} image, not a video; give it in images" in e.value.detail


def _animated(fmt: str, **options) -> bytes:
    images = [Image.fromarray(f) for f in square_frames(8)]
    buf = io.BytesIO()
    images[0].save(
        buf, format=fmt, save_all=True, append_images=images[1:], duration=250, **options
    )
    return buf.getvalue()


def test_an_animated_png_is_a_video():
    """FFmpeg decodes APNG frame by frame; as a still PNG it was refused, and given in images
    instead it kept only its first frame."""
    video = load_video(_animated("PNG"), "v", VideoSampling(fps=4.0, max_frames=8))
    assert video.frames.shape[0] == 8 and video.clip.timestamps_s[-1] == pytest.approx(1.75)


def test_an_animated_webp_ffmpeg_cannot_decode_is_a_decode_error():
    """FFmpeg reads no frame size from it: not a video with no frame (video_empty)."""
    with pytest.raises(PreprocessError) as e:
        load_video(_animated("WEBP", lossless=True), "v", VideoSampling(fps=4.0))
    assert e.value.reason == "video_decode" and "animated WebP" in e.value.detail


def test_frames_of_different_sizes_are_refused():
    _, pre = preprocessor("qwen2_vl")
    frames = [Image.new("RGB", (32, 32)), Image.new("RGB", (40, 32))]
    with pytest.raises(PreprocessError, match="must be one size"):
        pre.prepare(item(frames))


def test_llava_onevision_videos_of_different_lengths_are_a_clear_error():
    _, pre = preprocessor("llava_onevision")
    with pytest.raises(PreprocessError, match=r"one number of sampled frames \(got \[4, 6\]\)"):
        pre.prepare(item(mp4_bytes(), mp4_bytes(frames=12), text="<video><video>Same?"))


def test_a_frame_list_is_kept_whole_and_the_processor_pads_it():
    proc, pre = preprocessor("qwen2_vl")
    frames = [Image.fromarray(f) for f in square_frames(5)]
    prepared = pre.prepare(item(frames))
    assert prepared.videos[0].frame_indices == [0, 1, 2, 3, 4]
    assert prepared.multi_modal_input["video_grid_thw"][0, 0] == 3  # 5 frames padded to 6


def test_sampled_frames_have_a_total_pixel_cap():
    from vlrollout.processors.video_loading import check_sampled_pixels

    check_sampled_pixels(4, (32, 32), "v", cap=4 * 32 * 32)
    with pytest.raises(PreprocessError, match="video_too_large"):
        check_sampled_pixels(5, (32, 32), "v", cap=4 * 32 * 32)


@pytest.mark.parametrize(
    ("source", "named", "unnamed"),
    [
        ("data/images/clip.mp4", "data/images/clip.mp4", None),
        ("/srv/image/clip.mp4", "/srv/image/clip.mp4", None),
        (7, "a list of frames", "PIL video"),
    ],
)
def test_a_bad_video_source_is_reported_as_given(source, named, unnamed):
    """A video's errors speak of videos, but the path the user wrote stays as written."""
    _, pre = preprocessor("qwen2_vl")
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(source))
    assert e.value.reason.startswith("video_") and named in e.value.detail, e.value.detail
    assert unnamed is None or unnamed not in e.value.detail


@pytest.mark.parametrize("family", ["qwen2_vl", "llava_onevision", "glm4v", "internvl"])
@pytest.mark.parametrize("height", [1, 3])
def test_frames_one_or_three_pixels_tall_keep_their_colours(family, height):
    """transformers' video processors guess the channel axis from the frames' shape, and a
    (T, 3, W, 3) clip looked channels-first: its pixels were read across the colour axis. A
    one-colour clip keeps exactly the values a clip of ordinary frames of that colour gets."""
    _, pre = preprocessor(family)

    def values(h: int) -> set[float]:
        frames = [Image.new("RGB", (64, h), (255, 0, 0))] * 4
        mm = pre.prepare(item(frames)).multi_modal_input
        pixels = mm.get("pixel_values_videos", mm.get("pixel_values"))  # InternVL: as images
        return {round(v, 3) for v in pixels.float().unique().tolist()}

    assert values(height) == values(8)


def _ts_segment(width: int, height: int, frames: int = 4, first: int = 0) -> bytes:
    """An MPEG-TS segment of ``frames`` grey frames from frame ``first`` on; segments join by
    concatenation (HLS), their timestamps running on."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mpegts") as out:
        stream = out.add_stream("mpeg2video", rate=4)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(frames):
            pixels = np.full((height, width, 3), 60 * k, np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = first + k, Fraction(1, 4)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_a_video_that_changes_frame_size_mid_stream_is_refused_naming_it():
    _, pre = preprocessor("qwen2_vl")
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(_ts_segment(64, 64) + _ts_segment(96, 64, first=4)))
    assert (e.value.item, e.value.reason) == ("item v1, video 1", "video_frames")
    assert "64x64" in e.value.detail and "96x64" in e.value.detail


def test_a_frame_list_over_the_pixel_cap_is_refused_after_its_first_frame(tmp_path):
    """The cap on a clip's sampled pixels holds before the frames are decoded: frames of one
    clip are one size, so the first frame's size times their number is the clip's (the later
    frames here do not exist, so loading any of them would fail otherwise)."""
    big = tmp_path / "big.png"
    Image.new("RGB", (4096, 4096), "white").save(big)
    frames = [str(big)] + [str(tmp_path / f"missing-{k}.png") for k in range(19)]
    _, pre = preprocessor("qwen2_vl")
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(frames))
    assert e.value.reason == "video_too_large", e.value


def test_a_frame_of_another_size_is_named():
    _, pre = preprocessor("qwen2_vl")
    frames = [Image.new("RGB", (32, 32))] * 2 + [Image.new("RGB", (40, 32))]
    with pytest.raises(PreprocessError, match=r"frame 3 is 40x32, frame 1 32x32"):
        pre.prepare(item(frames))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"video_min_pixels": 100_000, "video_max_pixels": 1000},
            "video min_pixels=100000 exceeds max_pixels=1000; swap or fix them",
        ),
        ({"video_max_pixels": 10}, "video max_pixels=10 is below the processor's own min_pixels"),
    ],
)
def test_a_video_pixel_budget_that_is_upside_down_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        AutoProcessorPreprocessor(processor("qwen2_vl"), **kwargs)


VFR_MS = [0, 33, 66, 100, 1100, 2100, 3100, 3133, 3166, 3200, 3233, 3266]
"""Presentation times of a variable-rate clip: a burst, three one-second gaps, a burst (a phone
clip of a still scene does this)."""


def _vfr_mp4() -> bytes:
    """An MPEG-4 clip whose frame k, shown at ``VFR_MS[k]``, is grey level ``20 * k``."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=30)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        for k, ms in enumerate(VFR_MS):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 20 * k, np.uint8), "rgb24")
            frame.pts, frame.time_base = ms, Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_a_variable_rate_clip_shows_at_each_time_the_frame_a_player_shows():
    """Frames are sampled on the clip's time line: at each sampled time the model gets the frame
    on screen then (the last one shown at or before it), and that time is the one rewards get."""
    from vlrollout.processors.video_sampling import VideoSampling

    video = load_video(_vfr_mp4(), "v", VideoSampling(fps=2.0, max_frames=8, frame_factor=2))
    times = video.clip.timestamps_s
    assert times == sorted(times) and times[-1] <= VFR_MS[-1] / 1000
    assert times[-1] - times[0] > 2.0  # spread over the clip, not over its first frames
    for t, frame in zip(times, video.frames, strict=True):
        shown = max(k for k, ms in enumerate(VFR_MS) if ms <= t * 1000 + 5)  # 5 ms: rounding
        assert abs(float(frame.mean()) - 20 * shown) < 6, (t, shown, float(frame.mean()))


def _rotated_mp4(degrees_clockwise: int) -> bytes:
    """A 64x32 MPEG-4 clip, red on its left half and blue on its right, whose track header
    carries the display matrix a phone writes when it is held rotated."""
    buf = io.BytesIO()
    pixels = np.zeros((32, 64, 3), np.uint8)
    pixels[:, :32] = (255, 0, 0)
    pixels[:, 32:] = (0, 0, 255)
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width, stream.height, stream.pix_fmt = 64, 32, "yuv420p"
        for _ in range(4):
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    raw = bytearray(buf.getvalue())
    at = raw.find(b"tkhd") + 4
    at += 4 + (8 + 8 + 4 + 4 + 8 if raw[at] == 1 else 4 * 5) + 8 + 2 + 2 + 2 + 2
    one = 0x10000
    matrix = {90: [0, one, 0, -one, 0, 0], 270: [0, -one, 0, one, 0, 0]}[degrees_clockwise]
    raw[at : at + 36] = struct.pack(">9i", *matrix, 0, 0, 0x40000000)
    return bytes(raw)


@pytest.mark.parametrize(("degrees", "top"), [(90, (255, 0, 0)), (270, (0, 0, 255))])
def test_a_phone_clip_is_sampled_upright_as_a_player_shows_it(degrees, top):
    """The display matrix turns the coded 64x32 frames into a 32x64 picture, as EXIF
    orientation turns images: frames and their size are the upright ones."""
    clip = load_video(_rotated_mp4(degrees), "item 0, video 1", VideoSampling(fps=2.0))
    frames = clip.frames
    assert frames.shape[1:3] == (64, 32)  # height, width
    assert tuple(int(v) for v in frames[0, 4, 16]) == pytest.approx(top, abs=40)


@pytest.mark.parametrize("family", [*FAMILIES, "glm4v", "internvl"])
def test_large_noisy_frames_equal_the_processor_on_the_same_frames(family):
    """Frames go to the video processor as a channels-first view of the decoded array (no copy);
    on frames large enough for the resize to average many pixels, the tensors are the processor's
    own, bit for bit, on the same frames given as channels-last arrays."""
    proc, pre = preprocessor(family)
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, (210, 340, 3), np.uint8) for _ in range(4)]
    prepared = pre.prepare(item([Image.fromarray(f) for f in frames]))
    metadata = LoadedVideo(np.stack(frames), prepared.videos[0]).metadata()
    ref = reference(proc, family, prepared.prompt_text, [np.stack(frames)], [metadata])
    keys = [k for k, v in ref.items() if isinstance(v, torch.Tensor) and "ids" not in k]
    assert "pixel_values_videos" in keys or "pixel_values" in keys  # InternVL: frames as images
    for key in (k for k in keys if k != "attention_mask"):
        assert torch.equal(prepared.multi_modal_input[key], ref[key]), key


@pytest.mark.parametrize("as_frames", [False, True])
def test_thumbnails_decode_only_the_frames_they_show(as_frames, monkeypatch):
    """The report's thumbnails of a clip of 24 sampled frames are those of the fully decoded clip,
    made from the 8 frames they show: the others are never converted to pixels."""
    from vlrollout.processors import video_loading
    from vlrollout.processors.video_loading import peek_video

    raw = mp4_bytes(frames=24, fps=2)
    source = [Image.fromarray(f) for f in decoded(raw)] if as_frames else raw
    sampling = VideoSampling(fps=2.0, max_frames=24)
    full = load_video(source, "v", sampling).clip.thumbnails
    made = []
    frame_pixels, load_image = video_loading._frame_pixels, video_loading.load_image
    monkeypatch.setattr(
        video_loading, "_frame_pixels", lambda *a: made.append(1) or frame_pixels(*a)
    )
    monkeypatch.setattr(
        video_loading, "load_image", lambda *a, **k: made.append(1) or load_image(*a, **k)
    )
    shown = peek_video(source, "v", sampling).thumbnails()
    assert len(made) == video_loading.THUMBNAILS == len(shown) == len(full)
    assert [np.asarray(t).tolist() for t in shown] == [np.asarray(t).tolist() for t in full]


@pytest.mark.parametrize("as_frames", [False, True])
def test_a_frame_over_the_frame_limit_names_the_video_setting_that_raises_it(as_frames):
    """The frame limit is ``max_video_frame_pixels`` (run's preprocessor setting, serve's
    ``--max-video-frame-pixels``), not the image limit the message used to point at."""
    _, pre = preprocessor("qwen2_vl", max_video_frame_pixels=16 * 16)
    raw = mp4_bytes()
    source = [Image.fromarray(f) for f in decoded(raw)] if as_frames else raw
    with pytest.raises(PreprocessError) as e:
        pre.prepare(item(source))
    assert e.value.reason == "video_too_large", e.value.detail
    assert (
        "32x32 = 1024 pixels" in e.value.detail and "max_video_frame_pixels=256" in e.value.detail
    )
    assert (
        "--max-video-frame-pixels N" in e.value.detail and "max_image_pixels" not in e.value.detail
    )
    _, roomy = preprocessor("qwen2_vl", max_video_frame_pixels=32 * 32)
    assert roomy.prepare(item(source)).videos[0].num_frames == (8 if as_frames else 4)


@pytest.mark.parametrize("as_frames", [False, True])
def test_thumbnails_hold_one_full_size_frame_at_a_time(as_frames):
    """Each thumbnail is made as its frame is decoded: the traced peak stays near one 512x512
    frame (768 KiB), far from the eight frames the thumbnails show."""
    import tracemalloc

    from vlrollout.processors.video_loading import peek_video

    raw = mp4_bytes(frames=8, fps=2, size=512)
    source = [_png_bytes(f) for f in decoded(raw)] if as_frames else raw
    video = peek_video(source, "v", VideoSampling(fps=2.0, max_frames=8))
    tracemalloc.start()
    try:
        shown = video.thumbnails()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(shown) == 8
    assert peak < 3 * 512 * 512 * 3, peak


def _png_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def _coded_clip(frames: int, codec: str, keyframe_every: int) -> bytes:
    """A Matroska clip whose frame k shows k in binary as 8 white or black columns."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="matroska") as out:
        stream = out.add_stream(codec, rate=25)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": str(keyframe_every), "bf": "0", "sc_threshold": "0"}
        for k in range(frames):
            pixels = np.zeros((64, 64, 3), np.uint8)
            for bit in range(8):
                if (k >> bit) & 1:
                    pixels[:, bit * 8 : (bit + 1) * 8] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def _without_first_packet(raw: bytes) -> bytes:
    out_buf = io.BytesIO()
    with av.open(io.BytesIO(raw)) as source, av.open(out_buf, "w", format="matroska") as out:
        stream = out.add_stream_from_template(source.streams.video[0])
        for k, packet in enumerate(source.demux(source.streams.video[0])):
            if packet.dts is None or k == 0:
                continue
            packet.stream = stream
            out.mux(packet)
    return out_buf.getvalue()


SAMPLING = VideoSampling(fps=2.0, max_frames=768, min_frames=4, frame_factor=2)


def test_a_clip_whose_first_frames_do_not_decode_is_refused_not_mistimed():
    """Its first keyframe lost, the frames before the next one do not decode: sampled from the
    first decodable frame, the clip's timestamps named frames 1.2 s earlier than those shown."""
    raw = _without_first_packet(_coded_clip(55, "libx264", keyframe_every=30))
    with pytest.raises(PreprocessError) as info:
        load_video(raw, "item 4, video 1", SAMPLING)
    assert info.value.reason == "video_decode" and "do not decode" in info.value.detail
    load_video(_coded_clip(55, "libx264", keyframe_every=30), "item 4, video 1", SAMPLING)


def test_a_clip_cut_short_of_its_declared_length_is_refused():
    """The container says 2.2 s; the file holds well under half of that."""
    whole = _coded_clip(55, "mpeg4", keyframe_every=12)
    with pytest.raises(PreprocessError) as info:
        load_video(whole[: len(whole) * 2 // 5], "item 2, video 1", SAMPLING)
    assert info.value.reason == "video_decode" and "declares" in info.value.detail
    assert load_video(whole, "item 2, video 1", SAMPLING).clip.total_frames == 55


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"fps": float("inf")}, "fps must be a positive finite number"),
        ({"fps": "2"}, "fps must be a positive finite number, got '2'"),
        ({"max_frames": 2.5}, "max_frames must be a whole number"),
        ({"max_frames": True}, "max_frames must be a whole number"),
        ({"min_pixels": 1000.5}, "min_pixels must be a whole number"),
    ],
)
def test_python_video_settings_are_held_to_the_cli_rules(settings, words):
    """What `vlrollout run --video-fps inf` refuses, the Python API refused as a bare TypeError,
    or took as something else (max_frames 2.5 sampled 2 frames)."""
    from vlrollout.workflows import FrameSampling

    with pytest.raises(ValueError, match=words):
        FrameSampling(**settings)
    video = {f"video_{k}": v for k, v in settings.items()}
    with pytest.raises(ValueError, match=words):
        AutoProcessorPreprocessor(build_offline_processor("qwen2_vl"), **video)


def _grey_clip(levels: list[int], fmt: str, codec: str, rate: int, **options: str) -> bytes:
    """A clip whose frame k is grey level ``levels[k]``, written as ``fmt`` (a raw stream such
    as ``m4v`` carries frame times but no container frame rate)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        stream.options = options
        for level in levels:
            pixels = np.full((32, 32, 3), level, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_a_raw_stream_is_timed_by_its_frames_not_ffmpegs_default_rate():
    """FFmpeg gives a raw MPEG-4 stream an average rate of 25 fps whatever its frames' times
    say: sampled on that grid, the model saw other frames than the timestamps named, and most of
    the clip was never sampled."""
    levels = [8 * k for k in range(30)]  # 30 frames at 10 fps: 3 s
    raw = _grey_clip(levels, "m4v", "mpeg4", 10, qscale="2")
    video = load_video(raw, "v", VideoSampling(fps=2.0, max_frames=32, frame_factor=2))
    assert video.clip.source_fps == pytest.approx(10)
    assert video.clip.duration_s == pytest.approx(3.0)
    for k, frame in zip(video.clip.frame_indices, video.frames, strict=True):
        assert abs(float(frame.mean()) - levels[k]) < 4, (k, float(frame.mean()))


def test_a_stream_whose_timestamps_restart_is_refused():
    """Two MPEG-TS files joined: the second's timestamps start again at 0, and the frames after
    the join were sampled as frames of the first."""
    first = _grey_clip([10 * k for k in range(10)], "mpegts", "mpeg2video", 10)
    second = _grey_clip([100 + 10 * k for k in range(10)], "mpegts", "mpeg2video", 10)
    with pytest.raises(PreprocessError) as e:
        load_video(first + second, "v", VideoSampling(fps=2.0, max_frames=32, frame_factor=2))
    assert e.value.reason == "video_decode" and "timestamps" in e.value.detail


def _gif_of_delays(delays_ms: list[int]) -> bytes:
    images = [Image.fromarray(f) for f in square_frames(len(delays_ms))]
    buf = io.BytesIO()
    images[0].save(
        buf, format="GIF", save_all=True, append_images=images[1:], duration=delays_ms, loop=0
    )
    return buf.getvalue()


@pytest.mark.parametrize(
    ("delays_ms", "seconds"),
    [([100] * 5 + [2000], 2.5), ([100] * 5 + [250], 0.75), ([1000] + [100] * 5, 1.5)],
)
def test_a_gif_of_uneven_delays_lasts_as_long_as_its_frames_are_shown(delays_ms, seconds):
    """The last frame's delay is part of the clip: a slideshow whose last slide is held 2 s
    had been refused as cut short, and other clips got the wrong duration."""
    clip = load_video(_gif_of_delays(delays_ms), "item 1, video 1", SAMPLING).clip
    assert clip.duration_s == pytest.approx(seconds, rel=0.05)  # FFmpeg's average rate within 5%


def _mp4_with_longer_audio(seconds_of_audio: float) -> bytes:
    """Ten frames at 10 fps (1 s) and ``seconds_of_audio`` of silent AAC in one MP4."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        video = out.add_stream("mpeg4", rate=10)
        video.width = video.height = SIZE
        video.pix_fmt = "yuv420p"
        audio = out.add_stream("aac", rate=8000)
        for pixels in square_frames(10):
            for packet in video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                out.mux(packet)
        for packet in video.encode():
            out.mux(packet)
        for k in range(int(seconds_of_audio * 8000 / 1024)):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 8000, k * 1024
            for packet in audio.encode(frame):
                out.mux(packet)
        for packet in audio.encode():
            out.mux(packet)
    return buf.getvalue()


def test_a_whole_clip_with_a_longer_audio_track_is_not_cut_short():
    """The container's duration covers its longest stream; the video's own is 1 s."""
    clip = load_video(_mp4_with_longer_audio(3.0), "item 1, video 1", SAMPLING).clip
    assert clip.total_frames == 10 and clip.duration_s == pytest.approx(1.0)
