"""Each compatibility module refuses a library version it was not written for, and every touch
point it names exists in the installed one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlrollout.compat import IncompatibleLibrary, require

REPO = Path(__file__).resolve().parents[2]
PACKAGE = [REPO / "vlrollout", REPO / "processors", REPO / "rewards"]


@pytest.mark.parametrize("version", ["0.9.1", "1.1.0", "2.0.0"])
def test_another_areal_version_is_refused_with_the_fix(version):
    with pytest.raises(IncompatibleLibrary, match=rf"areal >= 1.0, < 1.1 .* areal {version} is"):
        require("areal", (1, 0), (1, 1), version)


def test_written_for_versions_pass():
    require("areal", (1, 0), (1, 1), "1.0.4")
    require("transformers", (5, 0), (5, 4), "5.3.0")
    with pytest.raises(IncompatibleLibrary, match="requirements.lock"):
        require("transformers", (5, 0), (5, 4), "5.4.0.dev0")


def test_import_fails_cleanly_when_the_installed_version_differs():
    """A stand-in ``importlib.metadata.version`` reports AReaL 1.1: importing the module fails
    with the library, both versions and the fix, not an AttributeError later."""
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '1.1.0' if name == 'areal' else real(name)\n"
        "import vlrollout.compat.areal\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode != 0
    assert "IncompatibleLibrary: vlrollout was written for areal >= 1.0, < 1.1" in proc.stderr
    assert "areal 1.1.0 is installed" in proc.stderr


def test_areal_touch_points_exist():
    from areal.engine.fsdp_engine import FSDPEngine

    from vlrollout.compat import areal as compat

    for name in compat.ENGINE_METHODS:
        assert callable(getattr(FSDPEngine, name, None)), name
    assert compat.GroupedRolloutWorkflow.__module__.startswith("areal.")
    assert compat.WorkflowExecutor.__module__.startswith("areal.")


def test_a_missing_areal_method_names_itself():
    from vlrollout.compat.areal import wrap_create_optimizer

    with pytest.raises(IncompatibleLibrary, match=r"object has no _create_optimizer\(\)"):
        wrap_create_optimizer(object(), lambda f: f)


def test_transformers_touch_points_work():
    from transformers import ProcessorMixin
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    from vlrollout.compat.transformers import cache_of, layer_of, merge_kwargs_of

    keys, values = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    cache = cache_of([layer_of(keys, values)])
    assert cache.get_seq_length() == 5
    assert cache.layers[0].keys is keys and cache.layers[0].values is values
    assert merge_kwargs_of(ProcessorMixin) is ProcessorMixin._merge_kwargs
    assert callable(Qwen2VLModel.get_rope_index)


PRIVATE_ATTRIBUTES = {
    "_prepare_mb_list",
    "_create_optimizer",
    "_save_model_to_hf",
    "_cast_to_compute_dtype",
    "_load_optimizer_state",
    "_merge_kwargs",
    "_executors",
    "_recreate_executor",
    "_processes",
    "_broken",
}
PRIVATE_MODULES = ("areal.infra", "transformers.cache_utils")


def test_no_private_library_name_outside_the_compat_modules():
    """Read as code (``ast``): attribute accesses and imports, not prose."""
    found = []
    for root in PACKAGE:
        for path in root.rglob("*.py"):
            if "compat" in path.relative_to(REPO).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    PRIVATE_MODULES
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module}")
    assert found == []
