"""Entry point of ``vlrollout train --config CONFIG [key=value ...]``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from vlrollout.argtypes import whole_number
from vlrollout.logs import debugging, log_run_to


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="vlrollout train",
        description="GRPO with AReaL's FSDPPPOActor on the embedded engine. Overrides use "
        "AReaL's syntax: actor.optimizer.lr=0 total_train_steps=10 vlrollout.output=runs/x",
        epilog="Exit status: 0 done, 1 an internal error, 2 a usage error, 3 a training step or "
        "held-out evaluation in which no episode was accepted (the counts and the top rejection "
        "reasons are printed), 130/143 stopped by a signal.",
    )
    parser.add_argument("--config", required=True, help="YAML with GRPOConfig keys + vlrollout:")
    parser.add_argument(
        "--nproc",
        type=whole_number(1),
        default=1,
        help="training processes, started by torchrun (FSDP data parallel; gloo on a CPU): each "
        "rolls out its share of a step's items on its own engine, rank 0 evaluates and writes "
        "the files. Same as `torchrun --nproc_per_node N -m vlrollout.cli train ...`",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="also print AReaL's and other libraries' INFO lines (always written to "
        "OUTPUT/train.log; OUTPUT/train.rankN.log for process N > 0) and errors' tracebacks",
    )
    args, overrides = parser.parse_known_args(list(argv))
    debug = args.debug or debugging()  # `vlrollout train --debug` reaches here as debugging()
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if args.nproc > 1 and "WORLD_SIZE" in os.environ and launched != args.nproc:
        parser.error(f"--nproc {args.nproc} under a launcher that started {launched} processes")

    from pathlib import Path

    from vlrollout.jsonl import read_jsonl
    from vlrollout.train.config import check_rules, check_served_budget, load_config
    from vlrollout.train.loop import train
    from vlrollout.train.report import control_summary, held_out_metric, rejected_line
    from vlrollout.train.session import check_resumable, writable_output

    cfg = load_config(args.config, overrides)
    # Settings errors once, here, rather than once per process under torchrun.
    world = launched if "WORLD_SIZE" in os.environ else args.nproc
    check_rules(cfg, world)
    check_resumable(cfg, Path(cfg.vlrollout.output), world)
    check_served_budget(cfg)
    writable_output(cfg)  # before the log file is opened in it
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch(
            args.nproc, [*(["--debug"] if debug else []), "--config", args.config, *overrides]
        )
    rank = int(os.environ.get("RANK", "0"))
    log_name = "train.log" if rank == 0 else f"train.rank{rank}.log"
    log_run_to(Path(cfg.vlrollout.output) / log_name, debug)
    last = train(cfg)
    if rank != 0:
        return 0  # rank 0 reports
    out = Path(cfg.vlrollout.output)
    evals = read_jsonl(out / "eval.jsonl")
    brief = {
        "steps": last.get("step"),
        "reward_mean_last_step": last.get("reward_mean"),
        "held_out_metric": held_out_metric(evals),
        "held_out_first": evals[0]["eval/mean"] if evals else None,
        "held_out_last": evals[-1]["eval/mean"] if evals else None,
        "held_out_last_rejected": rejected_line(evals[-1]) if evals else None,
        "seconds_per_step_last": last.get("time/step"),
    }
    print(json.dumps(brief, indent=1))
    if summary := control_summary(evals):
        print(summary)
    print(
        f"wrote {out}/metrics.jsonl, {out}/eval.jsonl, {out}/report.html, {out}/checkpoints/, "
        f"{out}/{log_name}"
    )
    return 0


def launch(nproc: int, args: Sequence[str]) -> int:
    """``vlrollout train ARGS`` in ``nproc`` processes under torchrun on this machine; its exit
    status (torchrun's: 0, or 1 when a process failed; each process's error is printed)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc_per_node", str(nproc), "-m", "vlrollout.cli", "train", *args]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    return supervise(cmd, env)


def supervise(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` (torchrun) and wait for it; its exit status.

    torchrun runs in a session of its own, as its workers do, so a terminal's Ctrl-C reaches
    this process only. The first SIGINT, SIGTERM or SIGHUP (the terminal closed, the ssh
    session dropped) here becomes one SIGTERM to torchrun, which passes it to its workers
    (SIGTERM, as a worker started in the background ignores SIGINT) and exits once they have
    stopped; later signals are not passed on, as a second one would cut torchrun's shutdown
    short and leave workers training. Once torchrun has exited, the signal is raised here
    again, so the command stops as any command stopped by it (130, 143; SIGHUP's default).
    SIGHUP ignored at start (``nohup``) is left ignored.
    """
    received: list[int] = []
    torchrun: dict[str, Any] = {"child": None, "stopped": False}

    def stop_torchrun() -> None:  # once: a second signal would cut its shutdown short
        if received and torchrun["child"] is not None and not torchrun["stopped"]:
            torchrun["stopped"] = True
            torchrun["child"].send_signal(signal.SIGTERM)

    def pass_on(signum: int, frame: Any) -> None:
        if not received:
            print(
                f"vlrollout train: {signal.Signals(signum).name}: stopping the training processes",
                file=sys.stderr,
                flush=True,
            )
        received.append(signum)
        stop_torchrun()

    # nohup ignores SIGHUP so that a closed terminal does not stop the run: leave it ignored.
    stops = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stops.append(signal.SIGHUP)
    # Handlers first: a signal while torchrun starts must stop it, not this process alone.
    previous = {signum: signal.signal(signum, pass_on) for signum in stops}
    try:
        torchrun["child"] = child = subprocess.Popen(cmd, env=env, start_new_session=True)
        stop_torchrun()  # a signal that came while it started
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        signal.raise_signal(received[0])
    return status
