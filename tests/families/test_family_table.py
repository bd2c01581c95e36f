"""scripts/family_table.py: one row per family with image, video and trains columns, every
family by default, and its record written where asked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

from vlrollout.testing.tiny_families import TINY_FAMILIES

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "family_table.py"


def _script(monkeypatch):
    """The script as a module (``scripts`` is no package)."""
    spec = importlib.util.spec_from_file_location("family_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "family_table", module)  # its dataclass resolves through it
    spec.loader.exec_module(module)
    return module


def test_table_rows_and_record(tmp_path, monkeypatch, capsys):
    torch.set_num_threads(1)
    table = _script(monkeypatch)
    assert len(TINY_FAMILIES) == 14
    argv = ["family_table.py", "--families", "llava", "qwen2_vl", "--record-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    table.main()
    rec = json.loads((tmp_path / "families.json").read_text())
    rows = rec["tables"][0]["rows"]
    assert [r[0] for r in rows] == ["llava", "qwen2_vl"]
    assert rows[0][1:] == ["5/5", rows[0][2], "4/4", "—", "—", "—", "yes"]
    assert rows[1][4] == "3/3" and rows[1][6] == "2/2" and float(rows[1][5]) <= 1e-4
    assert float(rows[0][2]) <= 1e-4 and len(rec["tables"]) == 1  # no failures table
    assert "| qwen2_vl | 5/5 |" in capsys.readouterr().out
