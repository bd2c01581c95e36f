"""Files of a run's output folder: atomic writes that respect the umask, temp-file clean-up,
bounded collision-free names per item, and reading back what is on disk.

Every file is written to a temp file beside it and moved into place with ``os.replace``, so a
reader (or a resumed run) sees the old file or the whole new one, never half.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlrollout.errors import OutputFolderError
from vlrollout.logs import get_logger

logger = get_logger("vlrollout.files")

TEMP_SUFFIX = ".tmp"


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` can only set it, which would
    race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode() -> int:
    """``0o666`` less the umask: the mode ``open()`` would give a new file."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never half.

    The temp file (``.<name>.<random>.tmp`` beside ``path``) is left behind only by a hard kill;
    :func:`remove_temp_files` clears those when a run resumes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), _file_mode())  # mkstemp makes 0600 whatever the umask
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, default=str).encode())


def atomic_torch_save(path: Path, obj: Any) -> None:
    """``torch.save(obj)`` into ``path``, atomically (torch is imported here, not with the module:
    the JSON and text writers above are used where torch is not needed)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def remove_temp_files(output: Path) -> int:
    """Delete temp files a killed run left in ``output``; returns how many."""
    removed = 0
    for folder in (output, output / "items", output / "trajectories"):
        if folder.is_dir():
            for p in folder.glob(f".*{TEMP_SUFFIX}"):
                p.unlink(missing_ok=True)
                removed += 1
    return removed


def item_stem(item_id: str) -> str:
    """File name (without suffix) for an item: readable, bounded and unique per id.

    >>> item_stem("a/b"), item_stem("a_b")
    ('a_b-c14cddc033f6', 'a_b-648fa9b31bc7')
    """
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in item_id)[:80]
    return f"{safe}-{hashlib.sha256(item_id.encode()).hexdigest()[:12]}"


def read_outcomes(output: Path) -> dict[str, dict[str, Any]]:
    """Every finished item's outcome in ``output``, by the id stored inside the file."""
    found: dict[str, dict[str, Any]] = {}
    folder = output / "items"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            outcome = json.loads(path.read_text())
        except (OSError, ValueError):
            logger.warning("ignoring unreadable outcome file %s", path)
            continue
        if isinstance(outcome, dict) and "id" in outcome:
            found[str(outcome["id"])] = outcome
    return found


def check_writable_folder(output: Path, option: str = "--output") -> None:
    """Create ``output`` (and its parents) and check a file can be written in it, before any
    work whose results would go there. ``option``: the setting that names the folder, in the fix
    the error gives.

    Raises:
        OutputFolderError: a parent is a file, or the folder is not writable (naming the fix).
    """
    for parent in [output, *output.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise OutputFolderError(
                    f"output {output}: {parent} is a file, not a folder; pass {option} to a folder"
                )
            break
    try:
        output.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=output, prefix=".write-test.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputFolderError(
            f"output folder {output} is not writable ({e.strerror or e}); pass {option} to a "
            "folder you can write to"
        ) from None


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old → new`` for every setting that differs.

    >>> differences({"group_size": 4, "workflow": "vision"}, {"group_size": 2, "workflow": "vision"})
    ['group_size: 4 → 2']
    """
    keys = sorted(set(old) | set(new))
    return [
        f"{k}: {json.dumps(old.get(k))} → {json.dumps(new.get(k))}"
        for k in keys
        if old.get(k) != new.get(k)
    ]


def remove_outputs(output: Path, names: Sequence[str]) -> None:
    """Delete the files and folders ``names`` under ``output`` (what a recipe's ``--overwrite``
    clears: only what the recipe writes, nothing else in the folder)."""
    for name in names:
        path = output / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


_CHUNK = 1 << 20


def data_sha256(path: str | Path) -> str:
    """SHA-256 of a data file, or of a folder: every file under it, in sorted relative-path
    order, each as its path and its bytes (so a renamed or changed file changes the digest)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
