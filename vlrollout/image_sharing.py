"""Encode each distinct image once per forward.

The n samples of a GRPO group share their prompt's image. A packed training micro-batch that
holds a whole group, and the engine's prefill of a group, pass that image's pixels n times, and
the model's vision tower encodes them n times. :func:`install` wraps the model's
``get_image_features`` so that images with the same grid and the same pixels are encoded once
and their features repeated for every copy.

An inference engine's model also keeps the features it encoded (:class:`FeatureMemo`,
``install(model, memo_bytes=...)``): a group larger than the engine's free rows is prefilled in
several forwards, and the later ones reuse the first one's features of the group's image.

The result is the same forward: each image is encoded on its own either way (the vision towers
of the families below attend within an image only). In training, autograd sums the gradients of
the repeated features into the one encoding, which is the sum the n encodings' gradients would
have made, so the update is the same up to the order of float additions. Videos are not
touched (``get_video_features``).

Only the families whose feature outputs this module knows how to repeat are wrapped
(:data:`SHARING_FAMILIES`, each checked on a tiny random model against the unwrapped forward and
its gradients); any other model is left as it is.
"""

from __future__ import annotations

import functools
import threading
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from vlrollout.compat.torch import version_counter
from vlrollout.logs import get_logger

logger = get_logger(__name__)

SHARING_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"})
"""``model_type`` values whose ``get_image_features(pixel_values, image_grid_thw)`` returns per
image features (``pooler_output``, one tensor per image) plus tensors with one row per patch or
per merged token (``last_hidden_state``, Qwen3-VL's ``deepstack_features``)."""


@dataclass(frozen=True)
class DistinctImages:
    """Which images of a batch are copies of which.

    Attributes:
        kept: Index of each distinct image's first occurrence, in order.
        source: For every image, the position in ``kept`` of the image it equals.
    """

    kept: list[int]
    source: list[int]

    @property
    def has_copies(self) -> bool:
        return len(self.kept) < len(self.source)


