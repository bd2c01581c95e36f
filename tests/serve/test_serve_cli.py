"""``vlrollout serve`` as a user starts it: a real process, answering AReaL's health check."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests
import torch

from tests.serve.conftest import ASSET, ROOT
from vlrollout.cli import build_parser, main
from vlrollout.serve.admission import QueueLimits
from vlrollout.serve.limits import DEFAULT_MAX_QUEUED_REQUESTS
from vlrollout.serve.main import default_max_queued_mb


def test_serve_is_a_subcommand_with_the_documented_flags():
    args = build_parser().parse_args(
        ["serve", "--model", "m", "--protocol", "vllm", "--port", "1234", "--max-memory", "cpu=1GB"]
    )
    assert (args.model, args.protocol, args.port, args.host) == ("m", "vllm", 1234, "127.0.0.1")


def test_help_names_the_defaults_the_docs_rely_on(capsys):
    """docs/serving.md's clients reach the server on the default port and protocol."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: sglang)", "(default: 127.0.0.1)", "(default: 30000)"):
        assert default in text


@pytest.mark.parametrize("flags, compiled", [([], False), (["--compile"], True)])
def test_compile_reaches_the_engine(monkeypatch, flags, compiled):
    """``--compile`` builds the engine with ``compile_decode=True`` (the compiled step itself:
    ``tests/engine/test_compiled_step.py``); stopped before any server starts."""
    from vlrollout.engine import LocalInferenceEngine

    seen = {}

    def load(path, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop here: no server

    monkeypatch.setattr(LocalInferenceEngine, "from_pretrained", staticmethod(load))
    from vlrollout.serve.main import serve

    with pytest.raises(KeyboardInterrupt):
        serve(build_parser().parse_args(["serve", "--model", str(ASSET), *flags]))
    assert seen["compile_decode"] is compiled


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], QueueLimits(DEFAULT_MAX_QUEUED_REQUESTS, default_max_queued_mb() * 2**20)),
        (["--max-queued-requests", "4", "--max-queued-mb", "64.5"], QueueLimits(4, 67633152)),
        (["--max-queued-requests", "0", "--max-queued-mb", "0"], QueueLimits(None, None)),
    ],
)
def test_queue_flags_reach_the_app(monkeypatch, flags, expected):
    """The queue flags, the key, ``--no-control`` and ``--weights-root`` become
    ``build_app``'s arguments (0: no bound)."""
    monkeypatch.setenv("VLROLLOUT_API_KEY", "k")
    seen = _app_arguments(monkeypatch, "--no-control", "--weights-root", "/srv/w", *flags)
    assert seen["limits"] == expected
    assert (seen["api_key"], seen["control"], str(seen["weights_root"])) == ("k", False, "/srv/w")
    assert (seen["min_pixels"], seen["max_pixels"], seen["max_image_pixels"]) == (None,) * 3


def test_the_image_budget_reaches_the_app(monkeypatch):
    flags = ["--min-pixels", "4000", "--max-pixels", "50000", "--max-image-pixels", "90000000"]
    seen = _app_arguments(monkeypatch, *flags, "--max-video-frame-pixels", "20000000")
    assert (seen["min_pixels"], seen["max_pixels"], seen["max_image_pixels"]) == (
        4000,
        50000,
        90000000,
    )
    assert seen["max_video_frame_pixels"] == 20000000


