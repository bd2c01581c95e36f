"""The ``vlrollout`` command line: ``run``, ``validate-data``, ``make-samples``, ``train-tiny``,
``train``, ``serve``, ``snapshot``, ``check``.

Subcommands import their heavy dependencies only when they run, so ``vlrollout --help`` is fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from vlrollout.argtypes import whole_number
from vlrollout.errors import SignalExit
from vlrollout.versions import version_line

if TYPE_CHECKING:
    from vlrollout.run.config import RunConfig


class _Parser(argparse.ArgumentParser):
    """argparse with a two-line error: the problem, and where the help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n  see `{self.prog} --help`\n")


class _PrintVersion(argparse.Action):
    """``--version``: :func:`~vlrollout.versions.version_line` on one line (argparse's own version
    action wraps it), then exit 0."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(version_line())
        parser.exit(0)


#: The functions that add one subcommand each, in ``--help`` order. A new subcommand is one
#: ``@subcommand`` function that adds its parser and sets ``func`` (see ``_add_run``).
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []


def subcommand(add: Callable[[argparse._SubParsersAction], None]):
    """Register ``add(subparsers)`` as a subcommand of ``vlrollout``."""
    SUBCOMMANDS.append(add)
    return add


#: Commands whose arguments belong to another module's own parser: name → ``main(argv)``.
PASS_THROUGH: dict[str, Callable[[list[str]], int]] = {}


def pass_through(name: str, help: str, module: str) -> None:
    """Register ``vlrollout NAME ARGS...`` as ``MODULE.main(ARGS)`` (imported when it runs); an
    ``int`` it returns is the exit status, anything else (a path, a record) means 0."""

    def run(rest: list[str]) -> int:
        import importlib

        status = importlib.import_module(module).main(rest)
        return status if isinstance(status, int) else 0

    def add(sub: argparse._SubParsersAction) -> None:  # listed in --help; main() dispatches
        sub.add_parser(name, help=help, add_help=False)

    PASS_THROUGH[name] = run
    subcommand(add)


# Flags of `vlrollout run` that are not RunConfig fields.
RUN_ONLY_FLAGS = ("config", "settings", "func", "command", "no_progress", "overwrite", "debug")

RUN_EPILOG = """\
Settings come from --config (YAML) and are overridden by flags; relative paths in both are
relative to the working folder, as in AReaL's configs. Rerunning the same command resumes: finished
items are skipped. A rerun with different settings into the same --output is refused (use
--overwrite to start over). Ctrl-C or SIGTERM stops after writing every finished item (exit
130/143). Data items: docs/item_format.md; check a file with `vlrollout validate-data FILE`.
Exit status: 0 done (some episodes may be rejected: see summary.json), 1 stopped early
(--fail-fast) or an internal error, 2 a usage error, 3 no episode was accepted (the counts and
the top rejection reasons are printed; summary.json and report.html are still written).
"""


@subcommand
def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a workflow over a data file and write trajectories, a summary and a report",
        description="Run rollouts and write trajectories, summary.json and report.html.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a = p.add_argument
    a("--config", help="YAML file with RunConfig fields (see vlrollout/run/config.py)")
    a(
        "settings",
        nargs="*",
        metavar="KEY=VALUE",
        help="any RunConfig field, AReaL style (e.g. gconfig.top_p=0.9 engine.deterministic=false)",
    )
    a("--data", help="data file or save_to_disk folder (docs/datasets.md: every format)")
    _add_data_flags(a)
    a("--output", help="output folder (a rerun with the same settings resumes)")
    a("--overwrite", action="store_true", help="delete earlier results in --output first")
    a(
        "--workflow",
        help="text | vision | multi_attempt | vision_multi_attempt | vision_tool | import path",
    )
    a("--reward", help="reward name (vlrollout.rewards registry) or import path")
    a(
        "--box-format",
        dest="box_format",
        help="how the model writes boxes, when not as its family does (e.g. qwen2_vl), for the "
        "box and point rewards",
    )
    a("--preprocessor", help="preprocessor name or import path (default: the model's)")
    a("--group-size", type=int, dest="group_size", help="episodes per item (a GRPO group)")
    a("--concurrency", type=int, help="items in flight at once")
    a("--limit", type=int, help="only the first N items")
    a("--max-turns", type=int, dest="max_turns", help="turns of multi-attempt and tool workflows")
    a("--turn-discount", type=float, dest="turn_discount", help="reward discount per extra turn")
    a("--tools", type=lambda s: s.split(","), help="comma-separated tools for vision_tool")
    a("--min-pixels", type=int, dest="min_pixels", help="resize limit of the preprocessor")
    a("--max-pixels", type=int, dest="max_pixels", help="resize limit of the preprocessor")
    a("--video-fps", type=float, dest="video_fps", help="frames sampled per second of a video")
    a("--video-max-frames", type=int, dest="video_max_frames", help="most frames per video")
    a(
        "--video-min-pixels",
        type=int,
        dest="video_min_pixels",
        help="smallest pixel budget of a frame (Qwen3-VL: of the clip)",
    )
    a(
        "--video-max-pixels",
        type=int,
        dest="video_max_pixels",
        help="largest pixel budget of a frame (Qwen3-VL: of the clip)",
    )
    a(
        "--max-prompt-tokens",
        type=int,
        dest="max_prompt_tokens",
        help="reject longer prompts as prompt_too_long (default: the model's context length "
        "minus --max-new-tokens)",
    )
    a(
        "--prompt-cache-bytes",
        type=int,
        dest="prompt_cache_bytes",
        metavar="N",
        help="bytes of prepared prompts kept after their group is done (default 1 GiB)",
    )
    a(
        "--reward-timeout",
        type=float,
        dest="reward_timeout_s",
        metavar="S",
        help="seconds per reward call",
    )
    a("--seed", type=int, help="sampling seed; turns on deterministic scheduling")
    a(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        dest="engine.deterministic",
        help="batch requests independently of timing (default: on when --seed is given)",
    )
    a(
        "--compile",
        action="store_const",
        const=True,
        dest="engine.compile",
        help="compile the local engine's decode step with torch.compile (~30 s at the start)",
    )
    a(
        "--max-new-tokens",
        type=int,
        dest="gconfig.max_new_tokens",
        metavar="N",
        help="tokens per turn",
    )
    a(
        "--temperature",
        type=float,
        dest="gconfig.temperature",
        metavar="T",
        help="sampling temperature",
    )
    a("--top-p", type=float, dest="gconfig.top_p", metavar="P", help="nucleus sampling threshold")
    a(
        "--greedy",
        action="store_const",
        const=True,
        dest="gconfig.greedy",
        help="greedy decoding",
    )
    a(
        "--engine",
        choices=["local", "sglang", "vllm"],
        dest="engine.kind",
        help="embedded engine or running SGLang/vLLM servers",
    )
    a(
        "--model",
        dest="engine.model",
        metavar="PATH",
        help="local model folder (also the tokenizer for servers)",
    )
    a("--device", dest="engine.device", metavar="DEVICE", help="cpu | cuda | cuda:N (local engine)")
    a(
        "--address",
        action="append",
        dest="engine.addresses",
        metavar="HOST:PORT",
        help="server host:port (repeat for several)",
    )
    a(
        "--fail-fast",
        action="store_const",
        const=True,
        dest="fail_fast",
        help="stop at the first rejected item",
    )
    a("--no-progress", action="store_true", help="no progress bar")
    a("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=_cmd_run)


def run_config_from_flags(argv: Sequence[str]) -> RunConfig:
    """The settings that ``vlrollout run ARGV...`` runs with: ``--config``, then the
    ``key=value`` settings, then the flags (see ``RUN_EPILOG``).

    Args:
        argv: The arguments after ``vlrollout run``.

    Returns:
        The :class:`~vlrollout.run.config.RunConfig` the command would run, built exactly as the
        command builds it.

    Raises:
        SystemExit: a flag is unknown or malformed (status 2, as on the command line).
        ConfigError: a setting is not valid (see :meth:`RunConfig.load`).

    Example:
        >>> run_config_from_flags(["--seed", "3", "gconfig.top_p=0.5"]).gconfig.top_p
        0.5
    """
    return _run_config(build_parser().parse_args(["run", *argv]))


def _add_data_flags(a: Any) -> None:
    """``--format``, ``--map``, ``--images-root``, ``--prompt``: how a data file is read."""
    a("--format", dest="data_format", metavar="FORMAT", help="data format (default: detected)")
    a(
        "--map",
        nargs="+",
        dest="data_map",
        metavar="FIELD=COLUMN",
        help="take item fields from other columns, e.g. --map question=problem answer=solution",
    )
    a(
        "--images-root",
        dest="images_root",
        metavar="DIR",
        help="folder of the images a COCO/RefCOCO/LLaVA file names (default: docs/datasets.md)",
    )
    a("--prompt", help="prompt template for items without messages, e.g. '{question}'")


def _run_config(args: argparse.Namespace) -> RunConfig:
    from vlrollout.readers import parse_mapping
    from vlrollout.run.config import RunConfig

    overrides = {k: v for k, v in vars(args).items() if k not in RUN_ONLY_FLAGS}
    if overrides.get("data_map"):
        overrides["data_map"] = parse_mapping(overrides["data_map"])
    return RunConfig.load(args.config, dotlist=args.settings, **overrides)


def _cmd_run(args: argparse.Namespace) -> int:
    from vlrollout.run.main import run_from_config

    cfg = _run_config(args)
    summary = run_from_config(cfg, progress=not args.no_progress, overwrite=args.overwrite)
    brief = {
        k: summary[k] for k in ("engine", "items", "episodes", "reward", "tokens_per_s", "wall_s")
    }
    print(json.dumps(brief, indent=1))
    counts = Counter((r["id"], r["reason"], r["detail"]) for r in summary["rejections"])
    for (item_id, reason, detail), n in list(counts.items())[:20]:
        print(f"rejected item {item_id}: {reason}: {detail}" + (f" (×{n})" if n > 1 else ""))
    print(f"wrote {cfg.output}/summary.json and {cfg.output}/report.html")
    if "stopped_early" in summary:
        return 1
    if summary["episodes"]["accepted"] == 0:
        from vlrollout.ledger import NothingAccepted

        raise NothingAccepted(
            "the run",
            summary["episodes"]["rejected"],  # every episode of the run, as none was accepted
            summary["rejections"],
            hint=f"every rejection: {cfg.output}/summary.json (rejections) and report.html",
        )
    return 0


@subcommand
def _add_validate_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate-data",
        help="check a data file against the item format and list every bad line",
        description="Check every line of a data file (docs/item_format.md). Exit 0: all good; "
        "1: some lines have problems; 2: the file cannot be read.",
    )
    p.add_argument("file", help="data file or save_to_disk folder (docs/datasets.md)")
    _add_data_flags(p.add_argument)
    p.set_defaults(func=_cmd_validate_data)


def _validate_read_items(args: argparse.Namespace) -> tuple[int, list[Any]]:
    """``(items, problems)`` of a file in any reader format: every item as ``vlrollout run``
    would get it, checked like a JSONL line (named by its position, from 1)."""
    from vlrollout.readers import DataFileError, parse_mapping, read_all_items
    from vlrollout.run.items import BadLine, media_file_problems

    class _BadItem(BadLine):
        def __str__(self) -> str:
            return f"item {self.line} (id {self.id}): {self.reason}: {self.detail}"

    items = read_all_items(
        args.file,
        fmt=args.data_format,
        mapping=parse_mapping(args.data_map) if args.data_map else None,
        images_root=args.images_root,
        prompt=args.prompt,
    )
    given = Path(args.file).resolve()
    base = given if given.is_dir() else given.parent
    bad = [
        _BadItem(n, str(item.get("id")), reason, detail)
        for n, item in enumerate(items, 1)
        for reason, detail in media_file_problems(item, base)
    ]
    if not items:
        raise DataFileError(f"data file {args.file} has no items")
    return len(items), bad


def _cmd_validate_data(args: argparse.Namespace) -> int:
    from vlrollout.readers import detect_format
    from vlrollout.run.items import validate_data

    flags = (args.data_format, args.data_map, args.images_root, args.prompt)
    if not any(flags) and detect_format(args.file) == "jsonl":
        n, bad = validate_data(args.file)
    else:
        n, bad = _validate_read_items(args)
    for problem in bad:
        print(f"{args.file}:{problem}")
    lines = len({b.line for b in bad})
    print(
        f"{args.file}: {n} items, {lines} with problems"
        if bad
        else f"{args.file}: {n} items, all good"
    )
    return 1 if bad else 0


pass_through(
    "make-samples",
    "generate the synthetic sample set (images + JSONL; arguments go to the generator)",
    "vlrollout.tiny.synthetic",
)


pass_through(
    "train-tiny",
    "train the tiny Qwen2-VL model shipped in assets/ (arguments go to the trainer)",
    "vlrollout.tiny.train",
)


pass_through(
    "eval",
    "score a model or a served endpoint on a dataset with benchmark metrics (--data, --task)",
    "vlrollout.eval.main",
)


pass_through(
    "train",
    "GRPO with AReaL's actor on the embedded engine (--config YAML, key=value overrides)",
    "vlrollout.train.main",
)


def _add_snapshot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--processor",
        required=True,
        help="local processor folder, or offline:FAMILY for a processor built in code "
        "(families: see vlrollout.testing.offline_processors)",
    )
    p.add_argument("--preprocessor", default="auto", help="preprocessor name or import path")
    p.add_argument("--data", default="assets/samples/data.jsonl", help="items to prepare")
    p.add_argument("--min-pixels", type=whole_number(1), dest="min_pixels")
    p.add_argument("--max-pixels", type=whole_number(1), dest="max_pixels")


def _snapshot_inputs(args: argparse.Namespace):
    from vlrollout.datasets import load_items
    from vlrollout.processors.registry import get_preprocessor
    from vlrollout.snapshots import SnapshotError

    try:
        if args.processor.startswith("offline:"):
            from vlrollout.testing.offline_processors import build_offline_processor

            processor = build_offline_processor(args.processor.split(":", 1)[1])
        else:
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(args.processor, local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SnapshotError(f"--processor {args.processor!r}: {first}") from None

    limits = {k: v for k in ("min_pixels", "max_pixels") if (v := getattr(args, k)) is not None}
    try:
        preprocessor = get_preprocessor(args.preprocessor, processor=processor, **limits)
    except ValueError as e:  # the name or the limits given: the caller's to fix
        raise SnapshotError(str(e)) from None
    try:
        items = list(load_items(args.data))
    except (OSError, ValueError) as e:
        raise SnapshotError(f"cannot read the data file {args.data}: {e}") from None
    if not items:
        raise SnapshotError(f"{args.data} has no items: a snapshot of nothing checks nothing")
    return preprocessor, items


def _snapshot_errors(command):
    """Snapshot commands report a bad item or file as one message and exit 2, no traceback."""

    def run(args: argparse.Namespace) -> int:
        from vlrollout.snapshots import SnapshotError

        try:
            return command(args)
        except SnapshotError as e:
            print(f"vlrollout {args.command}: {e}", file=sys.stderr)
            return 2

    return run


@subcommand
def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="record a processor regression snapshot (review the diff before committing)",
    )
    _add_snapshot_args(p)
    p.add_argument("--out", required=True, help="snapshot JSON to write")
    p.set_defaults(func=_snapshot_errors(_cmd_snapshot))


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from vlrollout.snapshots import SnapshotError, save_snapshot, take_snapshot

    preprocessor, items = _snapshot_inputs(args)
    snapshot = take_snapshot(preprocessor, items)
    try:
        save_snapshot(snapshot, args.out)
    except OSError as e:
        raise SnapshotError(f"cannot write --out {args.out}: {e.strerror or e}") from None
    print(f"wrote {args.out} ({len(items)} items)")
    return 0


@subcommand
def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="compare a fresh processor run with a snapshot")
    _add_snapshot_args(p)
    p.add_argument("--snapshot", required=True, help="snapshot JSON to compare with")
    p.set_defaults(func=_snapshot_errors(_cmd_check))


def _cmd_check(args: argparse.Namespace) -> int:
    from vlrollout.snapshots import compare, format_report, load_snapshot, take_snapshot

    preprocessor, items = _snapshot_inputs(args)
    expected = load_snapshot(args.snapshot)
    actual = take_snapshot(preprocessor, items)
    diffs = compare(expected, actual)
    if diffs:
        print(f"{len(diffs)} difference(s) from {args.snapshot}:")
        print(format_report(diffs, expected, actual))
        return 1
    print(f"{args.snapshot}: {len(actual['items'])} items match")
    return 0


@subcommand
def _add_serve(sub: argparse._SubParsersAction) -> None:
    from vlrollout.serve.main import add_arguments, serve

    p = sub.add_parser(
        "serve", help="serve a local model over SGLang's or AReaL's vLLM HTTP protocol"
    )
    add_arguments(p)
    p.set_defaults(func=serve)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vlrollout",
        description="Vision-language RL rollouts on AReaL: run workflows, build the tiny model, "
        "and keep processor regression snapshots.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument(
        "--version",
        action=_PrintVersion,
        help="print the versions of vlrollout, AReaL, torch and transformers, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


#: What a command stopped by a signal leaves to resume from (said on its last line); commands
#: not listed (serve, snapshot, ...) keep nothing worth naming.
KEPT_WHEN_STOPPED = {
    "run": "finished items are kept: rerun the same command to resume",
    "eval": "finished predictions are kept: rerun the same command to resume",
    "train": "saved checkpoints are kept: rerun the same command to resume from the last one",
}


#: Exit status of a command whose run, training step or held-out evaluation had no accepted
#: episode (1 and 2 are taken by internal and usage errors).
NOTHING_ACCEPTED = 3


_RECEIVED: list[int] = []
"""SIGTERMs received during the current command: a library that caught the :class:`SignalExit`
(pydantic-core turns one raised inside it into a ``SchemaError``) cannot hide the stop."""


def _raise_signal_exit(signum: int, frame: Any) -> None:
    _RECEIVED.append(signum)
    raise SignalExit(signum)


def _stopped(command: str, signum: int, debug: bool) -> int:
    """The one line of a command stopped by ``signum`` (what it kept), and its exit status."""
    if debug:
        traceback.print_exc()
    kept = KEPT_WHEN_STOPPED.get(command)
    print(
        f"vlrollout {command}: stopped by {signal.Signals(signum).name}"
        + (f"; {kept}" if kept else ""),
        file=sys.stderr,
    )
    return 128 + signum


def _error(command: str, message: str) -> None:
    print(f"vlrollout {command}: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the exit status (see :func:`run_command`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if argv and argv[0] in PASS_THROUGH:
        rest = [a for a in argv[1:] if a != "--debug"]
        return run_command(argv[0], lambda: PASS_THROUGH[argv[0]](rest), debug=debug)
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command(args.command, lambda: args.func(args), debug=debug)


def run_command(command: str, func: Callable[[], int], debug: bool = False) -> int:
    """Call ``func`` the way every subcommand runs: errors become short messages and statuses.

    Usage errors (a bad flag, key, value or file) print one or two lines and return 2; a batch
    with no accepted episode (:class:`~vlrollout.ledger.NothingAccepted`: a whole run, a training
    step, a held-out evaluation) prints its counts and top rejection reasons and returns 3; other
    errors print their type and message and return 1; ``debug`` adds the traceback. SIGINT and
    SIGTERM return 130 and 143 after one line saying what was kept; no worker process outlives
    the command.
    """
    from vlrollout.errors import Interrupted, UsageError
    from vlrollout.ledger import NothingAccepted
    from vlrollout.logs import log_to_stderr

    log_to_stderr(logging.DEBUG if debug else logging.WARNING)
    _RECEIVED.clear()
    previous = signal.signal(signal.SIGTERM, _raise_signal_exit)
    workers = _worker_state()
    try:
        status = func()
        return _stopped(command, _RECEIVED[0], debug) if _RECEIVED else status
    except UsageError as e:
        if debug:
            traceback.print_exc()
        _error(command, str(e))
        return 2
    except NothingAccepted as e:
        if debug:
            traceback.print_exc()
        _error(command, str(e))
        return NOTHING_ACCEPTED
    except Interrupted as e:
        name = signal.Signals(e.signum).name
        print(
            f"vlrollout {command}: stopped by {name}: {e.done} of {e.total} items done in "
            f"{e.output}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 128 + e.signum
    except (KeyboardInterrupt, SignalExit) as e:
        return _stopped(command, e.signum if isinstance(e, SignalExit) else signal.SIGINT, debug)
    except Exception as e:
        if _RECEIVED:  # the SignalExit came back as another error
            return _stopped(command, _RECEIVED[0], debug)
        if debug:
            traceback.print_exc()
        first = str(e).splitlines()[0] if str(e) else ""
        _error(command, f"{type(e).__name__}: {first}")
        if not debug:
            print("  rerun with --debug for the traceback", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            _stop_children(workers)
        except KeyboardInterrupt:  # a second Ctrl-C while waiting: stop waiting
            _stop_children(workers, grace_s=0.0)


def _worker_state() -> tuple[list[Any], set[Any]]:
    """Reward pools and child processes that exist now (so only newer ones are stopped)."""
    import multiprocessing

    from vlrollout.rewards.executor import live_reward_pools

    return live_reward_pools(), set(multiprocessing.active_children())


def _stop_children(before: tuple[list[Any], set[Any]], grace_s: float = 5.0) -> None:
    """Shut down the reward pools and child processes the command started, so none outlives it,
    even after SIGTERM or with a reward still running, each given ``grace_s`` seconds. Older
    ones are left alone."""
    import multiprocessing

    from vlrollout.rewards import executor

    pools, children = before
    executor.shutdown_reward_pools(keep=pools, grace_s=grace_s)
    for child in set(multiprocessing.active_children()) - children:
        child.terminate()
        child.join(timeout=grace_s)
        if child.is_alive():
            child.kill()


if __name__ == "__main__":
    sys.exit(main())
