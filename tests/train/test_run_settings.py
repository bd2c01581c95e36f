"""A resumed training run keeps the settings it was started with."""

from __future__ import annotations

import pytest

from vlrollout.errors import ConfigError
from vlrollout.train.config import load_config
from vlrollout.train.settings import SETTINGS_FILE, check_settings


def _cfg(tmp_path, *overrides: str):
    return load_config(
        "examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}", *overrides]
    )


def test_resuming_with_other_settings_is_refused_naming_each(tmp_path):
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    assert (tmp_path / SETTINGS_FILE).is_file()
    changed = _cfg(tmp_path, "actor.optimizer.lr=5e-5", "gconfig.n_samples=2", "seed=7")
    with pytest.raises(ConfigError) as e:
        check_settings(tmp_path, changed, resuming=True)
    message = str(e.value)
    assert "holds a run trained with other settings" in message
    for key in ("actor.optimizer.lr: 0.0001 → 5e-05", "gconfig.n_samples: 8 → 2", "seed: 1 → 7"):
        assert key in message, message


def test_the_same_settings_or_a_longer_run_resume(tmp_path):
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    check_settings(tmp_path, _cfg(tmp_path), resuming=True)
    check_settings(tmp_path, _cfg(tmp_path, "total_train_steps=99"), resuming=True)


def test_a_new_run_in_the_folder_records_its_own_settings(tmp_path):
    check_settings(tmp_path, _cfg(tmp_path, "seed=3"), resuming=False)
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)  # no checkpoint: nothing to keep
    check_settings(tmp_path, _cfg(tmp_path), resuming=True)


def test_vlrollout_train_refuses_to_resume_with_another_lr_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    """A folder with a checkpoint and its settings: the rerun with another learning rate stops
    with exit 2 naming the change (it resumed and mixed both runs in metrics.jsonl)."""
    import json

    from vlrollout.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("the actor was built before the settings were checked")

    monkeypatch.setattr("vlrollout.train.session.build_actor", refuse)
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    step = tmp_path / "checkpoints" / "step_3"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"step": 3}))
    (tmp_path / "checkpoints" / "latest").write_text("step_3")
    args = ["--config", "examples/train_grounding.yaml", f"vlrollout.output={tmp_path}"]
    assert main(["train", *args, "actor.optimizer.lr=5e-5"]) == 2
    err = capsys.readouterr().err
    assert "holds a run trained with other settings" in err and "5e-05" in err


def test_resuming_on_changed_data_or_reward_normalisation_is_refused(tmp_path):
    """The data file's contents are kept with its path (a file rewritten in place, or another
    one under the same relative path from another folder), and so is how rewards become
    advantages."""
    data = tmp_path / "train.jsonl"
    data.write_text('{"id": "a"}\n')
    out = tmp_path / "run"
    check_settings(out, _cfg(out, f"train_dataset.path={data}"), resuming=False)
    data.write_text('{"id": "b"}\n')
    with pytest.raises(ConfigError, match=r"train_dataset\.sha256: "):
        check_settings(out, _cfg(out, f"train_dataset.path={data}"), resuming=True)
    data.write_text('{"id": "a"}\n')
    changed = _cfg(out, f"train_dataset.path={data}", "actor.reward_norm.std_level=batch")
    with pytest.raises(ConfigError, match=r"actor\.reward_norm\.std_level: "):
        check_settings(out, changed, resuming=True)
    check_settings(out, _cfg(out, f"train_dataset.path={data}"), resuming=True)


def test_a_run_recorded_before_a_setting_was_kept_still_resumes(tmp_path):
    """A settings file written without some of today's keys holds the run to the keys it has."""
    import json

    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    path = tmp_path / SETTINGS_FILE
    recorded = json.loads(path.read_text())
    recorded["settings"] = {
        k: v for k, v in recorded["settings"].items() if not k.startswith("actor.reward_norm")
    }
    path.write_text(json.dumps(recorded))
    check_settings(tmp_path, _cfg(tmp_path), resuming=True)
    with pytest.raises(ConfigError, match="seed: 1 → 2"):
        check_settings(tmp_path, _cfg(tmp_path, "seed=2"), resuming=True)


def test_a_folder_holding_a_vlrollout_run_is_refused(tmp_path):
    """Training wrote its report over the run's report.html and its files among the run's."""
    (tmp_path / "items").mkdir()
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "report.html").write_text("<html>run</html>")
    with pytest.raises(ConfigError, match="holds the results of a vlrollout run"):
        check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    assert (tmp_path / "report.html").read_text() == "<html>run</html>"
    assert not (tmp_path / SETTINGS_FILE).exists()


@pytest.mark.parametrize(
    "changed",
    [
        "vlrollout.eval_seed=999",  # other synthetic held-out items: the control compares others
        "vlrollout.eval_items=3",
        "vlrollout.eval_task=refcoco",
        "vlrollout.eval_samples=2",
        "total_train_epochs=3",  # sizes AReaL's learning-rate schedule
    ],
)
def test_the_held_out_set_and_the_schedule_length_are_the_runs_own(tmp_path, changed):
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    with pytest.raises(ConfigError, match=changed.split("=")[0]):
        check_settings(tmp_path, _cfg(tmp_path, changed), resuming=True)


@pytest.mark.parametrize(
    ("override", "changed"),
    [
        ("actor.adv_norm={mean_level: batch, std_level: batch}", "actor.adv_norm.mean_level"),
        ("vlrollout.data_map={question: q}", "vlrollout.data_map"),
        ("+actor.eps_clip_higher=0.35", "actor.eps_clip_higher"),
        ("+actor.mask_no_eos_with_zero=true", "actor.mask_no_eos_with_zero"),
        ("+actor.reward_clip=5", "actor.reward_clip"),
        ("+actor.importance_sampling_level=sequence", "actor.importance_sampling_level"),
    ],
)
def test_a_setting_recorded_empty_or_not_at_all_cannot_change_on_resume(
    tmp_path, override, changed
):
    """A setting null or empty in the first run and given now (or a loss setting) shapes the
    rest of the run as much as the ones that were compared."""
    check_settings(tmp_path, _cfg(tmp_path), resuming=False)
    with pytest.raises(ConfigError, match=changed.replace(".", r"\.")):
        check_settings(tmp_path, _cfg(tmp_path, override), resuming=True)