def _app_arguments(monkeypatch, *flags: str) -> dict:
    """``build_app``'s keyword arguments for ``vlrollout serve --model ASSET *flags``, stopped
    before any model loads or server starts."""
    from vlrollout.engine import LocalInferenceEngine
    from vlrollout.serve import main as serve_main

    seen = {}

    def build(engine, protocol, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop here: no server

    monkeypatch.setattr(LocalInferenceEngine, "from_pretrained", staticmethod(lambda p, **k: _E()))
    monkeypatch.setattr("vlrollout.serve.app.build_app", build)
    with pytest.raises(KeyboardInterrupt):
        serve_main.serve(build_parser().parse_args(["serve", "--model", str(ASSET), *flags]))
    return seen


class _E:
    def initialize(self):
        return self


def test_missing_model_folder_is_a_one_line_error(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "nope")]) == 2
    assert "is not a model folder" in capsys.readouterr().err


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if the command gets as far as loading the model."""
    from vlrollout.engine import LocalInferenceEngine

    def load(path, **kwargs):
        raise AssertionError("a bad flag must be refused before the model loads")

    monkeypatch.setattr(LocalInferenceEngine, "from_pretrained", staticmethod(load))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--port", "99999"], "--port must be in 1..65535, got 99999"),
        (["--port", "-1"], "--port must be in 1..65535, got -1"),
        (["--threads", "0"], "--threads must be >= 1, got 0"),
        (["--max-batch-size", "0"], "--max-batch-size must be >= 1, got 0"),
        (["--max-body-mb", "0"], "--max-body-mb must be > 0, got 0"),
        (["--max-memory", "cpu=-5GB"], "--max-memory cpu=-5GB: `size` -5GB is not in a valid"),
        (["--max-memory", "cpu=0GB"], "--max-memory cpu=0GB: the size must be positive"),
        (["--max-memory", "cpu=lots"], "--max-memory cpu=lots: `size` lots is not in a valid"),
        (["--max-memory", "garbage"], "--max-memory expects DEVICE=SIZE, got 'garbage'"),
        (["--host", "999.1.1.1"], "cannot listen on 999.1.1.1:"),
        (["--max-queued-requests", "-1"], "--max-queued-requests must be >= 0, got -1"),
        (["--max-queued-mb", "-1"], "--max-queued-mb must be >= 0, got -1"),
        (["--max-queued-mb", "nan"], "--max-queued-mb must be >= 0, got nan"),
        (["--max-queued-mb", "8"], "--max-queued-mb 8 is below --max-body-mb 64"),
        (["--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
        (["--max-memory", "cpu=1GB"], "--max-memory and --offload-folder need --device-map"),
        (["--offload-folder", "/tmp/x"], "--max-memory and --offload-folder need --device-map"),
        (["--device", "cuda:x"], "--device must be cpu, cuda or cuda:N, got 'cuda:x'"),
        (["--max-pixels", "0"], "--max-pixels must be >= 1, got 0"),
        (["--max-image-pixels", "-3"], "--max-image-pixels must be >= 1, got -3"),
        (["--max-video-frame-pixels", "0"], "--max-video-frame-pixels must be >= 1, got 0"),
        (
            ["--min-pixels", "9000", "--max-pixels", "5000"],
            "--min-pixels/--max-pixels: min_pixels=9000 exceeds max_pixels=5000",
        ),
        (["--video-max-frames", "0"], "--video-max-frames must be a positive number, got 0"),
    ],
)
def test_bad_flags_are_refused_before_the_model_loads(no_model_load, capsys, flags, message):
    status = main(["serve", "--model", str(ASSET), *flags])
    err = capsys.readouterr().err
    assert status == 2, err
    assert message in err, err
    assert "Traceback" not in err


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_refused_before_the_model_loads(no_model_load, capsys, device):
    assert main(["serve", "--model", str(ASSET), "--device", device]) == 2
    err = capsys.readouterr().err
    assert f"--device {device}: CUDA is not available here" in err, err


def test_an_unknown_dtype_is_a_usage_error(no_model_load, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--model", str(ASSET), "--dtype", "fp16"])
    assert stop.value.code == 2
    assert "argument --dtype: invalid choice: 'fp16'" in capsys.readouterr().err


def test_a_device_map_needs_no_device_check(no_model_load, capsys):
    """``--device`` is ignored with ``--device-map``, so a bad one is not refused there."""
    main(["serve", "--model", str(ASSET), "--device", "tpu", "--device-map", "auto"])
    err = capsys.readouterr().err
    assert "a bad flag must be refused before the model loads" in err, err  # it got to loading


def test_a_port_in_use_is_refused_before_the_model_loads(no_model_load, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(ASSET), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["sglang", "vllm"])
def test_serve_process_starts_answers_and_stops(protocol):
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vlrollout.cli", "serve", "--model", str(ASSET)]
    cmd += ["--protocol", protocol, "--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        start, up = time.monotonic(), False
        while time.monotonic() - start < 90 and proc.poll() is None:
            try:
                up = requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except requests.ConnectionError:
                pass
            if up:
                break
            time.sleep(0.2)
        assert up, proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no answer"
        print(f"serve answered /health after {time.monotonic() - start:.1f} s")
        if protocol == "sglang":
            r = requests.post(
                f"http://127.0.0.1:{port}/generate",
                json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}},
                timeout=30,
            )
        else:
            r = requests.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"prompt": [1, 2, 3], "max_tokens": 3, "logprobs": 0},
                timeout=30,
            )
        assert r.status_code == 200, r.text
        path = "/generate" if protocol == "sglang" else "/v1/chat/completions"
        bad = requests.post(f"http://127.0.0.1:{port}{path}", data=b"{not json", timeout=30)
        assert bad.status_code == 400, bad.text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    # The server's log says why it refused (AReaL's logging resets used to swallow this line).
    log = proc.stdout.read().decode()
    assert f"POST {path} -> 400: {path}: malformed JSON body" in log, log[-2000:]
