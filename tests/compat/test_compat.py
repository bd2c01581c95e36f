"""Each compatibility module refuses a library version it was not written for, and every touch
point it names exists in the installed one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlrollout.compat import IncompatibleLibrary, require

REPO = Path(__file__).resolve().parents[2]


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


def test_torch_touch_points_work():
    import torch._dynamo

    from vlrollout.compat.torch import maybe_mark_dynamic

    maybe_mark_dynamic(torch.zeros(2, 3), 0)
    assert isinstance(torch._dynamo.config.disable, bool)  # what disable_dynamo sets


def test_attn_implementation_reads_the_models_attention():
    from transformers import Qwen2Config

    from vlrollout.compat.transformers import attn_implementation

    config = Qwen2Config(num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    assert attn_implementation(config) == "sdpa"
    assert attn_implementation(None) is None
