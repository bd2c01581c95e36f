"""``vlrollout train`` with its rollouts on a served engine in another process, the way AReaL
deployments split inference from training: ``vlrollout serve`` (SGLang protocol) in one process,
the trainer (AReaL's ``FSDPPPOActor`` + AReaL's own ``RemoteSGLangEngine``) in another. The new
weights reach the server through AReaL's disk update over HTTP."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import torch

from tests.train.procs import run_train, subprocess_env
from tests.train.test_cli_train import SMALL

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "assets" / "tiny-qwen2vl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_health(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s and proc.poll() is None:
        try:
            if requests.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"server did not answer /health (exit code {proc.poll()})")


def _teacher_forced(model_dir: Path, prompt: list[int], completion: list[int]) -> torch.Tensor:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_train_rollouts_on_a_served_engine_in_another_process(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _serve(port, tmp_path)
    out = tmp_path / "run"
    try:
        _wait_for_health(url, server)
        run_train(
            out,
            *SMALL,
            "vlrollout.engine.kind=sglang",
            f"vlrollout.engine.addresses=[127.0.0.1:{port}]",
            "vlrollout.task=caption",
            "vlrollout.reward=tests.train.reward_fns.square_words",
            "actor.optimizer.lr=1e-3",
            "vlrollout.eval_every=0",
        )
        health = requests.get(f"{url}/health", timeout=5).json()
        # Rollouts crossed HTTP, and the run's starting weights and both steps' updates
        # reached the server (its version counts the loads).
        assert health["version"] == 3
        assert health["requests"].get("/generate", 0) >= 2 * 4
        steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in steps] == [1, 2]
        assert all(r["n_trajectories"] == 4 for r in steps)

        # The served model is the trainer's last checkpoint (and no longer the starting one).
        prompt = [1, 2, 3, 4, 5]
        served, completion = _greedy_logprobs(url, prompt)
        trained = _teacher_forced(out / "checkpoints" / "step_2", prompt, completion)
        start = _teacher_forced(TINY, prompt, completion)
        assert (served - trained).abs().max() < 1e-4
        assert (served - start).abs().max() > 1e-3
    finally:
        _stop(server)


@pytest.mark.slow
def test_a_run_on_a_server_that_holds_other_weights_rolls_out_on_its_own(tmp_path):
    """A server keeps the weights it last loaded: an earlier run's last update, or this run's
    later steps' when it resumes from a checkpoint. The run's first rollouts must come from its
    own starting weights, so its first step is on-policy."""
    from safetensors.torch import load_file, save_file

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _serve(port, tmp_path)
    earlier = tmp_path / "earlier-run-weights"
    shutil.copytree(TINY, earlier)
    weights = load_file(earlier / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    noisy = {
        k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
        for k, v in weights.items()
    }
    save_file(noisy, earlier / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "run"
    try:
        _wait_for_health(url, server)
        r = requests.post(
            f"{url}/update_weights_from_disk", json={"model_path": str(earlier)}, timeout=60
        )
        assert r.status_code == 200, r.text
        run_train(
            out,
            *SMALL,
            "total_train_steps=1",
            "vlrollout.engine.kind=sglang",
            f"vlrollout.engine.addresses=[127.0.0.1:{port}]",
            "vlrollout.eval_every=0",
        )
        (step,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert abs(step["ppo_approx_kl"]) < 1e-5 and step["clip_ratio"] == 0, step
    finally:
        _stop(server)


@pytest.mark.slow
def test_asynchronous_training_overlaps_on_a_served_engine(tmp_path):
    """k = 1 with the rollouts on ``vlrollout serve``: each step's batch was submitted before
    the previous update, so every step after the first trains tokens one version old."""
    port = _free_port()
    server = _serve(port, tmp_path)
    out = tmp_path / "run"
    try:
        _wait_for_health(f"http://127.0.0.1:{port}", server)
        run_train(
            out,
            *SMALL,
            "total_train_steps=3",
            "vlrollout.engine.kind=sglang",
            f"vlrollout.engine.addresses=[127.0.0.1:{port}]",
            "rollout.max_head_offpolicyness=1",
            "actor.use_decoupled_loss=true",
            "vlrollout.eval_every=0",
            "vlrollout.save_every=3",
        )
        steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["staleness_max"] for r in steps] == [0, 1, 1]
        assert all(r["n_trajectories"] == 4 for r in steps)
    finally:
        _stop(server)


def _serve(port: int, weights_root: Path) -> subprocess.Popen:
    """``vlrollout serve`` of the tiny model on ``port`` (SGLang protocol, one thread), loading
    weight updates from under ``weights_root`` (where the trainer saves them)."""
    return subprocess.Popen(
        [sys.executable, "-m", "vlrollout.cli", "serve", "--model", str(TINY)]
        + ["--protocol", "sglang", "--port", str(port), "--threads", "1"]
        + ["--weights-root", str(weights_root)],
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _greedy_logprobs(url: str, prompt: list[int]) -> tuple[torch.Tensor, list[int]]:
    r = requests.post(
        f"{url}/generate",
        json={
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
            "return_logprob": True,
        },
        timeout=60,
    )
    assert r.status_code == 200, r.text
    pairs = r.json()["meta_info"]["output_token_logprobs"]
    return torch.tensor([lp for lp, _, _ in pairs]), [tok for _, tok, _ in pairs]


@pytest.mark.slow
def test_train_rollouts_spread_over_two_served_engines(tmp_path):
    """One trainer, two ``vlrollout serve`` processes in ``engine.addresses``: AReaL's
    ``RemoteSGLangEngine`` sends each new request to the next server (round robin) and every
    weight update to all of them, so both servers generate rollouts and both end on the trainer's
    last weights. Each server's ``/health`` (its request counts per path and its weight version)
    says what reached it."""
    ports = [_free_port(), _free_port()]
    while ports[1] == ports[0]:
        ports[1] = _free_port()
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    servers = [_serve(p, tmp_path) for p in ports]
    out = tmp_path / "run"
    try:
        for url, server in zip(urls, servers, strict=True):
            _wait_for_health(url, server)
        run_train(
            out,
            *SMALL,
            "vlrollout.engine.kind=sglang",
            f"vlrollout.engine.addresses=[127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}]",
            "vlrollout.task=caption",
            "vlrollout.reward=tests.train.reward_fns.square_words",
            "actor.optimizer.lr=1e-3",
            "vlrollout.eval_every=0",
        )
        healths = [requests.get(f"{url}/health", timeout=5).json() for url in urls]
        generated = [h["requests"].get("/generate", 0) for h in healths]
        # Both servers made rollouts, together at least the 2 steps x 2 items x 2 samples.
        assert all(n > 0 for n in generated), generated
        assert sum(generated) >= 2 * 4, generated
        # Each server took the starting weights and both steps' updates, and no other.
        for h in healths:
            assert h["requests"].get("/update_weights_from_disk", 0) == 3, h
            assert h["version"] == 3, h
        steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in steps] == [1, 2]
        assert all(r["n_trajectories"] == 4 for r in steps)

        # Each server serves the trainer's last checkpoint (version 2 above says it loaded both
        # updates; two steps may move one greedy completion's logprobs too little to tell the
        # checkpoint from the starting weights, so only equality with step 2 is asserted here).
        prompt = [1, 2, 3, 4, 5]
        for url in urls:
            served, completion = _greedy_logprobs(url, prompt)
            trained = _teacher_forced(out / "checkpoints" / "step_2", prompt, completion)
            assert (served - trained).abs().max() < 1e-4, url
    finally:
        for server in servers:
            _stop(server)
