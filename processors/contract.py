"""The preprocessor plug-in contract, checked when a plug-in is loaded.

**The factory** (what :func:`load_preprocessor` resolves from a registered name, an entry point of
the ``vlrollout.processors`` group or an import path) is called as::

    factory(processor=processor, chat_template_kwargs={...}, min_pixels=..., max_pixels=..., **options)

- ``processor``: the transformers processor the workflow was given (already loaded);
- ``chat_template_kwargs``: variables for the chat template (e.g. ``{"enable_thinking": False}``);
- ``min_pixels`` / ``max_pixels``: the workflow's pixel budget (``None``: the processor's own);
- ``options``: the plug-in's own arguments, from the run config's ``preprocessor`` mapping
  (``{"name": "my_pkg.pre.build", "crop_fraction": 0.5}``), plus the frame sampling settings a
  config sets (``video_fps``, ``video_max_frames``, ``video_min_pixels``, ``video_max_pixels``;
  only those set, so a plug-in without video never sees them unless the user asks for video).

It must accept all of these keywords (``**kwargs`` is fine for the ones it ignores).

**The preprocessor** it returns has ``prepare(data) -> PreparedPrompt``, ``.processor`` (the
processor its tensors come from: the parity check compares it with the engine's) and
``.tokenizer``. ``prepare`` returns a :class:`~vlrollout.processors.base.PreparedPrompt` (not a
wrapper) with one :class:`~vlrollout.processors.base.VideoClip` per video and one
:class:`~vlrollout.geometry.ImageGeometry` per image, describing the whole
transform from the item's original pixels to the model frame: a preprocessor that crops or pads
composes its step with the wrapped processor's geometry (``ImageGeometry.cropped(...).then(g)``),
so rewards and tools convert boxes exactly. Bad input raises
:class:`~vlrollout.processors.errors.PreprocessError`, and so does media the plug-in does not read
(:func:`~vlrollout.processors.messages.check_media_fields`; ``normalize_messages`` refuses video
placeholders): nothing is dropped silently.

Every broken promise raises :class:`PreprocessorContractError` naming the plug-in and the promise.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

import torch

from . import registry
from .base import ImageGeometry, PreparedPrompt, run_lengths
from .errors import PreprocessError, PreprocessorContractError
from .messages import paired_image_sources
from .registry import check_preprocessor

FACTORY_KEYWORDS = ("processor", "chat_template_kwargs", "min_pixels", "max_pixels")


def plugin_name(obj: Any) -> str:
    """How errors name a plug-in object: its class's import path."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def check_factory(factory: Any, name: str) -> None:
    """The factory (callable: the registry checks that) accepts the contract's keywords."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    missing = [k for k in FACTORY_KEYWORDS if k not in accepted]
    if missing:
        raise PreprocessorContractError(
            name, f"the factory does not accept {missing}; add them (or **kwargs) to its signature"
        )


def check_prepared(
    result: Any,
    name: str,
    merge_sizes: Mapping[str, int] | None = None,
    item: Mapping[str, Any] | None = None,
) -> PreparedPrompt:
    """``prepare`` returned a :class:`PreparedPrompt` whose parts agree with each other:
    ``input_ids`` a list of ints, one geometry per image, and the vision tensors
    (:func:`check_vision_tensors`) with the placeholders, when ``merge_sizes``
    (:func:`merge_sizes`) says how many patches one placeholder token stands for; and, given the
    ``item`` it was prepared from, no fewer images than the item holds (a dropped image would
    run the prompt as text)."""
    if not isinstance(result, PreparedPrompt):
        raise PreprocessorContractError(
            name,
            f"prepare() returned a {type(result).__name__}, not a PreparedPrompt (return the "
            "PreparedPrompt itself, e.g. dataclasses.replace(prepared, geometry=...))",
        )
    if result.__dict__.get("_contract_checked"):  # a cached prompt, checked when prepared
        return result
    ids = result.input_ids
    if not isinstance(ids, list):
        raise PreprocessorContractError(
            name, f"prepare()'s input_ids must be a list of ints, got a {type(ids).__name__}"
        )
    if not ids:
        raise PreprocessorContractError(name, "prepare() returned empty input_ids")
    bad = next((k for k, t in enumerate(ids) if type(t) is not int), None)
    if bad is not None:
        raise PreprocessorContractError(
            name,
            f"prepare()'s input_ids must be a list of ints, got a {type(ids[bad]).__name__} at "
            f"position {bad}",
        )
    n_images = (
        len(result.engine_images)  # type: ignore[arg-type]
        if result.engine_images_pending
        else len(result.image_data)
    )
    held = paired_image_sources(item) if item is not None else None
    if held is not None and n_images < len(held):
        raise PreprocessorContractError(
            name,
            f"prepare() returned {n_images} images for an item of {len(held)}: a plug-in must "
            "not drop an item's images (the prompt would run without them)",
        )
    if n_images != len(result.geometry):
        raise PreprocessorContractError(
            name,
            f"prepare() returned {len(result.geometry)} geometries for {n_images} "
            "images (one ImageGeometry per image, which rewards and tools read)",
        )
    bad = next((k for k, g in enumerate(result.geometry) if not isinstance(g, ImageGeometry)), None)
    if bad is not None:
        raise PreprocessorContractError(
            name,
            f"prepare()'s geometry {bad + 1} is a {type(result.geometry[bad]).__name__}, not an "
            "ImageGeometry (ImageGeometry.from_any reads a dict back)",
        )
    types = result.mm_token_type_ids
    if types is not None and len(types) != len(ids):
        raise PreprocessorContractError(
            name,
            f"prepare() returned {len(types)} mm_token_type_ids for {len(ids)} input_ids (one "
            "per token)",
        )
    check_vision_tensors(result, name, merge_sizes or {})
    result.__dict__["_contract_checked"] = True
    return result


_VISION = (
    ("image", "image_grid_thw", "pixel_values", 1),
    ("video", "video_grid_thw", "pixel_values_videos", 2),
)


def merge_sizes(processor: Any) -> dict[str, int]:
    """How many patches a side of one placeholder token covers, by medium, for the processors
    that say (``merge_size`` of the Qwen-VL and GLM image and video processors)."""
    out = {}
    for kind, attribute in (("image", "image_processor"), ("video", "video_processor")):
        size = getattr(getattr(processor, attribute, None), "merge_size", None)
        if isinstance(size, int) and size > 0:
            out[kind] = size
    return out


def check_vision_tensors(result: PreparedPrompt, name: str, merge: Mapping[str, int]) -> None:
    """The grid families' tensors agree with each other and with the placeholders: pixels in
    floating point other than float64, an integer grid, one pixel row per grid patch, and
    ``prod(grid) / merge**2`` placeholder tokens (a trainer's forward fails on any mismatch,
    after the episode was accepted)."""
    mm = result.multi_modal_input
    for kind, grid_key, pixels_key, type_value in _VISION:
        grid, pixels = mm.get(grid_key), mm.get(pixels_key)
        if isinstance(pixels, torch.Tensor) and (
            pixels.dtype == torch.float64 or not pixels.dtype.is_floating_point
        ):
            raise PreprocessorContractError(
                name, f"{pixels_key} is {pixels.dtype}; give the processor's float32 pixels"
            )
        if not isinstance(grid, torch.Tensor):
            continue
        if grid.dtype.is_floating_point or grid.dtype == torch.bool:
            raise PreprocessorContractError(
                name, f"{grid_key} is {grid.dtype}, not an integer tensor"
            )
        patches = int(grid.prod(-1).sum())
        if isinstance(pixels, torch.Tensor) and pixels.shape[0] != patches:
            raise PreprocessorContractError(
                name,
                f"{pixels_key} has {pixels.shape[0]} rows for the {patches} patches {grid_key} "
                "gives (one row per patch)",
            )
        tokens = _placeholder_count(result, kind, type_value)
        if kind in merge and tokens is not None and tokens != patches // merge[kind] ** 2:
            raise PreprocessorContractError(
                name,
                f"input_ids hold {tokens} {kind} placeholder tokens where {grid_key} implies "
                f"{patches // merge[kind] ** 2} (merge size {merge[kind]})",
            )
        if kind == "image" and kind in merge:
            _check_each_image(result, grid, merge[kind], name)


def _check_each_image(result: PreparedPrompt, grid: torch.Tensor, merge: int, name: str) -> None:
    """Image k's run of placeholder tokens holds ``prod(grid[k]) / merge**2`` of them (when the
    runs can be told apart, one per grid row)."""
    runs = _image_runs(result)
    if runs is None or len(runs) != grid.shape[0]:
        return
    for k, (run, row) in enumerate(zip(runs, grid.tolist(), strict=True)):
        want = math.prod(row) // merge**2
        if run != want:
            raise PreprocessorContractError(
                name,
                f"image {k + 1}'s run of placeholder tokens has {run} where its image_grid_thw "
                f"row {row} implies {want} (merge size {merge})",
            )


def _image_runs(result: PreparedPrompt) -> list[int] | None:
    """Lengths of the prompt's runs of consecutive image placeholder tokens, in order."""
    if result.mm_token_type_ids is not None:
        marks = [t == 1 for t in result.mm_token_type_ids]
    elif result.image_token_id is not None and not result.video_frame_images:
        marks = [t == result.image_token_id for t in result.input_ids]
    else:
        return None
    return run_lengths(marks)


