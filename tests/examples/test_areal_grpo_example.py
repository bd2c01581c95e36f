"""The AReaL GRPO example and the remote-engine path, checked without GPUs or servers.

What cannot run here (SGLang/vLLM servers, the FSDP actor) is replaced by the pieces AReaL itself
uses on the way: its config loader, its RPC serialisation of ``workflow_kwargs`` and data items,
its ``import_from_string`` and ``GroupedRolloutWorkflow``, and its remote engine classes
(constructed, never initialised).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import shlex
from pathlib import Path

import orjson
import pytest
from areal.api import RolloutWorkflow
from areal.api.alloc_mode import ModelAllocation
from areal.api.cli_args import GRPOConfig, load_expr_config
from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
from areal.infra.rpc.serialization import deserialize_value, serialize_value
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils import logging as areal_logging
from areal.utils.dynamic_import import import_from_string

from examples.areal_grpo import rewards as example_rewards
from examples.areal_grpo.config import VisionGRPOConfig, VLRolloutConfig
from examples.areal_grpo.train_vision_grpo import (
    WORKFLOW,
    load_dataset,
    train_kwargs,
    workflow_kwargs,
)
from vlrollout.cli import run_config_from_flags
from vlrollout.datasets import DataFileError
from vlrollout.engine.factory import remote_engine
from vlrollout.run.config import RunConfig
from vlrollout.testing.scripted_engine import ScriptedEngine
from vlrollout.tiny.synthetic import generate_items, write_dataset
from vlrollout.workflows import VisionRLVRWorkflow

# AReaL's config loader imports swanlab (stats logging), which warns about Python 3.13 enums.
pytestmark = pytest.mark.filterwarnings(
    "ignore:In 3.13 classes created inside an enum will not become a member:DeprecationWarning"
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_YAML = REPO / "examples" / "areal_grpo" / "vision_grpo.yaml"
SCALE_OUT_DOC = REPO / "docs" / "scale_out.md"


def _load(tmp: Path, *overrides: str) -> VisionGRPOConfig:
    # load_expr_config writes config.yaml under cluster.fileroot and reconfigures AReaL's name
    # resolver: both are pointed into tmp.
    config, _ = load_expr_config(
        [
            "--config",
            str(EXAMPLE_YAML),
            f"cluster.fileroot={tmp / 'fileroot'}",
            f"cluster.name_resolve.nfs_record_root={tmp / 'name_resolve'}",
            *overrides,
        ],
        VisionGRPOConfig,
    )
    return config


def _rpc_round_trip(value):
    """What AReaL's single-controller mode does to workflow_kwargs, data and the config."""
    return deserialize_value(orjson.loads(orjson.dumps(serialize_value(value))))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("areal"))


@pytest.fixture
def model_dir(tmp_path, qwen2vl_processor):
    """A local model folder as AReaL and the servers get it (tokenizer + processor files)."""
    path = tmp_path / "model"
    qwen2vl_processor.save_pretrained(path)
    return path


@pytest.fixture
def sample_file(tmp_path):
    """A JSONL in vlrollout's data-item format: one count, one ground and one caption item."""
    return write_dataset(generate_items("mix", 3, seed=7), tmp_path / "data")


# -- the YAML ----------------------------------------------------------------------------------


def test_yaml_resolves_with_areals_loader(config):
    assert isinstance(config, VisionGRPOConfig) and isinstance(config, GRPOConfig)
    assert (config.experiment_name, config.trial_name) == ("vision-grpo", "trial0")
    model = "Qwen/Qwen2.5-VL-3B-Instruct"
    assert config.actor.path == config.tokenizer_path == model
    assert config.rollout.tokenizer_path == config.vlrollout.processor_path == model
    assert config.sglang.model_path == config.vllm.model == model
    assert config.sglang.enable_multimodal
    # The per-engine backends parse with AReaL's allocation parser.
    assert ModelAllocation.from_str(config.rollout.backend).backend == "sglang"
    assert ModelAllocation.from_str(config.actor.backend).backend == "fsdp"
    assert config.scheduler.type == "local"
    # GRPO: the group size is gconfig.n_samples, and rewards are normalised per group of it.
    assert config.gconfig.n_samples == config.actor.reward_norm.group_size == 4
    assert config.actor.reward_norm.mean_level == "group"
    assert config.rollout.consumer_batch_size == config.train_dataset.batch_size == 8
    assert config.train_dataset.path == "assets/samples/data.jsonl"
    assert config.valid_dataset is not None and config.valid_dataset.type == "rl"
    assert config.vlrollout == VLRolloutConfig(
        reward="examples.areal_grpo.rewards.shapes", processor_path=model
    )
    assert config.stats_logger.fileroot == config.cluster.fileroot


