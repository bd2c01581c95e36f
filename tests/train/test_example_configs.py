"""The training configs under examples/ load with AReaL's loader and say what they claim."""

from __future__ import annotations

import pytest
from PIL import Image

from vlrollout.train.config import check_rules, load_config, rule_warnings


@pytest.mark.parametrize(
    ("path", "task", "temperature", "model"),
    [
        ("examples/train_grounding.yaml", "ground", 0.7, "assets/tiny-qwen3vl-ground"),
        ("examples/train_count.yaml", "count", 1.0, "assets/tiny-qwen3vl-count"),
    ],
)
def test_example_config_loads(tmp_path, path, task, temperature, model):
    cfg = load_config(path, [f"vlrollout.output={tmp_path}"])
    assert cfg.vlrollout.task == task
    # The trainer's logprob temperature must be the rollout's (logprob equality).
    assert cfg.actor.temperature == cfg.gconfig.temperature == temperature
    assert cfg.actor.reward_norm.group_size == cfg.gconfig.n_samples >= 2
    assert cfg.actor.path == model and cfg.cluster.fileroot.startswith(str(tmp_path))


@pytest.mark.parametrize("offpolicy", [0, 1])
def test_the_grounding_recipe_runs_in_every_mode_without_a_warning(tmp_path, offpolicy):
    """On-policy or asynchronous, one process or two: no rule refuses the shipped recipe."""
    cfg = load_config(
        "examples/train_grounding.yaml",
        [f"vlrollout.output={tmp_path}", f"rollout.max_head_offpolicyness={offpolicy}"],
    )
    for world in (1, 2):
        check_rules(cfg, world)
    assert rule_warnings(cfg) == []