def distinct_images(pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> DistinctImages:
    """Group the images of a Qwen-VL style batch by equal grid and equal pixels.

    Args:
        pixel_values: ``[patches, features]``, the images' patches one image after another.
        grid_thw: ``[images, 3]``; image ``i`` has ``prod(grid_thw[i])`` patch rows.

    >>> px = torch.tensor([[1.0], [2.0], [1.0], [2.0], [3.0], [4.0]])
    >>> distinct_images(px, torch.tensor([[1, 1, 2]] * 3))
    DistinctImages(kept=[0, 2], source=[0, 0, 1])
    """
    sizes = grid_thw.prod(-1).tolist()
    blocks = torch.split(pixel_values, sizes)
    sums = torch.stack([b.sum() for b in blocks]).tolist()  # one device sync for all images
    kept: list[int] = []
    source: list[int] = []
    candidates: dict[tuple[Any, ...], list[int]] = {}
    for i, block in enumerate(blocks):
        key = (*grid_thw[i].tolist(), sums[i])
        same = candidates.setdefault(key, [])
        for k in same:
            if torch.equal(block, blocks[kept[k]]):
                source.append(k)
                break
        else:
            same.append(len(kept))
            source.append(len(kept))
            kept.append(i)
    return DistinctImages(kept, source)


class _CannotSplit(Exception):
    """A feature output this module does not know how to split per image."""


def _split(value: Any, rows: dict[int, list[int]], images: int) -> list[Any]:
    """``value`` (one feature output of several images) as one piece per image.

    ``rows`` maps a tensor's row count to the rows each image has in it (per patch or per
    merged token); lists are split item by item, except ``pooler_output``'s one tensor per image.
    """
    if value is None:
        return [None] * images
    if isinstance(value, torch.Tensor):
        sizes = rows.get(value.shape[0]) if value.ndim else None
        if sizes is None:
            raise _CannotSplit(f"a tensor of shape {tuple(value.shape)}")
        return list(torch.split(value, sizes))
    if isinstance(value, (list, tuple)):
        per_item = [_split(v, rows, images) for v in value]
        return [type(value)(item[i] for item in per_item) for i in range(images)]
    raise _CannotSplit(f"a {type(value).__name__}")


@dataclass(frozen=True)
class _OneOfMany:
    """One image's item of an output that holds one item per image (``pooler_output``)."""

    value: Any
    container: type


def _join(pieces: list[Any]) -> Any:
    """The inverse of :func:`_split`: the pieces of several images as one feature output."""
    first = pieces[0]
    if first is None:
        return None
    if isinstance(first, _OneOfMany):
        return first.container(p.value for p in pieces)
    if isinstance(first, torch.Tensor):
        return torch.cat(pieces)
    return type(first)(_join([p[i] for p in pieces]) for i in range(len(first)))


@dataclass
class _Encoded:
    """One image's grid, patch rows and share of each feature output (of type ``kind``).

    ``pixels`` views the forward's own pixel tensor (no copy), so ``version`` notes that
    tensor's in-place version counter: a caller that then writes another picture into it makes
    the entry stale. An inference tensor (the engine prefill's own concatenation of several
    prompts' pixels) has no counter and is written by no caller.
    """

    grid: tuple[int, ...]
    pixels: torch.Tensor
    pieces: dict[str, Any]
    kind: type
    version: int | None = field(init=False)

    def __post_init__(self) -> None:
        self.version = version_counter(self.pixels)

    @property
    def nbytes(self) -> int:
        return _nbytes(self.pixels) + sum(_nbytes(v) for v in self.pieces.values())

    @property
    def stale(self) -> bool:
        return version_counter(self.pixels) != self.version


class FeatureMemo:
    """The features of the images a model encoded last, for later forwards of the same images.

    An inference engine prefills a group of requests larger than its free rows in several
    forwards; each would encode the group's image again. The memo keeps each encoded image (its
    patch rows, for an exact comparison, and its share of every feature output) up to
    ``max_bytes``, the least recently used dropped first, and drops an image whose patch rows
    were changed in place since. It is only read without gradients, and
    must be cleared (:func:`forget`) whenever the weights change. Safe to use from several
    threads (the engine's worker clears it while another thread may run the same model).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: list[_Encoded] = []  # the most recently used last
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """A copied or pickled model's memo starts empty: its lock cannot travel, and the
        entries view the original's tensors."""
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_bytes"])

    def find(self, grid: tuple[int, ...], pixels: torch.Tensor) -> _Encoded | None:
        with self._lock:
            self._entries = [e for e in self._entries if not e.stale]
            for n, entry in enumerate(self._entries):
                if entry.grid == grid and torch.equal(entry.pixels, pixels):
                    self._entries.append(self._entries.pop(n))
                    return entry
        return None

    def keep(self, encoded: _Encoded) -> None:
        """Remember ``encoded``, dropping the least recently used images beyond ``max_bytes``;
        an image larger than that is not kept. Nothing is copied: the entry holds views of the
        forward's own tensors (a forward's peak memory is unchanged; the tensors they view live
        on while an image of theirs is kept)."""
        if encoded.nbytes > self.max_bytes:
            return
        with self._lock:
            self._entries.append(encoded)
            while sum(e.nbytes for e in self._entries) > self.max_bytes:
                self._entries.pop(0)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _nbytes(value: Any) -> int:
    if isinstance(value, _OneOfMany):
        return _nbytes(value.value)
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


_MEMO = "_vlrollout_feature_memo"


def _encode_each_distinct_image_once(
    self: torch.nn.Module,
    pixel_values: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    **kw: Any,
) -> Any:
    """The class's ``get_image_features``, encoding each distinct image once (module docstring),
    and, without gradients, none whose features the model's :class:`FeatureMemo` holds.

    Bound to the instance as a method, so a ``copy.deepcopy`` of the model rebinds it to the
    copy (a closure over the original's bound method would keep encoding with the original's
    weights)."""
    get_image_features = functools.partial(type(self).get_image_features, self)
    # Features made with gradients, or under other options, are not the memo's to give.
    memo = getattr(self, _MEMO, None)
    if torch.is_grad_enabled() or set(kw) - {"return_dict"}:
        memo = None
    if image_grid_thw is None or (image_grid_thw.shape[0] < 2 and memo is None):
        return get_image_features(pixel_values, image_grid_thw, **kw)
    groups = distinct_images(pixel_values, image_grid_thw)
    if not groups.has_copies and memo is None:
        return get_image_features(pixel_values, image_grid_thw, **kw)
    images = _Images(self, pixel_values, image_grid_thw, groups)
    found = [
        memo.find(*images.key(k)) if memo is not None else None for k in range(len(groups.kept))
    ]
    try:
        encoded = images.encode([k for k, entry in enumerate(found) if entry is None], kw)
    except (_CannotSplit, AttributeError) as e:
        logger.warning("image features hold %s: each image is encoded once per copy", e)
        return get_image_features(pixel_values, image_grid_thw, **kw)
    for k, entry in encoded.items():
        found[k] = entry
        if memo is not None:
            memo.keep(entry)
    pieces = [found[k].pieces for k in groups.source]
    return found[0].kind(**{name: _join([p[name] for p in pieces]) for name in pieces[0]})


@dataclass
class _Images:
    """The distinct images of one ``get_image_features`` call."""

    module: torch.nn.Module
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    groups: DistinctImages

    def __post_init__(self) -> None:
        self.patches = self.grid_thw.prod(-1).tolist()
        self.blocks = torch.split(self.pixel_values, self.patches)

    def key(self, k: int) -> tuple[tuple[int, ...], torch.Tensor]:
        """Distinct image ``k``'s grid and patch rows."""
        i = self.groups.kept[k]
        return tuple(self.grid_thw[i].tolist()), self.blocks[i]

    def rows(self, picked: list[int]) -> torch.Tensor:
        """The patch rows of images ``picked`` (ascending), one image after another: a view of
        ``pixel_values`` when they are consecutive images (a prompt's only image, or all of its
        images), else a copy. A prompt of 4,096 Qwen2-VL image tokens has 77 MB of float32
        patch rows: a copy is that much more peak memory."""
        first, last = picked[0], picked[-1]
        if picked != list(range(first, last + 1)):
            return torch.cat([self.blocks[i] for i in picked])
        start = sum(self.patches[:first])
        return self.pixel_values.narrow(0, start, sum(self.patches[first : last + 1]))

    def encode(self, wanted: list[int], kw: dict[str, Any]) -> dict[int, _Encoded]:
        """Encode the distinct images ``wanted`` in one call; each one's features, by ``k``."""
        if not wanted:
            return {}
        picked = [self.groups.kept[k] for k in wanted]
        merge_size = int(getattr(self.module.visual, "spatial_merge_size", 2))
        patches = [self.patches[i] for i in picked]
        tokens = [n // merge_size**2 for n in patches]
        out = type(self.module).get_image_features(
            self.module, self.rows(picked), self.grid_thw[picked], **kw
        )
        rows = {sum(tokens): tokens, sum(patches): patches}
        split: dict[str, list[Any]] = {}
        for name, value in out.items():
            if name == "pooler_output" and isinstance(value, (list, tuple)):
                split[name] = [_OneOfMany(v, type(value)) for v in value]
            else:
                split[name] = _split(value, rows, len(wanted))
        return {
            k: _Encoded(*self.key(k), {name: v[n] for name, v in split.items()}, type(out))
            for n, k in enumerate(wanted)
        }


def install(model: torch.nn.Module, memo_bytes: int = 0) -> bool:
    """Wrap ``model``'s image encoding so each distinct image of a forward is encoded once.

    ``model`` is a transformers vision-language model (the ``...ForConditionalGeneration``,
    possibly wrapped by FSDP); the wrapper goes on the inner model whose ``forward`` calls
    ``get_image_features``. With ``memo_bytes`` > 0 (an inference engine's model) the features of
    the images it encodes without gradients are also kept, up to that many bytes, for later
    forwards (:class:`FeatureMemo`; :func:`forget` after every weight change). Returns whether it
    was installed: ``False`` for a family outside :data:`SHARING_FAMILIES` or a model already
    wrapped.
    """
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SHARING_FAMILIES:
        return False
    inner = _vision_owner(model)
    current = getattr(inner, "get_image_features", None)
    if current is None or getattr(current, "__func__", None) is _encode_each_distinct_image_once:
        return False
    inner.get_image_features = types.MethodType(_encode_each_distinct_image_once, inner)
    if memo_bytes > 0:
        setattr(inner, _MEMO, FeatureMemo(memo_bytes))
    return True


def forget(model: torch.nn.Module) -> None:
    """Drop the image features ``model``'s memo holds (its weights changed); nothing without one."""
    memo = getattr(_vision_owner(model), _MEMO, None)
    if memo is not None:
        memo.clear()


def _vision_owner(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module that owns the vision tower: the one whose forward calls
    ``get_image_features`` (the top-level model's method of that name only delegates to it)."""
    return next((m for m in model.modules() if "visual" in dict(m.named_children())), None)