def test_yaml_takes_areal_overrides_including_vllm(tmp_path):
    config = _load(
        tmp_path,
        "rollout.backend=vllm:d1",
        "vlrollout.max_pixels=1003520",
        "+sglang.attention_backend=triton",  # not in the YAML: needs the "+"
    )
    assert ModelAllocation.from_str(config.rollout.backend).backend == "vllm"
    assert config.vlrollout.max_pixels == 1003520
    assert config.sglang.attention_backend == "triton"
    written = next((tmp_path / "fileroot").rglob("config.yaml"))
    assert "vllm:d1" in written.read_text()


def test_yaml_dataset_loads_and_every_task_has_a_reward(config):
    items = load_dataset(REPO / config.train_dataset.path)
    assert {item["task"] for item in items} == set(example_rewards.shapes.rewards)


def test_registry_name_as_reward_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="import path.*get_reward\\('count'\\)"):
        VLRolloutConfig(reward="count")
    with pytest.raises(ValueError, match="min_pixels .* exceeds"):
        VLRolloutConfig(min_pixels=100, max_pixels=10)


def test_config_class_survives_areals_worker_serialisation(config):
    # The single-controller scheduler sends the config to every worker with its class path.
    back = _rpc_round_trip(config)
    assert type(back) is VisionGRPOConfig
    assert back == config


# -- the workflow, as AReaL's rollout workers build it ----------------------------------------


def test_train_kwargs_bind_to_ppotrainer(config):
    from areal import PPOTrainer

    kwargs = train_kwargs(config)
    inspect.signature(PPOTrainer.train).bind(object(), **kwargs)
    inspect.signature(PPOTrainer.__init__).bind(
        object(), config, train_dataset=[], valid_dataset=[]
    )
    assert kwargs["workflow"] == kwargs["eval_workflow"] == "vlrollout.workflows.VisionRLVRWorkflow"
    assert kwargs["workflow_kwargs"]["gconfig"] == config.gconfig
    assert kwargs["eval_workflow_kwargs"]["gconfig"] == config.eval_gconfig
    # the per-item workflows share their state by name, training and evaluation apart
    shares = {kwargs[k]["share"] for k in ("workflow_kwargs", "eval_workflow_kwargs")}
    assert len(shares) == 2


def test_main_hands_config_datasets_and_workflow_to_ppotrainer(monkeypatch, tmp_path, sample_file):
    import areal

    from examples.areal_grpo import train_vision_grpo

    calls = {}

    class FakeTrainer:  # PPOTrainer needs GPUs and servers; record what main() gives it
        def __init__(self, config, train_dataset=None, valid_dataset=None):
            calls["init"] = (config, train_dataset, valid_dataset)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def train(self, **kwargs):
            calls["train"] = kwargs

    monkeypatch.setattr(areal, "PPOTrainer", FakeTrainer)
    train_vision_grpo.main(
        [
            "--config",
            str(EXAMPLE_YAML),
            f"cluster.fileroot={tmp_path / 'fileroot'}",
            f"cluster.name_resolve.nfs_record_root={tmp_path / 'name_resolve'}",
            f"train_dataset.path={sample_file}",
            f"valid_dataset.path={sample_file}",
        ]
    )
    config, train, valid = calls["init"]
    assert isinstance(config, VisionGRPOConfig)
    assert (
        [i["id"] for i in train]
        == [i["id"] for i in valid]
        == [i["id"] for i in load_dataset(sample_file)]
    )
    assert calls["train"] == train_kwargs(config)


def test_workflow_kwargs_travel_as_json_and_construct_the_workflow(
    config, tokenizer, qwen2vl_processor
):
    kwargs = workflow_kwargs(config, config.gconfig)
    assert _rpc_round_trip(kwargs) == kwargs  # nothing in them needs pickling
    cls = import_from_string(WORKFLOW)
    assert cls is VisionRLVRWorkflow and issubclass(cls, RolloutWorkflow)
    # The paths name a hub model this machine cannot fetch: substitute the offline objects.
    workflow = cls(**{**kwargs, "tokenizer": tokenizer, "processor": qwen2vl_processor})
    assert workflow.ctx.reward.reward_fn is example_rewards.shapes
    assert workflow.ctx.processor is qwen2vl_processor
    assert workflow.ctx.gconfig.max_new_tokens == config.gconfig.max_new_tokens


