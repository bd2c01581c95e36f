"""What ``vlrollout run``'s and ``vlrollout train``'s configurations share: one path rule, one
error type, one explanation of a bad key, one check of the sampling settings.

Paths follow AReaL's convention: a relative path, in a YAML file or a ``key=value`` setting, is
relative to the working folder (AReaL's ``load_expr_config`` rewrites none), so a config moves
between ``vlrollout`` and AReaL's launchers unchanged. Every problem is a
:class:`~vlrollout.errors.ConfigError` naming the key and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from areal.api.cli_args import GenerationHyperparameters
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException
from transformers import AutoConfig

from vlrollout.errors import ConfigError
from vlrollout.families import context_length

#: The ``vlrollout run`` flags that set gconfig fields.
GCONFIG_FLAGS = {
    "max_new_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
}


def check_gconfig(g: GenerationHyperparameters, flags: bool = False) -> None:
    """Refuse sampling settings no engine can use, before any model loads (else every episode
    fails with the engine's error). Written so that NaN fails every check. ``flags`` names
    ``vlrollout run``'s flag beside each key.

    Raises:
        ConfigError: naming the key and its value.
    """

    from vlrollout.engine.sampling import check_sampling_values

    def key(name: str) -> str:
        flag = GCONFIG_FLAGS.get(name) if flags else None
        return f"gconfig.{name}" + (f" ({flag})" if flag else "")

    if not g.max_new_tokens >= 1:
        raise ConfigError(f"{key('max_new_tokens')} must be at least 1, got {g.max_new_tokens}")
    if not g.min_new_tokens >= 0:
        raise ConfigError(f"gconfig.min_new_tokens must be at least 0, got {g.min_new_tokens}")
    if g.min_new_tokens > g.max_new_tokens:
        raise ConfigError(
            f"gconfig.min_new_tokens={g.min_new_tokens} must be at most "
            f"{key('max_new_tokens')}, {g.max_new_tokens}"
        )
    if g.use_beam_search:
        raise ConfigError(
            "gconfig.use_beam_search=true: GRPO samples independent completions of a prompt, "
            "and beam search returns the likeliest ones instead; no engine here runs it"
        )
    try:
        check_sampling_values(g.temperature, g.top_p, g.frequency_penalty, key=key)
    except ValueError as e:
        raise ConfigError(str(e)) from None


UNSENT_BY_CLIENT: dict[str, tuple[str, ...]] = {
    "sglang": ("min_new_tokens",),
    "vllm": ("min_new_tokens", "frequency_penalty", "stop"),
}
"""The ``gconfig`` keys each of AReaL's remote clients leaves out of its requests (its backends'
``build_generation_request``): set, the server would sample without them."""


def check_remote_gconfig(g: GenerationHyperparameters, kind: str) -> None:
    """Refuse sampling settings the engine ``kind``'s AReaL client would not send.

    Raises:
        ConfigError: naming the keys and the client.
    """
    unsent = [
        f"gconfig.{k}={getattr(g, k)!r}" for k in UNSENT_BY_CLIENT.get(kind, ()) if getattr(g, k)
    ]
    if unsent:
        raise ConfigError(
            f"{', '.join(unsent)}: AReaL's {kind} client does not send "
            f"{'it' if len(unsent) == 1 else 'them'}, so the server would sample without; "
            f"leave {'it' if len(unsent) == 1 else 'them'} unset, or roll out on the embedded engine "
            "(engine kind local)"
        )


def model_context(model: str) -> int | None:
    """The context length of the model in folder ``model``, read from its config (``None``
    when it cannot be read or says none: the engine's own checks say what is wrong)."""
    try:
        config = AutoConfig.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError):
        return None
    return context_length(config)


def check_room_in_context(max_new_tokens: int, model: str, flag: str | None = None) -> None:
    """Refuse a ``max_new_tokens`` that leaves no room for a prompt in the context of the model
    in folder ``model`` (read from its config), before the model loads: every item would fail
    on its prompt length. ``flag`` names a command-line flag beside the key.

    Raises:
        ConfigError: naming both numbers.
    """
    context = model_context(model)
    if context is not None and max_new_tokens >= context:
        key = "gconfig.max_new_tokens" + (f" ({flag})" if flag else "")
        raise ConfigError(
            f"{key} {max_new_tokens} leaves no room for a prompt in the model's context of "
            f"{context} tokens; lower it below {context}"
        )


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in the YAML file ``path``; its relative paths stay relative to the working
    folder.

    Raises:
        ConfigError: the file is missing, not text, not YAML or not a mapping.
    """
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {path} {what}; pass --config PATH to a YAML file")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML{line}: {problem}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file") from None
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"config file {path}: expected a mapping of keys (data: ..., output: ...), "
            f"got a {type(loaded).__name__}"
        )
    return loaded


def known_keys(cls: type, dotted: str) -> list[str]:
    """Field names of the (nested) dataclass at ``dotted`` (the parent of a bad key), found
    through each field's default or, for one that defaults to ``None``
    (``Optional[NormConfig]``), its annotation."""
    for part in [p for p in dotted.split(".") if p]:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        f = fields.get(part)
        if f is None:
            return []
        found = f.default_factory().__class__ if callable(f.default_factory) else type(f.default)
        if not dataclasses.is_dataclass(found):
            found = _annotated_dataclass(cls, part)
        if found is None:
            return []
        cls = found
    return [f.name for f in dataclasses.fields(cls)]


def _annotated_dataclass(cls: type, name: str) -> type | None:
    """The dataclass field ``name`` of ``cls`` is annotated with (``Optional[X]`` gives ``X``)."""
    try:
        hint = typing.get_type_hints(cls).get(name)
    except (NameError, TypeError):
        return None
    for candidate in typing.get_args(hint) or (hint,):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def explain(e: OmegaConfBaseException, cls: type, where: str) -> ConfigError:
    """One line naming the key, what is wrong with it and the fix."""
    key = str(getattr(e, "full_key", "") or "")
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, ConfigKeyError) or "not in" in reason:
        parent, _, leaf = key.rpartition(".")
        known = known_keys(cls, parent)
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return ConfigError(
            f"unknown key {key!r}{where}; {hint}known keys{' in ' + parent if parent else ''}: "
            f"{', '.join(known)}"
        )
    return ConfigError(f"invalid value for {key!r}{where}: {reason}")
