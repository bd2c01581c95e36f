"""Every misuse of ``vlrollout run``: one or two lines naming the value and the fix,
exit 2, no traceback, and found before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlrollout import cli
from vlrollout.errors import ConfigError
from vlrollout.run.config import RunConfig

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "assets" / "tiny-qwen2vl")


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the engine is built: every misuse must be caught before that."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the configuration was checked")

    monkeypatch.setattr("vlrollout.engine.factory.make_engine", refuse)


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "d.jsonl"
    # A task the default reward (tiny_task) scores: otherwise the run stops on the reward.
    item = {"id": "a", "messages": "hi", "answer": "3", "task": "count"}
    path.write_text(json.dumps(item) + "\n")
    return path


def _run(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["run", *args])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def _misuses(tmp_path: Path, data: Path) -> list[tuple[str, list[str], str]]:
    """(name, flags, expected text) for every misuse the issue lists."""
    ok = ["--data", str(data), "--model", MODEL, "--output", str(tmp_path / "out")]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("group_size: [1, 2\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("group_sise: 3\n")
    not_jsonl = tmp_path / "d.csv"
    not_jsonl.write_text("a,b\n")
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text("{oops\n[1]\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        ("missing config", ["--config", str(tmp_path / "nope.yaml")], "nope.yaml does not exist"),
        ("bad YAML", ["--config", str(bad_yaml)], "is not valid YAML (line 2)"),
        ("unknown key", ["--config", str(unknown)], "did you mean 'group_size'"),
        (
            "group size 0",
            [*ok, "--group-size", "0"],
            "group_size (--group-size) must be at least 1, got 0",
        ),
        ("unknown workflow", [*ok, "--workflow", "visoin"], "got 'visoin'"),
        ("workflow import path", [*ok, "--workflow", "no.such.Flow"], "--workflow 'no.such.Flow'"),
        ("unknown reward", [*ok, "--reward", "iouu"], "--reward 'iouu': unknown reward"),
        ("missing data", [*ok, "--data", str(tmp_path / "no.jsonl")], "no.jsonl does not exist"),
        ("data is a folder", [*ok, "--data", str(tmp_path)], "is a folder"),
        ("not JSONL", [*ok, "--data", str(not_jsonl)], "expected a .jsonl or .parquet file"),
        ("no line is an item", [*ok, "--data", str(bad_line)], "bad.jsonl: no line is a data item"),
        ("empty data", [*ok, "--data", str(empty)], "has no items"),
        ("output is a file", [*ok, "--output", str(a_file / "out")], "is a file, not a folder"),
        ("read-only output", [*ok, "--output", "/proc/self"], "is not writable"),
        ("empty output", [*ok, "--output", ""], "(--output) is empty"),  # the working folder
        ("missing model", [*ok, "--model", str(tmp_path / "m")], "model folder"),
        ("model without config", [*ok, "--model", str(tmp_path)], "has no config.json"),
        (
            "bad device",
            [*ok, "--device", "gpu"],
            "engine.device (--device) must be cpu, cuda or cuda:N",
        ),
        ("bad address", [*ok, "--engine", "sglang", "--address", "nohost"], "must be HOST:PORT"),
        ("remote without address", [*ok, "--engine", "vllm"], "pass --address HOST:PORT"),
        (  # ran on the local engine, as if the server were not there
            "address without a remote engine",
            [*ok, "--address", "127.0.0.1:30000"],
            "engine.addresses (--address) is for a remote engine; add --engine sglang or vllm",
        ),
        (
            "server not running",
            [*ok, "--engine", "sglang", "--address", "127.0.0.1:9"],
            "cannot reach the sglang server at 127.0.0.1:9",
        ),
        ("negative limit", [*ok, "--limit", "-1"], "limit (--limit) must be at least 1, got -1"),
        ("zero limit", [*ok, "--limit", "0"], "limit (--limit) must be at least 1, got 0"),
        ("zero max_new_tokens", [*ok, "--max-new-tokens", "0"], "gconfig.max_new_tokens"),
        (  # every episode failed on the engine's NotImplementedError
            "beam search",
            [*ok, "gconfig.use_beam_search=true"],
            "gconfig.use_beam_search=true: GRPO samples independent completions",
        ),
        (  # ran as 0
            "negative min_new_tokens",
            [*ok, "gconfig.min_new_tokens=-1"],
            "gconfig.min_new_tokens must be at least 0, got -1",
        ),
        (
            "min_new_tokens above max_new_tokens",
            [*ok, "--max-new-tokens", "4", "gconfig.min_new_tokens=9"],
            "gconfig.min_new_tokens=9 must be at most gconfig.max_new_tokens (--max-new-tokens), 4",
        ),
        ("seed past 64 bits", [*ok, "--seed", str(2**64)], "seed (--seed) must be"),
        (
            "not a workflow",
            [*ok, "--workflow", "collections.OrderedDict"],
            "is not a RolloutWorkflow subclass",
        ),
        (
            "a workflow needing more arguments",
            [*ok, "--workflow", "tests.run.custom_workflows.NeedsThinking"],
            "needs enable_thinking, which vlrollout run does not give",
        ),
        (
            "a reward that cannot be pickled",
            [*ok, "--reward", "tests.run.custom_workflows.LAMBDA_REWARD"],
            "cannot be pickled",
        ),
        (
            "AReaL's group size key",
            [*ok, "gconfig.n_samples=8"],
            "gconfig.n_samples=8 is AReaL's group size; vlrollout run's is group_size "
            "(--group-size), 4 here: set that",
        ),
        (
            "max_new_tokens past the context",
            [*ok, "--max-new-tokens", "600"],
            "gconfig.max_new_tokens (--max-new-tokens) 600 leaves no room for a prompt in the "
            "model's context of 512 tokens",
        ),
        # NaN slips past `< 0` checks; these used to reject every item (or crash) at run time.
        (
            "NaN temperature",
            [*ok, "--temperature", "nan"],
            "gconfig.temperature (--temperature) must be a finite number >= 0, got nan",
        ),
        (
            "infinite temperature",
            [*ok, "--temperature", "inf"],
            "gconfig.temperature (--temperature) must be a finite number >= 0, got inf",
        ),
        (
            "NaN frequency penalty",
            [*ok, "gconfig.frequency_penalty=nan"],
            "gconfig.frequency_penalty must be in [-2, 2], got nan",
        ),
        (
            "NaN reward timeout",
            [*ok, "--reward-timeout", "nan"],
            "reward_timeout_s (--reward-timeout) must be a positive finite number, got nan",
        ),
        (
            "NaN turn discount",
            [*ok, "--turn-discount", "nan"],
            "turn_discount (--turn-discount) must be in (0, 1], got nan",
        ),
        (
            "turn discount above 1",
            [*ok, "--turn-discount", "1.5"],
            "turn_discount (--turn-discount) must be in (0, 1], got 1.5",
        ),
        (
            "min pixels above max pixels",
            [*ok, "--min-pixels", "100", "--max-pixels", "10"],
            "min_pixels (--min-pixels) 100 exceeds max_pixels (--max-pixels) 10",
        ),
        (
            "max pixels below the processor's own minimum",
            [*ok, "--max-pixels", "100"],
            "max_pixels=100 is below the processor's own min_pixels",
        ),
        ("unknown preprocessor", [*ok, "--preprocessor", "nonsense"], "unknown preprocessor"),
        (
            "preprocessor path that does not import",
            [*ok, "--preprocessor", "no_such_module.build"],
            "--preprocessor 'no_such_module.build'",
        ),
        (
            "preprocessor that breaks the contract",
            [*ok, "--preprocessor", "vlrollout.processors.messages.normalize_media"],
            "the factory does not accept",
        ),
        (
            "video pixel budget upside down",
            [*ok, "video_min_pixels=100000", "video_max_pixels=1000"],
            "video min_pixels=100000 exceeds max_pixels=1000",
        ),
        ("unknown box format", [*ok, "--box-format", "qwen9"], "box_format (--box-format)"),
        (
            "box format for a reward that reads no boxes",
            [*ok, "--reward", "count", "--box-format", "qwen2_vl"],
            "--box-format applies to the box and point rewards",
        ),
        ("bad setting", [*ok, "seed=abc"], "invalid value for 'seed'"),
        ("setting without =", [*ok, "seed"], "must be KEY=VALUE"),
    ]
    if not torch.cuda.is_available():
        cases.append(("cuda without CUDA", [*ok, "--device", "cuda"], "CUDA is not available"))
    return cases


def test_every_misuse_is_one_or_two_lines_and_exit_2(tmp_path, data, capsys, no_model):
    failures = []
    for name, flags, expected in _misuses(tmp_path, data):
        code, err = _run(capsys, *flags)
        lines = err.splitlines()
        if code != 2 or expected not in err or not 1 <= len(lines) <= 2 or "Traceback" in err:
            failures.append(f"{name}: exit {code}: {err[-400:]}")
    assert failures == []


def test_flag_type_errors_are_two_lines(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--group-size", "four"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert err == [
        "vlrollout run: error: argument --group-size: invalid int value: 'four'",
        "  see `vlrollout run --help`",
    ]


def test_a_rerun_with_other_settings_is_refused_before_the_model_loads(
    tmp_path, data, capsys, no_model
):
    from vlrollout.run.output import prepare_output

    out = tmp_path / "out"
    prepare_output(
        out, RunConfig.load(None, data=str(data), output=str(out), **{"engine.model": MODEL})
    )
    code, err = _run(
        capsys, "--data", str(data), "--model", MODEL, "--output", str(out), "--group-size", "2"
    )
    assert code == 2 and "group_size: 4 → 2" in err and "--overwrite" in err


def test_no_traceback_unless_debug(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("group_sise: 3\n")
    cmd = [sys.executable, "-m", "vlrollout.cli", "run", "--config", str(config)]
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.count("\n") <= 2
    assert cli.main(["run", "--config", str(config), "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_unexpected_errors_are_one_line_and_exit_1(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(cli, "_cmd_run", boom)
    code = cli.main(["run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == [
        "vlrollout run: error: RuntimeError: disk on fire",
        "  rerun with --debug for the traceback",
    ]


def test_key_value_settings_areal_style(tmp_path):
    cfg = cli.run_config_from_flags(
        ["--seed", "3", "gconfig.top_p=0.5", "engine.deterministic=false", "limit=2"]
    )
    assert (cfg.gconfig.top_p, cfg.limit, cfg.seed, cfg.deterministic) == (0.5, 2, 3, False)
    with pytest.raises(ConfigError, match="unknown key 'gconfig.top_q'.*did you mean 'top_p'"):
        RunConfig.load(None, dotlist=["gconfig.top_q=1"])


def test_the_demo_config_works_from_the_repository_root(monkeypatch):
    """Paths in a config are relative to the working folder (AReaL's rule): the README's
    commands run from the repository root."""
    monkeypatch.chdir(REPO)
    cfg = RunConfig.load(REPO / "examples" / "demo.yaml")
    assert Path(cfg.data).is_file() and (Path(cfg.engine.model) / "config.json").is_file()
    assert not Path(cfg.data).is_absolute()


def test_run_help_documents_every_flag():
    parser = cli.build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    undocumented = [
        a.option_strings for a in run._actions if a.option_strings and not (a.help or "").strip()
    ]
    assert undocumented == []


def test_max_prompt_tokens_from_the_command_line_reaches_the_workflow(tokenizer):
    from vlrollout.run.main import build_workflow

    cfg = cli.run_config_from_flags(["--workflow", "text", "--max-prompt-tokens", "7"])
    assert cfg.max_prompt_tokens == 7
    workflow = build_workflow(cfg, tokenizer, None, "tests.workflows.reward_fns.contains_answer")
    assert workflow.ctx.max_prompt_tokens == 7


def test_validate_data_lists_every_bad_line(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "messages": "x"}\n{bad\n{"id": "c", "messages": 42}\n')
    code = cli.main(["validate-data", str(path)])
    out = capsys.readouterr().out
    assert code == 1
    assert f"{path}:line 2: bad_json" in out and f"{path}:line 3 (id c): bad_message" in out
    assert "3 items, 2 with problems" in out


@pytest.mark.parametrize("flags", [[], ["--format", "jsonl"]])
def test_validate_data_says_a_file_without_items_cannot_be_read(tmp_path, capsys, flags):
    """As ``vlrollout run`` and ``eval`` say it (exit 2), not as a problem of a line 0."""
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    code = cli.main(["validate-data", str(path), *flags])
    captured = capsys.readouterr()
    assert code == 2 and f"data file {path} has no items" in captured.err
    assert "line 0" not in captured.out and "item 0" not in captured.out


def test_prompts_are_limited_to_the_models_context_by_default():
    from types import SimpleNamespace

    from vlrollout.families import context_length

    text = SimpleNamespace(max_position_embeddings=512)
    assert context_length(SimpleNamespace(text_config=text)) == 512
    assert context_length(None) is None  # remote engines: no model here


def test_run_from_another_folder_names_the_shipped_model(
    capsys, no_model, data, monkeypatch, tmp_path
):
    """The default model path is relative to where the command runs; from elsewhere the error
    says where the tiny model of this checkout lives."""
    monkeypatch.chdir(tmp_path)
    code, err = _run(capsys, "--data", str(data), "--output", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in err
    assert "does not exist" in err and MODEL in err


def test_a_rerun_whose_cider_d_corpus_differs_is_refused(tmp_path, capsys, no_model):
    """CIDEr-D weighs n-grams by the references of the items loaded: a rerun with another
    --limit (or more lines in the file) would score its new items on another scale than the
    results it resumes."""
    data = tmp_path / "captions.jsonl"
    rows = [
        {"id": f"c{i}", "messages": "<image>Describe.", "images": ["a.png"],
         "captions": [f"a picture number {i}", f"an image of thing {i}"]}
        for i in range(4)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    base = ["--data", str(data), "--model", MODEL, "--output", str(out), "--reward", "cider_d"]
    from vlrollout.run.main import prepare

    prepare(RunConfig.load(None, data=str(data), output=str(out), limit=2, reward="cider_d",
                           **{"engine.model": MODEL}))  # fmt: skip
    code, err = _run(capsys, *base)
    assert code == 2 and "reward.cider_d_corpus" in err and "--overwrite" in err
    code, err = _run(capsys, *base, "--limit", "2", "--group-size", "3")
    assert code == 2 and "reward.cider_d_corpus" not in err  # the same items: the same corpus


def test_a_workflow_class_gets_the_run_settings_its_constructor_takes(tokenizer):
    from vlrollout.run.main import build_workflow

    flags = ["--workflow", "tests.run.custom_workflows.SubclassedText", "--max-prompt-tokens", "7",
             "--reward-timeout", "2.5"]  # fmt: skip
    cfg = cli.run_config_from_flags(flags)
    workflow = build_workflow(cfg, tokenizer, None, "tests.workflows.reward_fns.contains_answer")
    assert workflow.ctx.max_prompt_tokens == 7 and workflow.ctx.reward.timeout_s == 2.5


def test_a_setting_a_workflow_class_cannot_take_is_refused(tokenizer):
    from vlrollout.errors import ConfigError
    from vlrollout.run.main import build_workflow, check_workflow

    flags = ["--workflow", "tests.run.custom_workflows.FixedArguments", "--reward-timeout", "2.5"]
    with pytest.raises(ConfigError, match=r"reward_timeout_s \(--reward-timeout\)"):
        check_workflow(cli.run_config_from_flags(flags))  # before the model loads
    plain = cli.run_config_from_flags(["--workflow", "tests.run.custom_workflows.FixedArguments"])
    check_workflow(plain)
    assert build_workflow(plain, tokenizer, None, "r").reward_fn == "r"  # nothing set: it runs


def test_a_text_workflow_on_items_with_images_is_refused_before_the_model_loads(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    rows = [{"id": "a", "messages": "<image>How many?", "images": ["a.png"], "answer": 1},
            {"id": "b", "messages": "How many?", "answer": 1}]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = ["--data", str(data), "--model", MODEL, "--output", str(tmp_path / "o")]
    code, err = _run(capsys, *flags, "--workflow", "text")
    assert code == 2 and "1 of 2 items hold images or videos" in err and "--workflow vision" in err
    code, err = _run(capsys, *flags, "--workflow", "multi_attempt")
    assert code == 2 and "--workflow vision_multi_attempt" in err


def test_a_rerun_on_new_weights_in_the_same_model_folder_is_refused(tmp_path, capsys, no_model):
    """A checkpoint saved again into the folder the results came from: the results are of the
    old weights, so resuming would mix two policies."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "messages": "How many?", "answer": 1}) + "\n")
    out = tmp_path / "out"
    from vlrollout.run.main import prepare

    reward = "tests.workflows.reward_fns.contains_answer"
    prepare(RunConfig.load(None, data=str(data), output=str(out), workflow="text", reward=reward,
                           **{"engine.model": str(model)}))  # fmt: skip
    weights = next(model.glob("*.safetensors"))
    flags = ["--data", str(data), "--model", str(model), "--output", str(out)]
    os.utime(weights, ns=(1, 1))  # copied or touched: the same weights, which resume
    code, err = _run(capsys, *flags, "--workflow", "text", "--reward", reward)
    assert "engine.model_weights" not in err
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF  # saved again with other values
    weights.write_bytes(bytes(raw))
    code, err = _run(capsys, *flags, "--workflow", "text", "--reward", reward)
    assert code == 2 and "engine.model_weights" in err and "--overwrite" in err


def test_a_forwarding_subclass_gets_only_what_its_bases_take(tokenizer, qwen2vl_processor):
    """The tool workflow takes no max_prompt_tokens (the run sets one from the context), but
    takes --tools: a subclass passing **kwargs on gets exactly those."""
    from vlrollout.run.main import build_workflow

    flags = ["--workflow", "tests.run.custom_workflows.ForwardingTool", "--tools", "rotate",
             "--max-prompt-tokens", "300"]  # fmt: skip
    cfg = cli.run_config_from_flags(flags)
    workflow = build_workflow(
        cfg, tokenizer, qwen2vl_processor, "tests.workflows.reward_fns.raises"
    )
    assert list(workflow.tools) == ["rotate"]