def test_group_size_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="group size"):
        load_config(
            "examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}", "gconfig.n_samples=1"]
        )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--config", "nope.yaml"], "config file nope.yaml does not exist"),
        (
            ["--config", "examples/train_grounding.yaml", "vlrollout.tsk=count"],
            "unknown key 'vlrollout.tsk'; did you mean vlrollout.task?",
        ),
        (["--config", "examples/train_grounding.yaml", "gconfig.n_samples=1"], "group size"),
        (  # was AReaL's "group_size must be a positive integer ...", naming neither key
            ["--config", "examples/train_grounding.yaml", "gconfig.n_samples=0"],
            "actor.reward_norm.group_size (gconfig.n_samples in the recipes: the GRPO group "
            "size) must be >= 2, got 0",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "gconfig.temperature=nan"],
            "gconfig.temperature must be a finite number >= 0, got nan",
        ),
        (  # a key the YAML leaves out: AReaL's loader needs `+`, and hydra's hint says so
            ["--config", "examples/train_grounding.yaml", "gconfig.top_p=0"],
            "does not set gconfig.top_p, and AReaL's loader overrides only keys the file sets: "
            "pass +gconfig.top_p=VALUE",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "+gconfig.top_p=0"],
            "gconfig.top_p must be in (0, 1], got 0",
        ),
        (  # a key of a section typed Optional[NormConfig] was called unknown
            ["--config", "examples/train_grounding.yaml", "actor.reward_norm.mean_leave1out=true"],
            "pass +actor.reward_norm.mean_leave1out=VALUE",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "actor.optimizer.min_lr_ratio=0.1"],
            "pass +actor.optimizer.min_lr_ratio=VALUE",
        ),
        (  # was hydra's "LexerNoViableAltException: --seeed"
            ["--config", "examples/train_grounding.yaml", "--seeed", "1"],
            "unknown flag '--seeed': vlrollout train takes --config and KEY=VALUE settings",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "seed"],
            "setting 'seed' must be KEY=VALUE, e.g. seed=1",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "vlrollout.ground_metric=centre"],
            "vlrollout.ground_metric must be one of iou, giou, got 'centre'",
        ),
        (
            [
                "--config",
                "examples/train_grounding.yaml",
                "train_dataset.batch_size=3",
                "--nproc",
                "2",
            ],
            "train_dataset.batch_size=3 cannot be shared by 2 processes",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "rollout.max_head_offpolicyness=-1"],
            "rollout.max_head_offpolicyness must be >= 0 (0: on-policy), got -1",
        ),
        (  # was a ZeroDivisionError once the actor was built
            ["--config", "examples/train_grounding.yaml", "train_dataset.batch_size=0"],
            "train_dataset.batch_size must be >= 1, got 0",
        ),
        (  # was read as unset: the run trained for total_train_epochs
            ["--config", "examples/train_grounding.yaml", "total_train_steps=0"],
            "total_train_steps must be >= 1 (or null: total_train_epochs decides), got 0",
        ),
        (  # was torch's "Invalid learning rate: nan" once the actor was built
            ["--config", "examples/train_grounding.yaml", "actor.optimizer.lr=nan"],
            "actor.optimizer.lr must be a finite number >= 0 (0: the control run), got nan",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "actor.optimizer.lr=-1e-4"],
            "actor.optimizer.lr must be a finite number >= 0 (0: the control run), got -0.0001",
        ),
        (  # AReaL's keys that vlrollout train does not read were accepted and ignored
            ["--config", "examples/train_grounding.yaml", "+train_dataset.shuffle=false"],
            "train_dataset.shuffle=false is not read",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "+train_dataset.max_length=5"],
            "train_dataset.max_length=5 is not read",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "+train_dataset.drop_last=false"],
            "train_dataset.drop_last=false is not read",
        ),
        (  # was every group all-equal, every advantage 0, exit 0
            ["--config", "examples/train_grounding.yaml", "gconfig.greedy=true"],
            "gconfig.greedy=true samples every episode of a group alike",
        ),
        (  # below 1e-5 the engine samples greedily, as SGLang and vLLM do
            ["--config", "examples/train_grounding.yaml", "gconfig.temperature=1e-6"],
            "gconfig.temperature must be at least 1e-05",
        ),
        (  # was importance weights off 1 before any update, and a resume that changed it
            ["--config", "examples/train_grounding.yaml", "actor.temperature=0.5"],
            "actor.temperature=0.5 differs from gconfig.temperature=0.7",
        ),
        (  # was ignored (group-of-n advantages), or with batch-level std every advantage 0
            ["--config", "examples/train_grounding.yaml", "actor.reward_norm.group_size=2"],
            "actor.reward_norm.group_size=2 differs from gconfig.n_samples=8",
        ),
        (  # was NaN losses and grad norms at every step, exit 0: the actor divides by it
            ["--config", "examples/train_grounding.yaml", "gconfig.temperature=0"],
            "gconfig.temperature must be a finite number > 0 (GRPO samples its groups), got 0",
        ),
        (  # on-policy, AReaL admitted 3 of a step's 4 items and the step waited for good
            ["--config", "examples/train_grounding.yaml", "rollout.consumer_batch_size=15"],
            "rollout.consumer_batch_size=15 is below train_dataset.batch_size (16)",
        ),
        (  # ran as 1
            ["--config", "examples/train_grounding.yaml", "actor.ppo_n_minibatches=0"],
            "actor.ppo_n_minibatches must be >= 1, got 0",
        ),
        (  # failed after the model loaded, with AReaL's "larger than capacity 2048"
            ["--config", "examples/train_grounding.yaml", "gconfig.max_new_tokens=100000"],
            "gconfig.max_new_tokens 100000 leaves no room for a prompt in the model's context of 512",
        ),
        (  # AReaL's SGLang client does not send it: the server sampled without a minimum
            [
                "--config",
                "examples/train_grounding.yaml",
                "+gconfig.min_new_tokens=5",
                "vlrollout.engine.kind=sglang",
                "vlrollout.engine.addresses=[h:1]",
            ],
            "gconfig.min_new_tokens=5: AReaL's sglang client does not send it",
        ),
        (  # the type error named the file, not the key
            ["--config", "examples/train_grounding.yaml", "rollout.max_head_offpolicyness=abc"],
            "rollout.max_head_offpolicyness",
        ),
        (
            ["--config", "examples/train_grounding.yaml", "+vlrollout.max_pixels=0"],
            "vlrollout.max_pixels must be a positive number, got 0",
        ),
        (  # checked against the model's processor before any process starts
            [
                "--config",
                "examples/train_grounding.yaml",
                "+vlrollout.min_pixels=9000",
                "+vlrollout.max_pixels=5000",
            ],
            "vlrollout.min_pixels/max_pixels: min_pixels=9000 exceeds max_pixels=5000",
        ),
    ],
)
def test_train_misuse_is_one_line_and_exit_2(args, expected, capsys):
    from vlrollout.cli import main

    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and expected in err
    assert len(err.strip().splitlines()) <= 2


