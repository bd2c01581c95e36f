"""Video sources in a data file are resolved against its folder, as image sources are."""

from __future__ import annotations

import json

from vlrollout.datasets import load_items


def test_video_sources_are_resolved_against_the_data_file(tmp_path):
    (tmp_path / "clips").mkdir()
    for name in ("a.mp4", "f0.png", "f1.png", "inline.mp4", "url.mp4"):
        (tmp_path / "clips" / name).write_bytes(b"x")
    absolute = str(tmp_path / "clips" / "a.mp4")
    row = {
        "id": "v",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "video", "video": "clips/inline.mp4"},
                    {"type": "video_url", "video_url": {"url": "clips/url.mp4"}},
                    {"type": "video"},
                    {"type": "video"},
                    {"type": "video"},
                    {"type": "text", "text": "?"},
                ],
            }
        ],
        "videos": ["clips/a.mp4", ["clips/f0.png", "clips/f1.png"], absolute],
    }
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(row) + "\n")
    (item,) = load_items(data)
    clips = tmp_path / "clips"
    assert item["videos"] == [
        str(clips / "a.mp4"),
        [str(clips / "f0.png"), str(clips / "f1.png")],
        absolute,
    ]
    parts = item["messages"][0]["content"]
    assert parts[0]["video"] == str(clips / "inline.mp4")
    assert parts[1]["video_url"]["url"] == str(clips / "url.mp4")
