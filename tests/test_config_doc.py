"""``docs/config.md`` is rendered from the config dataclasses' help metadata and is not stale."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import yaml

from vlrollout.engine.config import EngineConfig
from vlrollout.train.config import TrainSection

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from render_config_doc import DOC, main, render  # noqa: E402


def test_the_committed_config_reference_is_what_the_dataclasses_render():
    assert DOC.read_text() == render(), "docs/config.md is stale: run `make config-doc`"
    assert main(["--check"]) == 0


def test_every_key_is_declared_once_with_its_help_and_listed():
    text = render()
    for prefix, cls in (("vlrollout", TrainSection), ("vlrollout.engine", EngineConfig)):
        assert "Attributes:" not in (inspect.getdoc(cls) or "")  # the help is the one text
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name}"
            assert f"| `{prefix}.{f.name}` |" in text


def _leaf_keys(section: dict, prefix: str) -> list[str]:
    keys = []
    for key, value in section.items():
        if isinstance(value, dict):
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def test_every_key_the_recipes_set_is_documented():
    text = render()
    for recipe in ("train_grounding.yaml", "train_count.yaml"):
        section = yaml.safe_load((REPO / "examples" / recipe).read_text())["vlrollout"]
        for key in _leaf_keys(section, "vlrollout."):
            assert f"| `{key}` |" in text, f"{recipe}: {key}"