def test_deterministic_rollouts_are_a_setting_of_the_example(tmp_path):
    """The examples set ``vlrollout.engine.deterministic`` (false), so it overrides without ``+``."""
    cfg = load_config(
        "examples/train_count.yaml",
        [f"vlrollout.output={tmp_path}", "vlrollout.engine.deterministic=true"],
    )
    assert cfg.vlrollout.engine.deterministic is True
    default = load_config("examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}/g"])
    assert default.vlrollout.engine.deterministic is False


@pytest.mark.parametrize("example", ["train_count.yaml", "train_grounding.yaml"])
def test_an_example_run_from_another_folder_names_the_model_folder(tmp_path, monkeypatch, example):
    """The examples' ``actor.path`` is relative to the repository root; from another folder it
    is one line saying where the folder is, not a hub download that fails after its retries."""
    from pathlib import Path

    from vlrollout.errors import ConfigError

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(str(root / "examples" / example), [f"vlrollout.output={tmp_path}/o"])
    message = str(info.value)
    assert f"is not a folder under the working directory {tmp_path}" in message
    assert f"pass actor.path={root / 'assets'}/tiny-qwen3vl-" in message
    fixed = message.rsplit("pass ", 1)[1]
    cfg = load_config(str(root / "examples" / example), [f"vlrollout.output={tmp_path}/o", fixed])
    assert Path(cfg.actor.path).is_dir()


