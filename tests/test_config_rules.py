"""``vlrollout run`` and ``vlrollout train`` read one engine section, resolve paths by one rule
and refuse bad settings with one error type."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest
from areal.api.cli_args import InferenceEngineConfig

from vlrollout.engine.config import EngineConfig
from vlrollout.engine.factory import remote_engine
from vlrollout.errors import ConfigError
from vlrollout.run.config import RunConfig
from vlrollout.train.config import TrainSection, check_rules, load_config, rule_warnings

REPO = Path(__file__).resolve().parents[1]
GROUNDING = str(REPO / "examples" / "train_grounding.yaml")


def test_both_recipes_read_the_same_engine_section(tmp_path):
    run = RunConfig.load(None, dotlist=["engine.kind=vllm", "engine.addresses=[h:1]"])
    train = load_config(
        GROUNDING,
        [
            f"vlrollout.output={tmp_path}",
            "vlrollout.engine.kind=vllm",
            "vlrollout.engine.addresses=[h:1]",
        ],
    )
    assert type(run.engine) is type(train.vlrollout.engine) is EngineConfig
    assert (train.vlrollout.engine.kind, train.vlrollout.engine.addresses) == ("vllm", ["h:1"])
    assert dataclasses.replace(train.vlrollout.engine, model="m") == dataclasses.replace(
        run.engine, model="m", deterministic=False, max_batch_size=128
    )  # the training recipe decodes a whole step's requests together


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("kind=sglang", "needs engine.addresses"),
        ("kind=tpu", "engine.kind must be one of local, sglang, vllm"),
        ("device=gpu0", "must be cpu, cuda or cuda:N"),
        ("max_batch_size=0", "engine.max_batch_size must be >= 1"),
        ("addresses=[h:1]", "is for a remote engine; add --engine sglang or vllm"),
    ],
)
def test_a_bad_engine_setting_is_the_same_config_error_in_both(tmp_path, setting, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.load(None, dotlist=[f"engine.{setting}"])
    with pytest.raises(ConfigError, match=message):
        load_config(GROUNDING, [f"vlrollout.output={tmp_path}", f"vlrollout.engine.{setting}"])


def test_train_section_problems_are_config_errors():
    with pytest.raises(ConfigError, match="vlrollout.task must be"):
        TrainSection(task="segment")
    with pytest.raises(ConfigError, match="set actor.path instead"):
        TrainSection(engine=EngineConfig(model="other/model"))


def test_relative_paths_are_relative_to_the_working_folder_in_both(tmp_path, monkeypatch):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "run.yaml").write_text("data: d.jsonl\noutput: out\nengine: {model: m}\n")
    monkeypatch.chdir(tmp_path)
    run = RunConfig.load(folder / "run.yaml")
    assert (run.data, run.output, run.engine.model) == ("d.jsonl", "out", "m")
    train_yaml = folder / "train.yaml"
    train_yaml.write_text(
        "defaults:\n  - train_grounding\n  - _self_\nvlrollout:\n  output: out\nactor:\n  path: m\n"
    )
    (folder / "train_grounding.yaml").write_text(Path(GROUNDING).read_text())
    (tmp_path / "m").mkdir()  # the model folder, under the working folder
    train = load_config(str(train_yaml))
    assert (train.vlrollout.output, train.actor.path) == ("out", "m")


def test_one_remote_engine_builder_keeps_areals_rollout_settings():
    rollout = InferenceEngineConfig(backend="local", max_head_offpolicyness=3, request_timeout=7)
    engine = remote_engine("sglang", rollout, experiment_name="e", tokenizer_path="tok")
    assert type(engine).__name__ == "RemoteSGLangEngine"
    config = engine.config
    assert (config.backend, config.max_head_offpolicyness, config.request_timeout) == (
        "sglang:d1",
        3,
        7,
    )
    assert (config.experiment_name, config.tokenizer_path) == ("e", "tok")
    assert rollout.backend == "local"  # the caller's config is not changed
    with pytest.raises(ValueError, match="not a remote engine kind"):
        remote_engine("local")


def test_the_old_flat_engine_key_is_explained(tmp_path):
    with pytest.raises(
        ConfigError, match=r"vlrollout.engine is a section .*vlrollout.engine.kind="
    ):
        load_config(GROUNDING, [f"vlrollout.output={tmp_path}", "vlrollout.engine=sglang"])


def test_a_missing_relative_data_file_names_the_working_folder(tmp_path, monkeypatch):
    from vlrollout.datasets import DataFileError, check_data_path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataFileError, match=f"relative to the working folder {tmp_path}"):
        check_data_path("assets/samples/data.jsonl")


def test_a_batch_the_processes_cannot_share_is_refused_before_launch(tmp_path):
    cfg = load_config(GROUNDING, [f"vlrollout.output={tmp_path}", "train_dataset.batch_size=3"])
    check_rules(cfg, 1)
    with pytest.raises(ConfigError, match=r"batch_size=3 cannot be shared by 2 processes"):
        check_rules(cfg, 2)


COUNTING = str(REPO / "examples" / "train_count.yaml")


@pytest.mark.parametrize(
    ("world", "setting", "message"),
    [
        (2, "rollout.max_head_offpolicyness=0", r"runs in one process, got 2 \(--nproc 2\)"),
        (1, "rollout.max_head_offpolicyness=1", "needs on-policy rollouts"),
    ],
)
def test_one_override_lets_the_counting_recipe_run_async_or_on_several_processes(
    tmp_path, world, setting, message
):
    """The recipe sets dynamic sampling (and its scaling); the error names one override, and
    that override alone passes every rule."""
    cfg = load_config(COUNTING, [f"vlrollout.output={tmp_path}", setting])
    with pytest.raises(ConfigError, match=message) as info:
        check_rules(cfg, world)
    assert str(info.value).count("=false") == 1
    fixed = load_config(
        COUNTING, [f"vlrollout.output={tmp_path}", setting, "vlrollout.dynamic_sampling=false"]
    )
    check_rules(fixed, world)
    assert rule_warnings(fixed) == [
        "vlrollout.dynamic_sampling_scale=true has no effect with "
        "vlrollout.dynamic_sampling=false: every step trains its whole batch"
    ]
    assert rule_warnings(cfg) == []


def test_asynchronous_rollouts_need_a_consumer_batch_of_one_step(tmp_path):
    cfg = load_config(
        GROUNDING,
        [
            f"vlrollout.output={tmp_path}",
            "rollout.max_head_offpolicyness=1",
            "rollout.consumer_batch_size=4",
        ],
    )
    with pytest.raises(ConfigError, match=r"set rollout.consumer_batch_size=16$"):
        check_rules(cfg, 1)


def test_the_ground_metric_key_offers_iou_and_giou():
    from vlrollout.tiny.rewards import shapes_task_reward

    for metric in ("iou", "giou"):
        TrainSection(ground_metric=metric)
    for metric in ("acc", "centre", "iou_centre"):
        with pytest.raises(ConfigError, match="must be one of iou, giou"):
            TrainSection(ground_metric=metric)
        with pytest.raises(ValueError, match="must be one of iou, giou"):
            shapes_task_reward([], ground_metric=metric)


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_the_unsent_keys_are_the_ones_areals_client_leaves_out(kind):
    """``UNSENT_BY_CLIENT`` against the request AReaL's backend builds: a key with a value no
    request shows (as any field name or value) is one the server never sees."""
    import json

    from areal.api.cli_args import GenerationHyperparameters
    from areal.api.io_struct import ModelRequest
    from areal.engine.sglang_remote import SGLangBackend
    from areal.engine.vllm_remote import VLLMBackend

    from vlrollout.config import UNSENT_BY_CLIENT, check_remote_gconfig

    settings = {"min_new_tokens": 3, "frequency_penalty": 0.375, "stop": ["ZQX"]}
    backend = {"sglang": SGLangBackend, "vllm": VLLMBackend}[kind]()
    unsent = []
    for key, value in settings.items():
        g = GenerationHyperparameters(max_new_tokens=8, **{key: value})
        req = ModelRequest(input_ids=[1, 2], gconfig=g)
        body = json.dumps(backend.build_generation_request(req, with_lora=False, version=0).payload)
        names = {"min_new_tokens": ("min_new_tokens", "min_tokens")}.get(key, (key,))
        if not any(f'"{n}":' in body for n in names) and json.dumps(value).strip("[]") not in body:
            unsent.append(key)
        with pytest.raises(ConfigError, match=key) if key in unsent else contextlib.nullcontext():
            check_remote_gconfig(g, kind)
    assert tuple(unsent) == UNSENT_BY_CLIENT[kind]


@pytest.mark.parametrize(
    ("setting", "instead"),
    [
        ("+saver.freq_steps=5", "vlrollout.save_every"),
        ("+saver.freq_secs=600", "vlrollout.save_every"),
        ("+evaluator.freq_epochs=1", "vlrollout.eval_every"),
        ("+recover.mode=auto", "rerun the same command"),
        ("+recover.freq_steps=5", "rerun the same command"),
    ],
)
def test_areals_saver_evaluator_and_recover_settings_are_refused_not_ignored(
    tmp_path, setting, instead
):
    """vlrollout train saves, evaluates and resumes on its own: a setting for AReaL's own loops
    would change nothing, so it is refused, naming the setting that does the job."""
    check_rules(load_config(GROUNDING, [f"vlrollout.output={tmp_path}"]), 1)
    cfg = load_config(GROUNDING, [f"vlrollout.output={tmp_path}", setting])
    with pytest.raises(ConfigError, match=rf"^{setting[1:]} is for AReaL's own .*{instead}"):
        check_rules(cfg, 1)


def test_checkpoints_kept_must_be_a_count():
    assert TrainSection().keep_checkpoints == 2
    assert TrainSection(keep_checkpoints=0).keep_checkpoints == 0  # every one
    with pytest.raises(ConfigError, match="vlrollout.keep_checkpoints must be >= 0"):
        TrainSection(keep_checkpoints=-1)