def _placeholder_count(result: PreparedPrompt, kind: str, type_value: int) -> int | None:
    """The prompt's placeholder tokens of ``kind``: by ``mm_token_type_ids`` when the processor
    gives them, else by token id; ``None`` when it cannot be told (a family that writes video
    frames with its image token and gives no type ids)."""
    if result.mm_token_type_ids is not None:
        return sum(1 for t in result.mm_token_type_ids if t == type_value)
    token = result.image_token_id if kind == "image" else result.video_token_id
    if token is None or (kind == "image" and result.video_frame_images):
        return None
    return result.input_ids.count(token)


def probe(pre: Any, name: str, has_vision: bool, merge: Mapping[str, int] | None = None) -> None:
    """Run ``prepare`` once on a tiny item and check what comes back.

    A plug-in that rejects the probe with a :class:`PreprocessError` (it needs task fields the
    probe lacks) is not failed here: its results are checked again at every use.
    """
    from PIL import Image

    data: dict[str, Any] = {"messages": [{"role": "user", "content": "Describe."}]}
    if has_vision:
        data = {
            "messages": [{"role": "user", "content": "<image>Describe."}],
            "images": [Image.new("RGB", (64, 48), (120, 60, 30))],
        }
    try:
        result = pre.prepare(data)
    except PreprocessError:
        return
    except Exception as e:  # noqa: BLE001 - re-raised naming the plug-in
        raise PreprocessorContractError(
            name, f"prepare() on a one-image probe item raised {type(e).__name__}: {e}"
        ) from e
    check_prepared(result, name, merge, data)