def test_a_hub_id_in_the_hub_cache_is_left_to_the_hub(tmp_path, monkeypatch):
    """A model found nowhere near the config but in the hub's cache loads from there, offline."""
    from pathlib import Path

    import huggingface_hub

    cache = tmp_path / "hub" / "models--Qwen--Qwen2-VL-2B-Instruct"
    (cache / "refs").mkdir(parents=True)
    (cache / "refs" / "main").write_text("0" * 40)
    (cache / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (cache / "snapshots" / ("0" * 40) / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        str(root / "examples" / "train_count.yaml"),
        [f"vlrollout.output={tmp_path}/o", "actor.path=Qwen/Qwen2-VL-2B-Instruct"],
    )
    assert cfg.actor.path == "Qwen/Qwen2-VL-2B-Instruct"


@pytest.mark.parametrize("offline", [False, True])
def test_a_model_that_is_no_folder_here_and_cannot_come_from_the_hub_is_one_line(
    tmp_path, monkeypatch, offline
):
    """No folder here, none in the hub's cache, and the hub unreachable (or offline mode): a
    one-line refusal naming the value before launch, not transformers' retries then exit 1."""
    from pathlib import Path

    import huggingface_hub

    from vlrollout.errors import ConfigError

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(
            str(root / "examples" / "train_count.yaml"),
            [f"vlrollout.output={tmp_path}/o", "actor.path=models/mine"],
        )
    message = str(info.value)
    assert message.startswith(f"actor.path models/mine is no folder under {tmp_path}")
    assert ("HF_HUB_OFFLINE" if offline else "cannot reach the Hugging Face hub") in message
    assert "\n" not in message


def test_an_unknown_reward_is_one_line_and_exit_2_before_the_model_loads(tmp_path, capsys):
    from vlrollout.cli import main

    args = ["--config", "examples/train_grounding.yaml", f"vlrollout.output={tmp_path}"]
    assert main(["train", *args, "vlrollout.reward=nonexistent_reward"]) == 2
    err = capsys.readouterr().err
    assert "vlrollout.reward 'nonexistent_reward': unknown reward" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


@pytest.mark.parametrize("model", ["/nowhere/model", "./nowhere/model", "../nowhere/model"])
def test_a_model_path_that_is_a_path_and_does_not_exist_is_one_line(tmp_path, model):
    """A path (absolute, or starting with ./ or ../) is no hub id: one line naming it, not
    transformers' 'Repo id must be in the form' after the run has started."""
    from vlrollout.errors import ConfigError

    with pytest.raises(ConfigError, match=f"actor.path {model} does not exist"):
        load_config(
            "examples/train_count.yaml", [f"vlrollout.output={tmp_path}/o", f"actor.path={model}"]
        )


def test_an_output_that_is_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    from vlrollout.cli import main

    a_file = tmp_path / "outfile"
    a_file.write_text("")
    args = ["--config", "examples/train_grounding.yaml", f"vlrollout.output={a_file}"]
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert f"vlrollout.output {a_file}: {a_file} is a file, not a folder" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_a_missing_data_file_names_its_key(tmp_path, capsys):
    from vlrollout.cli import main

    args = ["--config", "examples/train_grounding.yaml", f"vlrollout.output={tmp_path}/o"]
    assert main(["train", *args, f"train_dataset.path={tmp_path}/nope.jsonl"]) == 2
    err = capsys.readouterr().err
    assert f"train_dataset.path {tmp_path}/nope.jsonl does not exist" in err and "--data" not in err


def test_a_batch_larger_than_the_training_items_is_refused(tmp_path, capsys):
    """A step of 8 items drawn from 4 trained 4 a step with no word."""
    import json

    from vlrollout.cli import main

    Image.new("RGB", (32, 32), "white").save(tmp_path / "a.png")
    row = {"messages": "<image>How many?", "images": ["a.png"], "answer": "0", "task": "count"}
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({**row, "id": f"r{k}"}) + "\n" for k in range(4)))
    args = ["--config", "examples/train_count.yaml", f"vlrollout.output={tmp_path}/o"]
    args += [f"train_dataset.path={data}", "train_dataset.batch_size=8"]
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert "train_dataset.batch_size=8 is more than the 4 training items" in err


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["total_train_epochs=1", "total_train_steps=7"], True),  # 8 items // 2 = 4 per epoch
        (["total_train_epochs=2", "total_train_steps=8"], False),
        (["total_train_epochs=1", "total_train_steps=null"], False),  # the epochs decide
    ],
)
def test_steps_past_the_learning_rate_schedule_are_refused(tmp_path, overrides, refused):
    """AReaL sizes the actor's learning-rate schedule by ``total_train_epochs``: a run longer
    than that would train its last steps at the schedule's end (lr 0 after a linear decay)."""
    from vlrollout.errors import ConfigError
    from vlrollout.train.data import check_batch_fits

    cfg = load_config(
        "examples/train_grounding.yaml",
        [f"vlrollout.output={tmp_path}", "train_dataset.batch_size=2", *overrides],
    )
    items = [{"id": str(i)} for i in range(8)]
    if not refused:
        check_batch_fits(cfg, items)
        return
    with pytest.raises(ConfigError) as e:
        check_batch_fits(cfg, items)
    assert str(e.value) == (
        "total_train_steps=7 runs past the learning-rate schedule, which AReaL sizes as "
        "total_train_epochs=1 x 4 steps per epoch (8 items // batch 2) = 4 steps: raise "
        "total_train_epochs or lower total_train_steps"
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (  # a typo on the command line is the command line's, not the YAML's
            "vlrollout.eval_evry=2",
            "setting vlrollout.eval_evry=2: unknown key 'vlrollout.eval_evry'; did you mean "
            "vlrollout.eval_every?",
        ),
        (  # a key of AReaL's own saver: the `+` that the loader needs would be refused next
            "saver.freq_steps=2",
            "setting saver.freq_steps=2: saver.freq_steps is for AReaL's own saver, which "
            "vlrollout train does not run: use vlrollout.save_every and vlrollout.keep_checkpoints",
        ),
    ],
)
def test_an_override_that_cannot_load_is_named_as_the_command_lines(tmp_path, override, expected):
    from vlrollout.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        load_config("examples/train_grounding.yaml", [f"vlrollout.output={tmp_path}", override])
    assert str(info.value) == expected


