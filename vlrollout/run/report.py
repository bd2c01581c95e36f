"""The visual report of a run: one self-contained HTML page.

Each item shows its image with the ground-truth boxes (magenta) and every episode's predicted boxes
(cyan, converted from the model's frame to the image's pixels), the prompt, each completion and
its reward, and any rejection with its reason. Images are embedded as data URLs so the page can
be mailed or attached to an issue.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vlrollout.run.runner import _safe_name, atomic_write_bytes

THUMB = 224
GT_COLOUR = (255, 0, 255)  # magenta
PRED_COLOUR = (0, 220, 255)  # cyan


def _load_image(image: Any) -> Image.Image | None:
    from vlrollout.processors.image_loading import load_image

    try:
        return load_image(image).image
    except Exception:  # noqa: BLE001 - the report shows "image unavailable" instead
        return None


def predicted_boxes(text: str, width: int, height: int, family: str = "qwen2_vl") -> list[tuple]:
    """Boxes in ``text`` (in ``family``'s format) converted to pixels of a ``width``×``height`` image.

    Frames that need the processor's resized size (Qwen2.5-VL) are drawn as if the model saw the
    original size; the report is for looking, the rewards use the recorded geometry.
    """
    from vlrollout.rewards.box_parsing import get_parser, is_finite_box
    from vlrollout.rewards.frames import Frame, convert_boxes

    parsed = get_parser(family)(text)
    geometry = {
        "original_width": width,
        "original_height": height,
        "model_width": width,
        "model_height": height,
    }
    boxes = [b for b in parsed.boxes if is_finite_box(b)]
    return convert_boxes(boxes, parsed.frame, Frame.ORIGINAL, geometry)


def _draw(image: Image.Image, gt: Sequence, preds: Sequence) -> str:
    image = image.convert("RGB")
    scale = THUMB / max(image.size)
    shown = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    draw = ImageDraw.Draw(shown)
    # Colours no synthetic shape has, so a box on a shape of its own colour stays visible.
    for boxes, colour in ((gt, GT_COLOUR), (preds, PRED_COLOUR)):
        for b in boxes:
            draw.rectangle([v * scale for v in b], outline=colour, width=2)
    buf = io.BytesIO()
    shown.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _prompt_text(item: dict[str, Any]) -> str:
    parts = []
    for message in item.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return " ".join(p for p in parts if p)


def _thumbnail(image: Image.Image) -> str:
    return _draw(image, [], [])


def tool_images(trajectory_path: Path, processor: Any, n_prompt_images: int) -> list[Image.Image]:
    """Images added after the prompt's (tool results), as the model saw them, from the saved
    trajectory; ``[]`` when there are none or the family's tensors cannot be turned back."""
    if processor is None or not trajectory_path.exists():
        return []
    import torch

    from vlrollout.run.report_images import images_seen_by_model

    traj = torch.load(trajectory_path, weights_only=False)
    mm = traj.get("multi_modal_input")
    return images_seen_by_model(mm[0], processor)[n_prompt_images:] if mm else []


def render_item(
    item: dict[str, Any],
    outcome: dict[str, Any],
    family: str,
    extra_images: Sequence[Image.Image] = (),
) -> str:
    image = _load_image(item["images"][0]) if item.get("images") else None
    gt = item.get("boxes") or []
    rows = []
    all_preds: list[tuple] = []
    for i, episode in enumerate(outcome.get("episodes", [])):
        text = "\n---\n".join(episode["turns"])
        if image is not None:
            all_preds += predicted_boxes(episode["turns"][-1], image.width, image.height, family)
        rows.append(
            f"<tr><td>{i}</td><td><pre>{html.escape(text)}</pre></td>"
            f"<td class=r>{episode['reward']:.3f}</td></tr>"
        )
    for r in outcome.get("rejections", []):
        rows.append(
            f"<tr class=rej><td>✗</td><td>{html.escape(r['reason'])}: {html.escape(r['detail'])}"
            "</td><td></td></tr>"
        )
    picture = (
        f"<img src='{_draw(image, gt, all_preds)}'>" if image is not None else "<i>no image</i>"
    )
    for k, extra in enumerate(extra_images, 1):
        picture += f"<figure><img src='{_thumbnail(extra)}'><figcaption>tool image {k}</figcaption></figure>"
    answer = item.get("answer", item.get("captions", item.get("boxes", "")))
    return (
        f"<section><h3>{html.escape(str(item['id']))} "
        f"<small>{html.escape(str(item.get('task', '')))}</small></h3>"
        f"<div class=item>{picture}<div><p><b>prompt</b> {html.escape(_prompt_text(item))}</p>"
        f"<p><b>expected</b> {html.escape(json.dumps(answer))}</p>"
        f"<table><tr><th>#</th><th>completion</th><th>reward</th></tr>{''.join(rows)}</table>"
        "</div></div></section>"
    )


STYLE = """
body{font-family:sans-serif;margin:2em;max-width:1100px}
.item{display:flex;gap:1.5em;align-items:flex-start}
img{border:1px solid #ccc;image-rendering:pixelated;width:224px}
figure{margin:0}figcaption{font-size:small;color:#555}
pre{margin:0;white-space:pre-wrap}
table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:2px 8px;vertical-align:top}
.r{text-align:right}.rej{color:#b00}
"""


def _overview(summary: dict[str, Any]) -> str:
    items, episodes = summary.get("items", {}), summary.get("episodes", {})
    rows = "".join(
        f"<tr><td>{html.escape(task)}</td><td class=r>{st.get('n', 0)}</td>"
        f"<td class=r>{st.get('mean', float('nan')):.3f}</td></tr>"
        for task, st in summary.get("reward_by_task", {}).items()
    )
    reasons = ", ".join(f"{k}: {v}" for k, v in episodes.get("rejected_by_reason", {}).items())
    return (
        f"<p>{items.get('done', 0)}/{items.get('total', 0)} items, "
        f"{episodes.get('accepted', 0)} episodes kept, {episodes.get('rejected', 0)} rejected"
        f"{' (' + html.escape(reasons) + ')' if reasons else ''}</p>"
        f"<table><tr><th>task</th><th>episodes</th><th>mean reward</th></tr>{rows}</table>"
    )


def write_report(
    output: Path,
    items: Sequence[dict[str, Any]],
    summary: dict[str, Any],
    family: str = "qwen2_vl",
    processor: Any = None,
) -> Path:
    """Write ``output/report.html`` for every finished item; returns its path.

    With ``processor`` (Qwen-VL families), images that tools added during an episode are shown
    too, reconstructed from the saved trajectory's ``pixel_values``.
    """
    sections = []
    for item in items:
        name = _safe_name(item["id"])
        path = output / "items" / f"{name}.json"
        if path.exists():
            n_prompt = len(item.get("images") or [])
            extra = tool_images(output / "trajectories" / f"{name}.pt", processor, n_prompt)
            sections.append(render_item(item, json.loads(path.read_text()), family, extra))
    page = (
        f"<!doctype html><meta charset=utf-8><title>vlrollout report</title><style>{STYLE}</style>"
        f"<h1>vlrollout run</h1>{_overview(summary)}"
        "<p><span style='color:#f0f'>■ ground truth</span> "
        "<span style='color:#0cf'>■ predicted</span></p>"
        f"{''.join(sections)}"
    )
    report = output / "report.html"
    atomic_write_bytes(report, page.encode())
    return report