def split_spec(spec: Any) -> tuple[Any, dict[str, Any]]:
    """``"name"`` / ``{"name": ..., **options}`` / an object → ``(name_or_object, options)``."""
    if isinstance(spec, Mapping):
        options = dict(spec)
        if "name" not in options:
            raise ValueError(
                f"a preprocessor mapping needs a 'name' (registered name or import path), got "
                f"keys {sorted(options)}"
            )
        return options.pop("name"), options
    return spec, {}


def load_preprocessor(
    spec: Any,
    *,
    processor: Any,
    chat_template_kwargs: dict[str, Any] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    check: bool = True,
) -> Any:
    """Build the preprocessor named by ``spec`` under the contract, and check it.

    Args:
        spec: ``None`` (the built-in ``"auto"``), a registered name or import path, a mapping
            ``{"name": ..., **options}`` (options go to the factory), or a built object (checked,
            not rebuilt).
        processor: The loaded transformers processor.
        chat_template_kwargs, min_pixels, max_pixels: Passed to the factory.
        check: Probe ``prepare`` once (plug-ins only; the built-in is tested).

    Raises:
        PreprocessorContractError: a broken promise, naming the plug-in.
    """
    name_or_obj, options = split_spec(spec)
    if name_or_obj is None or isinstance(name_or_obj, str):
        name = name_or_obj or "auto"
        factory = registry.resolve_preprocessor(name)
        check_factory(factory, name)
        try:
            pre = factory(
                processor=processor,
                chat_template_kwargs=dict(chat_template_kwargs or {}),
                min_pixels=min_pixels,
                max_pixels=max_pixels,
                **options,
            )
        except PreprocessorContractError:
            raise
        except TypeError as e:
            raise PreprocessorContractError(name, f"the factory failed: {e}") from e
        builtin = name in registry.BUILTIN_NAMES
    else:
        if options:
            raise ValueError("options apply to a preprocessor built by name, not to an object")
        pre, name, builtin = name_or_obj, plugin_name(name_or_obj), False
    check_preprocessor(pre, name, processor)
    if check and not builtin:
        has_vision = getattr(processor, "image_processor", None) is not None
        probe(pre, name, has_vision, merge_sizes(processor))
    return pre
