"""Packaging layout, the console script and run configuration."""

from __future__ import annotations

import platform
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from vlrollout.cli import run_config_from_flags
from vlrollout.run.config import RunConfig

REPO = Path(__file__).resolve().parents[1]


def _package_dirs() -> dict[str, Path]:
    """Every folder with an __init__.py under the three package roots, by dotted name."""
    roots = {
        "vlrollout": REPO / "vlrollout",
        "vlrollout.processors": REPO / "processors",
        "vlrollout.rewards": REPO / "rewards",
    }
    found = {}
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found[".".join([name, *rel.parts]) if rel.parts else name] = init.parent
    return found


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert set(_package_dirs()) == listed


def test_processors_and_rewards_install_under_vlrollout():
    import vlrollout.processors
    import vlrollout.rewards

    assert Path(vlrollout.processors.__file__).parent == REPO / "processors"
    assert Path(vlrollout.rewards.__file__).parent == REPO / "rewards"


def test_help_lists_the_commands():
    out = subprocess.run(
        [sys.executable, "-m", "vlrollout.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for command in ("run", "make-samples", "train-tiny", "snapshot", "check"):
        assert command in out


def test_help_builds_every_command_without_importing_torch_or_transformers():
    """``vlrollout --help`` (and a usage error) answer in about a second: the parsers, and the
    defaults they show, import no model stack (torch and transformers take seconds)."""
    script = (
        "import sys; from vlrollout.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'av') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_yaml_then_flags(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        "group_size: 3\ngconfig: {max_new_tokens: 7, temperature: 0.5}\nengine: {kind: local, model: m}\n"
    )
    cfg = run_config_from_flags(
        ["--config", str(cfg_file), "--max-new-tokens", "9", "--model", "other"]
    )
    assert cfg.group_size == 3
    assert (cfg.gconfig.max_new_tokens, cfg.gconfig.temperature) == (9, 0.5)
    assert cfg.engine.model == "other" and cfg.engine.kind == "local"


def test_unknown_keys_and_bad_values_are_explained(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("group_sise: 3\n")
    with pytest.raises(ValueError, match="unknown key 'group_sise'.*did you mean 'group_size'"):
        RunConfig.load(cfg_file)
    with pytest.raises(ValueError, match=r"group_size \(--group-size\) must be at least 1"):
        RunConfig(group_size=0)
    with pytest.raises(ValueError, match="engine.addresses"):
        RunConfig.load(None, **{"engine.kind": "vllm"})


def test_demo_config_loads():
    cfg = RunConfig.load(REPO / "examples" / "demo.yaml")
    assert cfg.engine.kind == "local" and cfg.workflow == "vision"


def test_version_names_the_installed_versions_users_put_in_bug_reports():
    result = subprocess.run(
        [sys.executable, "-m", "vlrollout.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    for name in ("vlrollout", "areal", "torch", "transformers"):
        assert f"{name} {metadata.version(name)}" in line
    assert f"python {platform.python_version()}" in line


def test_run_takes_the_video_frame_settings_as_flags_as_serve_does():
    flags = ["--video-fps", "1.5", "--video-max-frames", "6"]
    cfg = run_config_from_flags(
        [*flags, "--video-min-pixels", "3136", "--video-max-pixels", "6272"]
    )
    assert (cfg.video_fps, cfg.video_max_frames) == (1.5, 6)
    assert (cfg.video_min_pixels, cfg.video_max_pixels) == (3136, 6272)
