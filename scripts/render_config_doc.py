"""Render ``docs/config.md``, the reference of every ``vlrollout.*`` key, from the config dataclasses.

Each key is declared once, in :class:`~vlrollout.train.config.TrainSection` or
:class:`~vlrollout.engine.config.EngineConfig`, with its help text in ``metadata["help"]`` (as
AReaL's ``areal/api/cli_args.py`` declares its own); this script turns each dataclass into one
table of key, type, default and help. A paragraph before them lists the AReaL sections the
training recipes set, read from ``examples/train_grounding.yaml``, each linked to AReaL's reference.

    .venv/bin/python scripts/render_config_doc.py           # rewrite docs/config.md (make config-doc)
    .venv/bin/python scripts/render_config_doc.py --check   # exit 1 if docs/config.md is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vlrollout.engine.config import EngineConfig  # noqa: E402
from vlrollout.train.config import TrainSection  # noqa: E402

DOC = REPO / "docs" / "config.md"
RECIPE = REPO / "examples" / "train_grounding.yaml"

AREAL_REFERENCE = "https://github.com/inclusionAI/AReaL/blob/main/docs/en/cli_reference.md"
"""AReaL's configuration reference, generated from its ``cli_args.py``."""

AREAL_SECTIONS = {
    "cluster": "cluster-specification-configuration",
    "train_dataset": "traindataset-configuration",
    "valid_dataset": "traindataset-configuration",  # the same DatasetConfig class
    "rollout": "inferenceengine-configuration",
    "gconfig": "generationhyperparameters",
    "actor": "ppoactor-configuration",
    "stats_logger": "statslogger-configuration",
    "saver": "saver-configuration",
    "evaluator": "evaluator-configuration",
    "recover": "recover-configuration",
}
"""The AReaL sections a recipe may set, each with its heading's anchor in :data:`AREAL_REFERENCE`;
top-level keys (``seed``, ``total_train_steps``, ...) are the GRPO configuration's."""

SECTIONS = (
    ("vlrollout", TrainSection()),
    ("vlrollout.engine", TrainSection().engine),
)
"""Each documented section of ``vlrollout train``'s config: its keys' prefix and its defaults."""


def rst_to_markdown(text: str) -> str:
    """A docstring's inline markup as Markdown: ``x`` and :role:`~a.b` become `x` and `b`.

    >>> rst_to_markdown("see :class:`~vlrollout.x.Y` and ``k``")
    'see `Y` and `k`'
    """
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`")


def summary(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    first = (inspect.getdoc(cls) or "").split("\n\n", 1)[0]
    return rst_to_markdown(" ".join(first.split()))


def default_text(value: Any) -> str:
    """A default as it is written in YAML; a nested section says where it is listed."""
    if dataclasses.is_dataclass(value):
        return "the section below"
    if value == "":
        return '`""`'
    dumped = yaml.safe_dump(value, default_flow_style=True).strip()
    return f"`{dumped.removesuffix('...').strip()}`"


def table(prefix: str, defaults: Any) -> list[str]:
    """One Markdown table row per field of the dataclass instance ``defaults`` (the section as
    ``vlrollout train`` builds it when the config leaves it out): key, type, default, help."""
    cls = type(defaults)
    rows = ["| Key | Type | Default | Help |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        help_text = f.metadata.get("help")
        if not help_text:
            raise ValueError(f"{cls.__name__}.{f.name} has no metadata['help']")
        kind = str(f.type).replace("|", "\\|")
        value = default_text(getattr(defaults, f.name))
        cells = [f"`{prefix}.{f.name}`", f"`{kind}`", value, help_text]
        rows.append("| " + " | ".join(cell.replace("\n", " ") for cell in cells) + " |")
    return rows


def areal_paragraph(recipe: Path) -> str:
    """The AReaL sections and top-level keys ``recipe`` sets, each section linked."""
    config = yaml.safe_load(recipe.read_text())
    keys = [k for k in config if k not in ("vlrollout", "defaults")]
    sections = [k for k in keys if isinstance(config[k], dict)]
    unknown = [k for k in sections if k not in AREAL_SECTIONS]
    if unknown:
        raise ValueError(f"{recipe.name} sets AReaL sections without a link: {unknown}")
    scalars = [k for k in keys if k not in sections]
    links = ", ".join(f"[`{k}`]({AREAL_REFERENCE}#{AREAL_SECTIONS[k]})" for k in sections)
    tops = ", ".join(f"`{k}`" for k in scalars)
    return (
        f"Everything outside `vlrollout:` is AReaL's `GRPOConfig`, loaded by AReaL's "
        f"`load_expr_config` and documented in [AReaL's configuration reference]"
        f"({AREAL_REFERENCE}). The recipes (`examples/{recipe.name}`, and the counting recipe "
        f"built on it) set its sections {links}, and the top-level keys {tops} "
        f"([GRPO configuration]({AREAL_REFERENCE}#grpo-configuration))."
    )


def render() -> str:
    """The whole of ``docs/config.md``."""
    lines = [
        "<!-- Generated by scripts/render_config_doc.py (make config-doc) from the config",
        "     dataclasses' help metadata; edit those, not this page. -->",
        "",
        "# Configuration reference",
        "",
        "`vlrollout train --config FILE [KEY=VALUE ...]` reads AReaL's configuration plus a "
        "`vlrollout:` section. Settings that cannot run together (dynamic sampling with "
        "asynchronous rollouts or several processes, a batch the processes cannot share) are "
        "refused before any process starts, in one line naming the override that fixes them.",
        "",
        "## AReaL's sections",
        "",
        areal_paragraph(RECIPE),
    ]
    for prefix, defaults in SECTIONS:
        cls = type(defaults)
        lines += ["", f"## `{prefix}`", "", summary(cls), ""]
        if cls is EngineConfig:
            lines += [
                "The same section is `vlrollout run`'s `engine:` (its keys without the "
                f"`vlrollout.` prefix); there `model` defaults to `{EngineConfig().model}`.",
                "",
            ]
        lines += table(prefix, defaults)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/config.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC.relative_to(REPO)} is stale: run `make config-doc`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
