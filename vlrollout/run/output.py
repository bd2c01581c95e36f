"""The output folder of a run: usable, and holding results of this configuration only.

``run.json`` records the settings that shape the results. Rerunning into the folder with the same
settings resumes; with different ones it is refused, naming each difference, unless
``--overwrite`` removes the earlier results first (only the files a run writes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vlrollout.errors import OutputFolderError
from vlrollout.files import check_writable_folder, differences, remove_outputs

RUN_FILE = "run.json"
#: Settings that do not change what an item's results are (resuming with them changed is fine).
NOT_RESULT_SHAPING = (
    "output",
    "limit",
    "concurrency",
    "fail_fast",
    "engine.addresses",
    "reward_timeout_s",
    "prompt_cache_bytes",
    # How decode steps run, not what they compute (the compiled step is taken only where its
    # logprobs are within 1e-4 of the model's own); absent from run folders written before it.
    "engine.compile",
)
RUN_OUTPUTS = ("items", "trajectories", "summary.json", "report.html", RUN_FILE)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


def fingerprint(cfg: Any) -> dict[str, Any]:
    """The result-shaping settings of ``cfg`` as a flat ``{dotted key: value}`` dict."""
    flat = _flatten(json.loads(json.dumps(cfg.to_dict(), default=str)))
    for key in ("data", "engine.model"):  # the same file named from another working folder
        if isinstance(flat.get(key), str):
            flat[key] = os.path.abspath(flat[key])
    return {k: v for k, v in flat.items() if k not in NOT_RESULT_SHAPING}


def prepare_output(
    output: Path, cfg: Any, overwrite: bool = False, extra: dict[str, Any] | None = None
) -> None:
    """Make ``output`` ready for ``cfg``: writable, and either new, a resume of the same
    configuration (its result-shaping settings and ``extra``, what else shapes the results:
    :func:`vlrollout.run.main.reward_fingerprint`), or cleared by ``overwrite``.

    Raises:
        OutputFolderError: the folder is a file or not writable, or holds results of another
            configuration (the message lists the differences).
    """
    check_writable_folder(output)
    run_file = output / RUN_FILE
    new = {**fingerprint(cfg), **(extra or {})}
    if overwrite:
        remove_outputs(output, RUN_OUTPUTS)
    elif run_file.exists():
        try:
            old = json.loads(run_file.read_text()).get("config", {})
        except (OSError, ValueError):
            old = {}
        diff = differences(old, new)
        if diff:
            shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
            raise OutputFolderError(
                f"output folder {output} holds results of a different configuration ({shown}); "
                "use another --output folder, or --overwrite to delete those results"
            )
    elif any((output / name).exists() for name in ("items", "trajectories")):
        has_items = any((output / "items").glob("*.json")) if (output / "items").is_dir() else False
        if has_items:
            raise OutputFolderError(
                f"output folder {output} holds results without a {RUN_FILE} (an older run?); "
                "use another --output folder, or --overwrite to delete those results"
            )
    from vlrollout.files import atomic_write_json

    atomic_write_json(run_file, {"config": new})
