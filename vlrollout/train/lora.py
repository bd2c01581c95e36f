"""LoRA (AReaL's ``actor.use_lora``) with an engine that serves full weights.

With ``actor.use_lora=true`` AReaL 1.0.4's ``FSDPEngine`` wraps the model in peft's
``get_peft_model`` (``_apply_peft_wrapper``) and its HF save (``_save_model_to_hf``, used both by
the disk weight update and by ``actor.save``) writes what ``PeftModel.save_pretrained`` writes:
the adapter alone (``adapter_model.safetensors``, ``adapter_config.json``) and ``config.json``,
without the tokenizer or processor. AReaL leaves merging to SGLang/vLLM's own LoRA support;
the embedded engine and ``vlrollout serve`` load full checkpoints. :func:`install` therefore
replaces that one save on the actor: every folder it writes holds the merged model
(``W + scaling * B @ A`` per adapted linear layer, under the base model's own names, with
tokenizer and processor), loadable by ``from_pretrained`` and by any engine, and the adapter in
``adapter/`` (peft's format), loadable with ``PeftModel.from_pretrained(base, folder / "adapter")``
and by :func:`load_adapter` to resume training exactly. AReaL's update path is unchanged around
it: pause, the engine's ``update_weights_from_disk``, save, name_resolve key, wait.

AReaL's ``_prepare_mb_list`` reaches the VLM's inner model as ``engine.model.model`` (for
Qwen-VL's ``compute_3d_position_ids``; :mod:`vlrollout.train.packing` does the same for
``get_rope_index``). Under peft that attribute is the whole ``...ForConditionalGeneration``, one
level too high, and the first training step fails with ``AttributeError``; :func:`install`
therefore lends those methods of the inner model to the outer one (:data:`INNER_METHODS`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from peft.tuners.lora import Linear, LoraLayer
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)

from vlrollout.compat.areal import cast_to_compute_dtype, replace_save_model_to_hf
from vlrollout.errors import ConfigError

PEFT_PREFIX = "base_model.model."
"""What peft puts in front of the wrapped model's parameter names."""

ADAPTER = "default"
"""The adapter name peft gives AReaL's single adapter."""

ADAPTER_DIR = "adapter"
"""Subfolder of a saved folder holding the adapter in peft's format."""


INNER_METHODS: tuple[str, ...] = ("compute_3d_position_ids", "get_rope_index")
"""Inner-model methods reached as ``engine.model.model.<name>``, which peft's wrapper shifts."""


def lora_scalings(model: torch.nn.Module, adapter: str = ADAPTER) -> dict[str, float]:
    """``module name (without peft's prefix) -> scaling`` of every LoRA layer of ``model``.

    The scaling is read from the layer (``lora_alpha / r``, or ``/ sqrt(r)`` with rsLoRA), so the
    merge uses exactly what the forward pass used.

    Raises:
        ConfigError: a LoRA layer that is not a linear layer (a convolution or embedding in
            ``actor.target_modules``) or uses DoRA: :func:`merge_lora` merges only
            ``B @ A`` into a 2-D weight.
    """
    out: dict[str, float] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or adapter not in module.scaling:
            continue
        if not isinstance(module, Linear) or module.use_dora.get(adapter, False):
            raise ConfigError(
                f"actor.target_modules adapts {name.removeprefix(PEFT_PREFIX)} "
                f"({type(module.get_base_layer()).__name__}): vlrollout merges LoRA into linear "
                "layers only; list linear modules (e.g. q_proj,v_proj) or leave it empty for "
                "all linear layers"
            )
        out[name.removeprefix(PEFT_PREFIX)] = float(module.scaling[adapter])
    return out


def merge_lora(
    state: dict[str, torch.Tensor], scalings: dict[str, float], adapter: str = ADAPTER
) -> dict[str, torch.Tensor]:
    """The base model's state dict with every adapter folded in.

    Args:
        state: Full state dict of the peft model (``base_model.model.X.base_layer.weight``,
            ``…X.lora_A.default.weight`` ``[r, in]``, ``…X.lora_B.default.weight`` ``[out, r]``).
        scalings: :func:`lora_scalings` of the same model.

    Returns:
        ``X.weight = base + scaling * B @ A`` (computed in float32, returned in the base
        weight's dtype) under the base model's names; adapter tensors dropped.

    >>> s = {"base_model.model.f.base_layer.weight": torch.zeros(2, 3),
    ...      "base_model.model.f.lora_A.default.weight": torch.ones(1, 3),
    ...      "base_model.model.f.lora_B.default.weight": torch.ones(2, 1)}
    >>> merge_lora(s, {"f": 0.5})["f.weight"].tolist()
    [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
    """
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        name = key.removeprefix(PEFT_PREFIX)
        if ".lora_" in name:
            continue
        module, sep, leaf = name.partition(".base_layer.")
        if not sep:
            out[name] = tensor
            continue
        if leaf == "weight" and module in scalings:
            a = state[f"{PEFT_PREFIX}{module}.lora_A.{adapter}.weight"].float()
            b = state[f"{PEFT_PREFIX}{module}.lora_B.{adapter}.weight"].float()
            tensor = (tensor.float() + scalings[module] * (b @ a)).to(tensor.dtype)
        out[f"{module}.{leaf}"] = tensor
    return out