@pytest.mark.parametrize(
    "refused",
    ["gconfig.n_samples=1", "train_dataset.path=/nonexistent/train.jsonl"],
    ids=["refused-setting", "refused-data"],
)
def test_a_refused_run_writes_no_areal_files(tmp_path, capsys, refused):
    """A run refused by a setting or its data leaves no AReaL files behind: the resolved
    config.yaml and the name_resolve folder are written once the run's checks have passed."""
    from vlrollout.cli import main

    out = tmp_path / "o"
    args = ["--config", "examples/train_count.yaml", f"vlrollout.output={out}", refused]
    assert main(["train", *args]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (out / "areal").exists()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("actor.kl_ctl=0.5", "actor.kl_ctl"),  # no reference model: AReaL takes its logp as 0
        ("actor.lora_rank=0", "actor.lora_rank"),  # peft's "r should be positive", exit 1
        # clip_grad_norm_ scales by a negative number: every update climbs the loss
        ("actor.optimizer.gradient_clipping=-1.0", "actor.optimizer.gradient_clipping"),
        ("actor.eps_clip=-0.5", "actor.eps_clip"),  # an inverted clip range clips on-policy tokens
        ("+actor.eps_clip_higher=-0.1", "actor.eps_clip_higher"),
        ("+actor.c_clip=0.5", "actor.c_clip"),  # AReaL's bare AssertionError after the model loads
        ("+gconfig.top_k=1", "gconfig.top_k"),  # greedy by another name: every advantage 0
        # min > max in torch.clamp: every reward becomes -1, every advantage 0
        ("+actor.reward_clip=-1", "actor.reward_clip"),
        # AReaL asserts the length and factor at the first step, with no message
        ("+actor.overlong_reward_penalty=true", "actor.overlong_tokens"),
        # AReaL declares the choices but its loader does not enforce them
        ("+actor.importance_sampling_level=seq", "actor.importance_sampling_level"),
        ("+actor.prox_logp_method=linear", "actor.prox_logp_method"),
        # more minibatches than sequences, or a micro-batch smaller than a completion: AReaL's
        # "smaller than min_groups" / "larger than capacity" once the model has loaded
        ("actor.ppo_n_minibatches=1000", "actor.ppo_n_minibatches"),
        ("actor.mb_spec.max_tokens_per_mb=10", "actor.mb_spec.max_tokens_per_mb"),
    ],
)
def test_settings_the_trainer_cannot_honour_are_refused_before_the_model_loads(
    tmp_path, override, named
):
    from vlrollout.errors import ConfigError
    from vlrollout.train.config import check_rules

    cfg = load_config(
        "examples/train_grounding.yaml",
        [f"vlrollout.output={tmp_path}", "actor.use_lora=true", override],
    )
    with pytest.raises(ConfigError, match=named):
        check_rules(cfg, 1)
