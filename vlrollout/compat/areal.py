"""What vlrollout takes from AReaL beyond its public API, written for AReaL 1.0.

- ``GroupedRolloutWorkflow`` and ``WorkflowExecutor`` live in ``areal.infra``; the embedded
  engine runs them as AReaL's remote engines do.
- The FSDP engine's ``_prepare_mb_list`` is wrapped (packed sequences kept apart without
  flash-attn; the model's own M-RoPE positions), ``_create_optimizer`` is wrapped (freeze vision
  parts first), ``_save_model_to_hf`` is replaced for LoRA (merged weights for the rollout
  engine), and ``_cast_to_compute_dtype`` / ``_load_optimizer_state`` are called (LoRA saves,
  resuming). AReaL has no public hook for any of these.
- ``VALID_VISION_MODELS`` (``areal.engine.core.model``): the model types AReaL's FSDP engine loads
  as vision-language models (``AutoModelForImageTextToText``, the processor, ``multi_modal_input``
  forwarded); a family vlrollout checked is added to it (:func:`register_vision_model`), since
  AReaL otherwise loads it with ``AutoModelForCausalLM``, which has no class for it.
- ``apply_fsdp2`` as ``areal.engine.fsdp_utils.parallel`` calls it, and the ``fully_shard`` it
  calls (``areal.engine.fsdp_utils``): AReaL shards every ``nn.Embedding`` as its own FSDP unit;
  :func:`keep_vision_embeddings_in_parent` leaves all but the text input embeddings to the unit
  that holds them, for families whose vision embeddings read the table outside its forward.
- AReaL wraps transformers' ``_no_split_modules`` classes by default; :func:`fsdp_wrap_classes`
  reads that (private) list to give AReaL a wrap policy without the classes that hold an
  ``nn.Embedding``.
- ``current_platform`` (``areal.infra.platforms``) names the device the trainer puts a batch on
  (the rollouts shared between training processes go there, as AReaL's own ``prepare_batch``
  puts them).

Importing this module checks AReaL's version (:func:`vlrollout.compat.require`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

import torch

import vlrollout.compat.transformers  # noqa: F401  (checks transformers' version)
from vlrollout.compat import IncompatibleLibrary, installed, require

LOWEST, BELOW = (1, 0), (1, 1)
require("areal", LOWEST, BELOW, installed("areal"))

from areal.engine import fsdp_utils as _fsdp_utils  # noqa: E402
from areal.engine.core import model as _areal_model  # noqa: E402
from areal.engine.fsdp_utils import parallel as _fsdp_parallel  # noqa: E402
from areal.infra.platforms import current_platform  # noqa: E402
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow  # noqa: E402
from areal.infra.workflow_executor import WorkflowExecutor  # noqa: E402
from transformers import AutoModelForImageTextToText  # noqa: E402

__all__ = [
    "GroupedRolloutWorkflow",
    "WorkflowExecutor",
    "cast_to_compute_dtype",
    "fsdp_wrap_classes",
    "keep_vision_embeddings_in_parent",
    "load_optimizer_state",
    "register_vision_model",
    "replace_save_model_to_hf",
    "training_device",
    "wrap_create_optimizer",
    "wrap_prepare_mb_list",
]

#: The private methods of AReaL's ``FSDPEngine`` / ``FSDPPPOActor`` used here.
ENGINE_METHODS = (
    "_prepare_mb_list",
    "_create_optimizer",
    "_save_model_to_hf",
    "_cast_to_compute_dtype",
    "_load_optimizer_state",
)


def _method(obj: Any, name: str) -> Callable[..., Any]:
    found = getattr(obj, name, None)
    if not callable(found):
        raise IncompatibleLibrary(
            f"{type(obj).__name__} has no {name}() in areal {installed('areal')}; "
            "vlrollout.compat.areal was written for areal 1.0"
        )
    return found


def wrap_prepare_mb_list(engine: Any, make: Callable[[Callable], Callable]) -> None:
    """``engine._prepare_mb_list = make(engine._prepare_mb_list)``."""
    engine._prepare_mb_list = make(_method(engine, "_prepare_mb_list"))


def wrap_create_optimizer(actor: Any, make: Callable[[Callable], Callable]) -> None:
    """``actor._create_optimizer = make(actor._create_optimizer)``."""
    actor._create_optimizer = make(_method(actor, "_create_optimizer"))


def replace_save_model_to_hf(actor: Any, save: Callable[[str, Any, Any], None]) -> None:
    """Make ``save(path, tokenizer, processor)`` the actor's HF save (weight updates to the
    rollout engine and checkpoints both go through it)."""
    _method(actor, "_save_model_to_hf")
    actor._save_model_to_hf = save


def cast_to_compute_dtype(actor: Any, tensor: Any) -> Any:
    """``tensor`` in the actor's compute dtype, as AReaL's own HF save writes it."""
    return _method(actor, "_cast_to_compute_dtype")(tensor)


def load_optimizer_state(actor: Any, path: str) -> None:
    """Load the optimizer shard AReaL saved under ``path`` into ``actor``'s optimizer."""
    _method(actor, "_load_optimizer_state")(path)