def save_merged(actor: Any, path: str, tokenizer: Any, processor: Any) -> None:
    """What :func:`install` makes the actor's HF save (same signature as AReaL's).

    Every rank takes part in gathering the full state dict (a collective); rank 0 writes the
    merged model, tokenizer and processor to ``path`` and the adapter to ``path/adapter``.
    """
    Path(path).mkdir(parents=True, exist_ok=True)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(actor.model, options=options)
    if dist.get_rank() == 0:

        def cast(tensor: Any) -> Any:
            return cast_to_compute_dtype(actor, tensor)

        merged = merge_lora(state, lora_scalings(actor.model))
        merged = {k: cast(v) if v.is_floating_point() else v for k, v in merged.items()}
        actor.model.get_base_model().save_pretrained(path, state_dict=merged)
        actor.model_config.save_pretrained(path)
        for part in (tokenizer, processor):
            if part is not None:
                part.save_pretrained(path)
        adapter = {k: cast(v) for k, v in state.items() if ".lora_" in k}
        actor.model.save_pretrained(str(Path(path) / ADAPTER_DIR), state_dict=adapter)
    dist.barrier(group=actor.cpu_group)


def install(actor: Any) -> bool:
    """Make a LoRA actor's HF saves write merged weights (plus ``adapter/``); ``False`` (nothing
    done) when ``actor.config.use_lora`` is off. Call after ``actor.initialize``.

    Raises:
        ConfigError: the adapters cannot be merged (see :func:`lora_scalings`).
    """
    if not actor.config.use_lora:
        return False
    lora_scalings(actor.model)  # refuse unmergeable adapters now, not at the first update
    outer = actor.model.get_base_model()
    inner = getattr(outer, "model", None)
    for name in INNER_METHODS:
        if not hasattr(outer, name) and hasattr(inner, name):
            setattr(outer, name, getattr(inner, name))

    def save(path: str, tokenizer: Any, processor: Any) -> None:
        save_merged(actor, path, tokenizer, processor)

    replace_save_model_to_hf(actor, save)
    return True


def _live_name(key: str, adapter: str = ADAPTER) -> str:
    """peft's saved adapter key → the live parameter name (peft drops the adapter name on save).

    >>> _live_name("base_model.model.m.q_proj.lora_A.weight")
    'base_model.model.m.q_proj.lora_A.default.weight'
    """
    return re.sub(r"\.(lora_[AB])\.weight$", rf".\1.{adapter}.weight", key)


def check_resume(folder: str | Path, use_lora: bool) -> None:
    """Refuse to resume from ``folder`` when it was saved with LoRA and the run is without, or
    the other way round: the optimizer state would belong to other parameters.

    Raises:
        ConfigError: naming the setting to change.
    """
    saved = (Path(folder) / ADAPTER_DIR / "adapter_config.json").is_file()
    if saved != use_lora:
        raise ConfigError(
            f"the checkpoint {folder} was saved {'with' if saved else 'without'} LoRA: resume "
            f"with actor.use_lora={str(saved).lower()}, or use a new vlrollout.output"
        )


def load_adapter(actor: Any, folder: str | Path) -> None:
    """Load the adapter that :func:`save_merged` wrote under ``folder`` into a LoRA actor built
    from the same base model (``actor.path`` of the run that saved it).

    Raises:
        ConfigError: no adapter there, the adapter was trained on another base model, or its tensors do not
            match the actor's adapters (other ``lora_rank`` or ``target_modules``).
    """
    check_resume(folder, use_lora=True)
    adapter_dir = Path(folder) / ADAPTER_DIR
    saved_base = json.loads((adapter_dir / "adapter_config.json").read_text()).get(
        "base_model_name_or_path"
    )
    if saved_base and Path(saved_base).resolve() != Path(actor.config.path).resolve():
        raise ConfigError(
            f"{folder} holds a LoRA adapter trained on {saved_base}, but actor.path is "
            f"{actor.config.path}: resume with actor.path={saved_base}"
        )
    state = {
        _live_name(k): v for k, v in load_file(adapter_dir / "adapter_model.safetensors").items()
    }
    live = {n for n, p in actor.model.named_parameters() if ".lora_" in n}
    if set(state) != live:
        raise ConfigError(
            f"the LoRA adapter in {adapter_dir} does not match actor.lora_rank/target_modules: "
            f"{len(set(state) - live)} saved tensors are not adapters of the actor, "
            f"{len(live - set(state))} adapters are not saved"
        )
    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(actor.model, state, options=options)
