from importlib.metadata import EntryPoint

import pytest

import vlrollout.registry
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.processors.registry import (
    ENTRY_POINT_GROUP,
    available_preprocessors,
    get_preprocessor,
    register_preprocessor,
    resolve_preprocessor,
    unregister_preprocessor,
)
from vlrollout.registry import UnknownNameError


def make_marker(**kwargs):
    return ("made", kwargs)


@pytest.fixture
def clean_name():
    names = []
    yield names.append
    for n in names:
        unregister_preprocessor(n)


def test_builtin_auto(offline):
    pre = get_preprocessor("auto", processor=offline("qwen2_vl"), max_pixels=3600)
    assert isinstance(pre, AutoProcessorPreprocessor) and pre.max_pixels == 3600


def test_register_and_get(clean_name):
    clean_name("mine")
    register_preprocessor("mine", make_marker)
    assert resolve_preprocessor("mine")(a=1) == ("made", {"a": 1})
    assert "mine" in available_preprocessors()
    with pytest.raises(ValueError, match="already registered"):
        register_preprocessor("mine", lambda **kw: None)
    register_preprocessor("mine", dict, overwrite=True)
    assert resolve_preprocessor("mine")(a=2) == {"a": 2}
    with pytest.raises(TypeError, match="'mine': the factory returned a dict without a prepare"):
        get_preprocessor("mine", a=2)  # what it builds is held to the contract


@pytest.mark.parametrize("name", ["", "a.b", "auto"])
def test_register_rejects_bad_names(name):
    with pytest.raises(ValueError):
        register_preprocessor(name, make_marker)


def test_register_rejects_non_callable():
    with pytest.raises(TypeError):
        register_preprocessor("x", 3)


def test_import_path():
    factory = resolve_preprocessor(f"{__name__}.make_marker")
    assert factory is make_marker


def test_import_path_errors_name_the_path():
    with pytest.raises(ImportError, match="no_such_pkg_xyz.factory"):
        resolve_preprocessor("no_such_pkg_xyz.factory")
    with pytest.raises(AttributeError, match="vlrollout.processors.auto.Nope"):
        resolve_preprocessor("vlrollout.processors.auto.Nope")
    with pytest.raises(TypeError, match="non-callable"):
        resolve_preprocessor("vlrollout.processors.registry.ENTRY_POINT_GROUP")


def test_unknown_plain_name_lists_known():
    with pytest.raises(UnknownNameError, match="auto"):
        resolve_preprocessor("definitely_unknown")


def test_installed_entry_point_table():
    """pyproject.toml's [project.entry-points."vlrollout.processors"] is installed."""
    from importlib.metadata import entry_points

    (ep,) = entry_points(group=ENTRY_POINT_GROUP, name="auto")
    assert ep.load() is AutoProcessorPreprocessor


def test_third_party_entry_point(monkeypatch):
    ep = EntryPoint(name="ext", value=f"{__name__}:make_marker", group=ENTRY_POINT_GROUP)
    broken = EntryPoint(name="broken", value="no_such_pkg_xyz:f", group=ENTRY_POINT_GROUP)

    def fake_entry_points(group, name=None):
        eps = [e for e in (ep, broken) if e.group == group]
        return [e for e in eps if name is None or e.name == name]

    monkeypatch.setattr(vlrollout.registry, "entry_points", fake_entry_points)
    assert resolve_preprocessor("ext")(b=2) == ("made", {"b": 2})
    assert "ext" in available_preprocessors()
    with pytest.raises(ImportError, match="broken.*no_such_pkg_xyz"):
        resolve_preprocessor("broken")


def test_registered_name_wins_over_entry_point(monkeypatch, clean_name):
    clean_name("ext")
    ep = EntryPoint(name="ext", value=f"{__name__}:make_marker", group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(vlrollout.registry, "entry_points", lambda group, name=None: [ep])
    register_preprocessor("ext", dict)
    assert resolve_preprocessor("ext")(c=3) == {"c": 3}