def test_workflow_from_local_paths_runs_a_grpo_group(config, tokenizer, model_dir, sample_file):
    # The workflow loads tokenizer and processor from the paths, as on AReaL's workers.
    local = dataclasses.replace(
        config,
        tokenizer_path=str(model_dir),
        vlrollout=dataclasses.replace(config.vlrollout, processor_path=str(model_dir)),
    )
    kwargs = _rpc_round_trip(workflow_kwargs(local, local.gconfig))
    workflow = import_from_string(WORKFLOW)(**kwargs)
    group = GroupedRolloutWorkflow(
        workflow, local.gconfig.n_samples, areal_logging.getLogger("test")
    )

    item = next(i for i in load_dataset(sample_file) if i["task"] == "count")
    answer = tokenizer.encode(str(item["answer"]), add_special_tokens=False)
    engine = ScriptedEngine([answer + [tokenizer.eos_token_id]])
    traj = asyncio.run(group.arun_episode(engine, _rpc_round_trip(item)))

    assert check_trajectory_format(traj)
    assert traj["input_ids"].shape[0] == local.gconfig.n_samples
    assert traj["rewards"].tolist() == [1.0] * local.gconfig.n_samples
    assert all(req.image_data and req.vision_msg_vllm for req in engine.requests)
    assert workflow.ledger.accepted == local.gconfig.n_samples and workflow.ledger.rejected == 0


def test_example_rewards_route_by_task():
    assert example_rewards.shapes("p", "<answer>3</answer>", [], [], task="count", answer=3) == 1.0
    assert example_rewards.grounding_iou.family == "qwen2_5_vl"


# -- the dataset loader -----------------------------------------------------------------------


def test_dataset_items_carry_absolute_image_paths(sample_file):
    items = load_dataset(sample_file)
    assert [i["task"] for i in items] == ["count", "ground", "caption"]
    for item in items:
        assert item["messages"] and len(item["images"]) == 1
        assert Path(item["images"][0]).is_absolute() and Path(item["images"][0]).is_file()


def test_dataset_without_messages_is_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "x1", "images": ["a.png"]}) + "\n")
    with pytest.raises(DataFileError, match="item x1 has no 'messages'"):
        load_dataset(path)


# -- vlrollout run against remote servers ------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "cls_name"), [("sglang", "RemoteSGLangEngine"), ("vllm", "RemotevLLMEngine")]
)
def test_remote_engine_is_areals_own_class(kind, cls_name):
    engine = remote_engine(kind, tokenizer_path="some/path", max_concurrent_rollouts=8)
    assert type(engine).__name__ == cls_name and type(engine).__module__.startswith("areal.engine")
    assert engine.config.backend.startswith(kind)
    assert engine.config.tokenizer_path == "some/path"
    assert engine.config.max_concurrent_rollouts == 8
    # No processor on remote engines: the workflow's parity check skips them (see the doc).
    assert getattr(engine, "processor", None) is None


def test_run_config_with_remote_engine(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "engine: {kind: sglang, model: /models/qwen, addresses: ['10.0.0.1:30000', '10.0.0.2:30000']}\n"
    )
    cfg = RunConfig.load(path)
    assert cfg.engine.kind == "sglang" and cfg.engine.addresses == [
        "10.0.0.1:30000",
        "10.0.0.2:30000",
    ]

    path.write_text("engine: {kind: vllm, model: /models/qwen}\n")
    with pytest.raises(ValueError, match="engine.kind='vllm' needs engine.addresses"):
        RunConfig.load(path)


def _doc_commands(prefix: str) -> list[str]:
    lines = SCALE_OUT_DOC.read_text().replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip().startswith(prefix)]


def test_vlrollout_run_commands_in_the_doc_parse_into_remote_configs():
    commands = _doc_commands("vlrollout run")
    assert commands, f"no `vlrollout run` command in {SCALE_OUT_DOC}"
    for command in commands:
        cfg = run_config_from_flags(shlex.split(command)[2:])
        assert cfg.engine.kind in ("sglang", "vllm") and cfg.engine.addresses, command


def test_areal_commands_in_the_doc_name_existing_files():
    commands = _doc_commands("python3 -m examples.areal_grpo") + _doc_commands(
        "PYTHONPATH=$PWD python3 -m areal.infra.launcher"
    )
    assert commands
    for command in commands:
        words = shlex.split(command)
        config_path = words[words.index("--config") + 1]
        assert (REPO / config_path).is_file(), command


def test_parity_snippet_in_the_doc_runs(model_dir):
    code = re.search(r"```python\n(.*?)```", SCALE_OUT_DOC.read_text(), re.S).group(1)
    for placeholder in ("/path/to/model", "/path/the/server/serves"):
        assert placeholder in code
        code = code.replace(placeholder, str(model_dir))
    exec(compile(code, str(SCALE_OUT_DOC), "exec"), {})  # raises ParityError on a difference
