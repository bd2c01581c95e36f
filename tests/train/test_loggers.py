"""``vlrollout.train.loggers`` on AReaL's ``StatsLogger`` without a training run: what a step's
records become in TensorBoard, and the settings refused before training."""

from __future__ import annotations

import io

import numpy as np
import pytest
from areal.api.io_struct import FinetuneSpec
from PIL import Image

from tests.train.trackers import tensorboard
from vlrollout.train.config import load_config
from vlrollout.train.loggers import TrainLoggers
from vlrollout.train.samples import HeldOutRollout

CONFIG = "examples/train_grounding.yaml"
FT_SPEC = FinetuneSpec(total_train_epochs=1, dataset_size=8, train_batch_size=2)


def test_nothing_is_built_without_a_tracker(tmp_path):
    loggers = TrainLoggers.open(load_config(CONFIG, [f"vlrollout.output={tmp_path}"]), FT_SPEC)
    loggers.add({"step": 1, "reward_mean": 0.5})
    assert loggers.stats is None and loggers.pending == {}
    loggers.close()


def test_records_reach_tensorboard_under_their_step(tmp_path):
    cfg = load_config(
        CONFIG, [f"vlrollout.output={tmp_path}", f"stats_logger.tensorboard.path={tmp_path}/tb"]
    )
    loggers = TrainLoggers.open(cfg, FT_SPEC)
    picture = Image.new("RGB", (30, 20), (10, 20, 30))
    shown = [
        HeldOutRollout(0, 0, "a", "ground", "<|box_start|>(1,2)", 0.25, image=picture),
        HeldOutRollout(0, 1, "b", "count", None, 0.0),  # rejected: text, no image
    ]
    loggers.add({"step": 0, "eval/mean": 0.125, "eval/n": 4})
    loggers.rollouts(0, shown)
    loggers.commit()
    areal = {"ppo_actor/update/approx_kl/avg": 1e-3, "ppo_actor/update/approx_kl__count": 7}
    loggers.add({"step": 1, "reward_mean": -0.5, "lr": None, "task": "x", "areal": areal})
    loggers.add({"step": 2, "reward_mean": 0.75})
    loggers.add({"step": 2, "eval/mean": 0.5})  # an evaluation after step 2: the same step
    loggers.close()

    events = tensorboard(tmp_path / "tb")
    scalars = {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }
    assert scalars == {
        "eval/mean": [(0, 0.125), (2, 0.5)],
        "eval/n": [(0, 4.0)],
        "reward_mean": [(1, -0.5), (2, 0.75)],
        "areal/ppo_actor/update/approx_kl/avg": [(1, pytest.approx(1e-3))],
    }
    (image,) = events.Images("eval_rollouts/0")
    assert (image.step, image.width, image.height) == (0, 30, 20)
    decoded = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
    assert (decoded == (10, 20, 30)).all()
    assert "eval_rollouts/1" not in events.Tags()["images"]
    texts = {
        tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
        for tag in events.Tags()["tensors"]
    }
    assert "item a (ground): reward 0.250" in texts["eval_rollouts/0/text_summary"]
    assert "    <|box_start|>(1,2)" in texts["eval_rollouts/0/text_summary"]
    assert "rejected" in texts["eval_rollouts/1/text_summary"]


def test_swanlab_local_mode_is_refused_when_the_config_loads(capsys):
    from vlrollout.cli import main

    status = main(["train", "--config", CONFIG, "stats_logger.swanlab.mode=local"])
    err = capsys.readouterr().err
    assert status == 2 and "stats_logger.swanlab.mode=local" in err and "offline" in err


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path, monkeypatch):
    """A run resumed from its step-1 checkpoint writes steps 2 and 3 again: TensorBoard shows
    the resumed run's values, once per step, as metrics.jsonl is cut back to the checkpoint.

    An event file's name holds the second it was made in, so the resumed run's writer is made
    a minute later here (a resume loads a model first), not in the same second: its file would
    replace the first run's."""
    from types import SimpleNamespace

    import tensorboardX.event_file_writer as event_files

    clock = SimpleNamespace(time=lambda: 1_800_000_000.0)
    monkeypatch.setattr(event_files, "time", clock)
    cfg = load_config(
        CONFIG, [f"vlrollout.output={tmp_path}", f"stats_logger.tensorboard.path={tmp_path}/tb"]
    )
    first = TrainLoggers.open(cfg, FT_SPEC)
    for step in (1, 2, 3):
        first.add({"step": step, "reward_mean": float(step)})
    first.close()
    clock.time = lambda: 1_800_000_060.0
    resumed = TrainLoggers.open(cfg, FT_SPEC, resume_step=1)
    for step in (2, 3):
        resumed.add({"step": step, "reward_mean": 10.0 * step})
    resumed.close()
    events = tensorboard(tmp_path / "tb")
    got = [(e.step, e.value) for e in events.Scalars("reward_mean")]
    assert got == [(1, 1.0), (2, 20.0), (3, 30.0)]


def test_wandb_online_without_an_api_key_is_refused_when_the_config_loads(
    capsys, monkeypatch, tmp_path
):
    """W&B's log-in would fail only after the model loaded (exit 1): no key in the
    environment, the config or ~/.netrc is a usage error naming the ways to give one."""
    from vlrollout.cli import main

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    status = main(["train", "--config", CONFIG, "stats_logger.wandb.mode=online"])
    err = capsys.readouterr().err
    assert status == 2 and "stats_logger.wandb.mode=online needs a W&B API key" in err
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y\n")
    from vlrollout.train.config import load_config as load

    cfg = load(CONFIG, [f"vlrollout.output={tmp_path}/o", "stats_logger.wandb.mode=online"])
    assert cfg.stats_logger.wandb.mode == "online"
