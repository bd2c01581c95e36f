"""Trainability checks: the things that go silently wrong between rollout and training.

- :func:`check_request_images` — every request with image placeholders carries its images
  (``image_data`` for SGLang, ``vision_msg_vllm`` for vLLM, tensors for the local engine), one per
  placeholder run, and every request with video placeholders its video tensors (local engine);
  run on every request by the workflows.
- :func:`check_processor_parity` — the engine's processor and the trainer's preprocessor agree
  (class, resize settings, image-token expansion) on probe images; run once at workflow start.
- :func:`logprob_consistency` — a training-style forward pass over a packed trajectory reproduces
  the rollout's logprobs on the generated tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from areal.api import ModelRequest

from vlrollout import families
from vlrollout.engine.inputs import modality_ids as token_modality_ids
from vlrollout.processors.base import images_in_prompt, placeholder_runs

# Image-processor attributes that change what the model sees; compared when both sides have them.
RESIZE_ATTRIBUTES = (
    "min_pixels",
    "max_pixels",
    "patch_size",
    "merge_size",
    "temporal_patch_size",
    "size",
    "do_resize",
    "resample",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "image_mean",
    "image_std",
)

PROBE_SIZES = ((64, 48), (300, 200), (1024, 768))


class ParityError(RuntimeError):
    """The engine and the trainer would process images differently."""


class ImagesMissingError(RuntimeError):
    """A request has image placeholders but does not carry the images (the model would answer blind)."""


class VideosMissingError(ImagesMissingError):
    """A request has video placeholders but does not carry the video tensors."""


def check_request_videos(req: ModelRequest, video_token_id: int | None) -> None:
    """Raise :class:`VideosMissingError` when ``input_ids`` hold video placeholder tokens but
    ``metadata["multi_modal_input"]`` (what the local engine runs) has no ``pixel_values_videos``.

    Remote engines cannot be checked here: AReaL's ``ModelRequest`` has no video field, so no
    remote engine receives a video through it.
    """
    if video_token_id is None or video_token_id not in req.input_ids:
        return
    mm = req.metadata.get("multi_modal_input")
    if not mm or "pixel_values_videos" not in mm:
        n = placeholder_runs(req.input_ids, video_token_id)
        raise VideosMissingError(
            f"request {req.rid}: input_ids hold {n} video placeholder run(s) but "
            "metadata['multi_modal_input'] has no pixel_values_videos"
        )


def check_request_images(
    req: ModelRequest,
    image_token_id: int | None,
    require_vllm_messages: bool = True,
    image_marker_id: int | None = None,
    video_token_id: int | None = None,
    video_frame_images: int = 0,
) -> None:
    """Raise :class:`ImagesMissingError` unless the request carries one image per image in its
    prompt (:func:`images_in_prompt`), and :class:`VideosMissingError` unless a prompt with
    video placeholders carries video tensors (:func:`check_request_videos`).

    Checks ``image_data`` (SGLang), ``vision_msg_vllm`` (vLLM; AReaL's client silently drops
    images without it) and ``metadata["multi_modal_input"]`` (local engine) against the number of
    placeholder runs in ``input_ids``. ``require_vllm_messages=False`` for prompts that came
    already chat-templated without ``messages_chat`` (AReaL's datasets): there are no messages to
    send, exactly as with AReaL's own workflow. ``video_token_id`` defaults to the request
    processor's ``video_token_id``. Video tokens never count as images, nor do the
    ``video_frame_images`` image placeholders a family writes for video frames
    (``PreparedPrompt.video_frame_images``: GLM-4.1V, InternVL).
    """
    if video_token_id is None:
        tid = getattr(req.processor, "video_token_id", None)
        video_token_id = tid if isinstance(tid, int) else None
    if video_token_id != image_token_id:  # one shared token: the image check below covers it
        check_request_videos(req, video_token_id)
    if image_token_id is None:
        return
    in_prompt = images_in_prompt(req.input_ids, image_token_id, image_marker_id)
    expected = in_prompt - video_frame_images
    if expected == 0:
        return
    problems = []
    # Lazy requests (vlrollout.workflows.steps.LazyImagesRequest) answer without encoding.
    n_images = getattr(req, "image_count", None)
    if n_images is None:
        n_images = len(req.image_data or [])
    has_messages = getattr(req, "has_vllm_messages", None)
    if has_messages is None:
        has_messages = bool(req.vision_msg_vllm)
    if n_images != expected:
        problems.append(f"image_data has {n_images} images")
    if not has_messages and require_vllm_messages:
        problems.append("vision_msg_vllm is empty (AReaL's vLLM client would send no image)")
    mm = req.metadata.get("multi_modal_input")
    if not mm or "pixel_values" not in mm:
        problems.append("metadata['multi_modal_input'] has no pixel_values")
    elif "image_grid_thw" in mm and mm["image_grid_thw"].shape[0] != expected:
        problems.append(f"image_grid_thw has {mm['image_grid_thw'].shape[0]} rows")
    if problems:
        raise ImagesMissingError(
            f"request {req.rid}: input_ids hold {expected} image(s) but " + "; ".join(problems)
        )


def _image_processor_settings(processor: Any) -> dict[str, Any]:
    ip = getattr(processor, "image_processor", None)
    if ip is None:
        return {}
    out = {}
    for name in RESIZE_ATTRIBUTES:
        if hasattr(ip, name):
            value = getattr(ip, name)
            out[name] = dict(value) if isinstance(value, Mapping) else value
    return out


def check_processor_parity(
    engine_processor: Any,
    preprocessor: Any,
    probe_sizes: Sequence[tuple[int, int]] = PROBE_SIZES,
) -> None:
    """Raise :class:`ParityError` listing every disagreement between engine and trainer.

    Args:
        engine_processor: The processor the engine uses (the local engine's ``processor``, or one
            loaded from the path a remote server serves).
        preprocessor: The workflow's preprocessor (its ``processor`` attribute and its resize
            overrides are what the trainer's tensors come from).
        probe_sizes: Image sizes (w, h) to compare token expansion on.
    """
    from PIL import Image

    ours = getattr(preprocessor, "processor", None)
    problems = []
    if type(engine_processor) is not type(ours):
        problems.append(
            f"processor class: engine {type(engine_processor).__name__}, "
            f"trainer {type(ours).__name__}"
        )
    engine_settings = _image_processor_settings(engine_processor)
    our_settings = _image_processor_settings(ours)
    overrides = getattr(preprocessor, "processor_kwargs", {}).get("images_kwargs", {})
    our_settings.update({k: v for k, v in overrides.items() if k in RESIZE_ATTRIBUTES})
    for key in sorted(set(engine_settings) & set(our_settings)):
        if engine_settings[key] != our_settings[key]:
            problems.append(
                f"{key}: engine {engine_settings[key]!r}, trainer {our_settings[key]!r}"
            )
    token_id = getattr(preprocessor, "image_token_id", None)
    if token_id is not None and not problems:
        for w, h in probe_sizes:
            image = Image.new("RGB", (w, h), (120, 60, 200))
            item = {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image"}, {"type": "text", "text": "probe"}],
                    }
                ],
                "images": [image],
            }
            prepared = preprocessor.prepare(item)
            text = prepared.prompt_text
            engine_out = engine_processor(images=[image], text=[text], return_tensors="pt")
            ours_n = prepared.input_ids.count(token_id)
            engine_n = engine_out["input_ids"][0].tolist().count(token_id)
            if ours_n != engine_n:
                problems.append(
                    f"probe {w}x{h}: engine expands the image to {engine_n} tokens, trainer to {ours_n}"
                )
    if problems:
        raise ParityError(
            "engine and trainer process images differently:\n  - "
            + "\n  - ".join(problems)
            + "\nUse the same processor (and min_pixels/max_pixels) for both."
        )


@dataclass(frozen=True)
class LogprobReport:
    """Rollout vs recomputed log-probabilities on generated tokens."""

    max_abs_diff: float
    mean_abs_diff: float
    n_tokens: int

    def ok(self, atol: float) -> bool:
        return self.n_tokens > 0 and self.max_abs_diff <= atol


def modality_ids(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """0 for text, 1 for image, 2 for video placeholder tokens, from the model config's ids
    (:func:`vlrollout.engine.inputs.modality_ids`).

    transformers >= 5 computes Qwen-VL's 3-D positions only when ``mm_token_type_ids`` is passed;
    without it the forward silently falls back to 1-D positions (or a stale ``rope_deltas`` left
    on the module by the previous call), which shifts every logprob after the first image.
    """
    return token_modality_ids(model.config, input_ids)


@torch.no_grad()
def recompute_logprobs(
    model: Any, trajectory: Mapping[str, Any], temperature: float = 1.0, row: int = 0
) -> torch.Tensor:
    """Log-probabilities of each token given its prefix, the way a trainer computes them.

    One forward pass over the whole packed sequence with its ``multi_modal_input`` (images and
    videos; video grids as :func:`vlrollout.families.rope_grids` gives the model's
    ``get_rope_index``) and every input the family takes (:mod:`vlrollout.families`): per-token
    modality ids as ``mm_token_type_ids`` for Qwen-VL, from which the model derives its 3-D
    positions, or as ``token_type_ids`` for Gemma 3, whose image tokens attend to each other
    bidirectionally.
    They come from the trajectory's ``mm_token_type_ids``, or from :func:`modality_ids` when it
    has none. Logits are divided by ``temperature`` before ``log_softmax``, as AReaL's actor does.

    Returns:
        float32 ``[L]``: entry ``i`` is ``log p(input_ids[i] | input_ids[:i])``; entry 0 is 0.
    """
    mask = trajectory["attention_mask"][row].bool()
    ids = trajectory["input_ids"][row][mask].unsqueeze(0).long()
    device = next(model.parameters()).device
    kwargs: dict[str, Any] = {"input_ids": ids.to(device)}
    mm = trajectory.get("multi_modal_input")
    vision = {k: v.to(device) for k, v in mm[row].items()} if mm and mm[row] else {}
    family = families.family_of(model.config)
    if vision and (family.token_types_input is not None or family.positions == "mrope"):
        if "mm_token_type_ids" in trajectory:
            types = trajectory["mm_token_type_ids"][row][mask].unsqueeze(0)
        else:
            types = modality_ids(model, ids)
        types = types.to(device)
        if family.positions == "mrope":
            vision = families.rope_grids(vision, types)
        if family.token_types_input is not None:
            kwargs[family.token_types_input] = types
    kwargs.update(vision)
    logits = model(**kwargs).logits[0].float() / temperature
    logp = torch.log_softmax(logits[:-1], dim=-1)
    gathered = logp.gather(-1, ids[0, 1:].to(device).unsqueeze(-1)).squeeze(-1).cpu()
    return torch.cat([torch.zeros(1), gathered])


def logprob_consistency(
    model: Any, trajectory: Mapping[str, Any], temperature: float = 1.0, row: int = 0
) -> LogprobReport:
    """Compare the rollout's ``logprobs`` with a recomputation on ``loss_mask`` positions.

    >>> # report = logprob_consistency(model, traj); assert report.ok(atol=1e-4)
    """
    mask = trajectory["attention_mask"][row].bool()
    loss = trajectory["loss_mask"][row][mask].bool()
    rollout = trajectory["logprobs"][row][mask].float()
    recomputed = recompute_logprobs(model, trajectory, temperature, row)
    diff = (rollout - recomputed)[loss].abs()
    if diff.numel() == 0:
        return LogprobReport(float("nan"), float("nan"), 0)
    return LogprobReport(float(diff.max()), float(diff.mean()), int(diff.numel()))
