"""Reading back what the trackers wrote, each with its own library's reader where it has one:
TensorBoard's ``EventAccumulator``, SwanLab's backup ``DataStore``; W&B (its Go core writes the
offline run) ships no Python reader, so :func:`wandb_history` reads the run file's record log
and parses each record with W&B's own protobuf ``Record``."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any


def tensorboard(folder: Path) -> Any:
    """An ``EventAccumulator`` over ``folder`` with every event kept (no sampling)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    events.Reload()
    return events


def wandb_history(run_dir: Path) -> dict[int, dict[str, Any]]:
    """``{step: {key: value}}`` from an offline W&B run folder's ``run-*.wandb``; nested keys
    (an image group's ``count``, ``captions``) are joined with ``.``.

    The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB
    blocks of records, each ``crc32 (4) | length (2) | type (1) | payload``; a payload split
    over blocks is FIRST, MIDDLE..., LAST (types 2, 3, 4), a whole one FULL (1).
    """
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, part, history = 32768, 7, b"", {}
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        part += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind not in (1, 4):
            continue
        record, part = pb.Record.FromString(part), b""
        if record.WhichOneof("record_type") == "history":
            row = {
                item.key or ".".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            history[row["_step"]] = row
    return history


def swanlab_scalars(run_dir: Path) -> dict[int, dict[str, float]]:
    """``{step: {key: value}}`` of the scalars in an offline SwanLab run's ``backup.swanlab``."""
    from swanlab.data.porter.datastore import DataStore

    store = DataStore()
    store.open_for_scan(str(run_dir / "backup.swanlab"))
    out: dict[int, dict[str, float]] = {}
    for line in store:
        record = json.loads(line)
        if record["model_type"] == "Scalar":
            data = record["data"]
            out.setdefault(data["step"], {})[data["key"]] = data["metric"]["data"]
    return out