def training_device() -> Any:
    """The device AReaL's trainer expects a batch on (the CPU here, this rank's GPU there)."""
    return current_platform.current_device()


def register_vision_model(model_type: str) -> None:
    """Make AReaL's FSDP engine treat ``model_type`` as a vision-language model (idempotent).

    AReaL reads the list when an engine is constructed (``is_valid_vision_model``), so this is
    called before ``FSDPPPOActor(...)``.
    """
    known = getattr(_areal_model, "VALID_VISION_MODELS", None)
    if not isinstance(known, list):
        raise IncompatibleLibrary(
            f"areal.engine.core.model has no VALID_VISION_MODELS list in areal "
            f"{installed('areal')}; vlrollout.compat.areal was written for areal 1.0"
        )
    if model_type not in known:
        known.append(model_type)


def keep_vision_embeddings_in_parent(model_types: Collection[str]) -> None:
    """Shard no ``nn.Embedding`` but the text input embeddings on its own, for ``model_types``.

    AReaL's ``apply_fsdp2`` makes every ``nn.Embedding`` its own FSDP unit (when the word
    embeddings are not tied). A unit's parameters are gathered only around its own forward, so a
    vision tower that reads ``position_embedding.weight`` directly (GLM-4.1V's ``grid_sample``,
    SigLIP2's resize) gets the sharded ``DTensor``. Left in the unit that holds it, the table is
    gathered with that unit. Installed once, for the whole process; other model types unchanged.
    """
    original = getattr(_fsdp_parallel, "apply_fsdp2", None)
    shard = getattr(_fsdp_utils, "fully_shard", None)
    if not callable(original) or not callable(shard):
        raise IncompatibleLibrary(
            f"areal {installed('areal')} has no areal.engine.fsdp_utils.parallel.apply_fsdp2 or "
            "fully_shard; vlrollout.compat.areal was written for areal 1.0"
        )
    types = set(model_types) | getattr(original, "vlrollout_model_types", set())
    base = getattr(original, "__wrapped__", original)

    @functools.wraps(base)
    def apply_fsdp2(model: Any, fsdp_kwargs: Any, wrap_policy: Any) -> Any:
        if getattr(model.config, "model_type", None) not in types:
            return base(model, fsdp_kwargs, wrap_policy)
        text = model.get_input_embeddings()
        keep = {
            id(m) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not text
        }

        def fully_shard(module: Any, **kwargs: Any) -> Any:
            return module if id(module) in keep else shard(module, **kwargs)

        _fsdp_utils.fully_shard = fully_shard
        try:
            return base(model, fsdp_kwargs, wrap_policy)
        finally:
            _fsdp_utils.fully_shard = shard

    apply_fsdp2.vlrollout_model_types = types
    _fsdp_parallel.apply_fsdp2 = apply_fsdp2


def fsdp_wrap_classes(config: Any) -> list[str] | None:
    """The module classes FSDP should wrap for a vision-language model of ``config``:
    transformers' own (``_no_split_modules``, AReaL's default) less any class holding an
    ``nn.Embedding``; ``None`` when none does.

    AReaL's FSDP2 wrapping also shards every ``nn.Embedding`` on its own, after (inside) the
    class that holds it: SigLIP's ``SiglipVisionEmbeddings`` wrapped, then its
    ``position_embedding`` inside it, leaves that table a sharded ``DTensor`` in the forward
    ("aten.embedding.default got mixed torch.Tensor and DTensor"). Read from a model built on the
    meta device (no weights, no memory).
    """
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    names = set(model._no_split_modules or ())
    holding = {
        type(m).__name__
        for m in model.modules()
        if type(m).__name__ in names and any(isinstance(c, torch.nn.Embedding) for c in m.modules())
    }
    return sorted(names - holding) if holding else None
