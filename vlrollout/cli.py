"""The ``vlrollout`` command line: ``run``, ``make-samples``, ``train-tiny``, ``snapshot``, ``check``.

Subcommands import their heavy dependencies only when they run, so ``vlrollout --help`` is fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a workflow over a data file and write trajectories, a summary and a report",
        description="Run rollouts. Settings come from --config (YAML) and are overridden by flags.",
    )
    p.add_argument("--config", help="YAML file with RunConfig fields (see vlrollout/run_config.py)")
    p.add_argument("--data", help="JSONL or parquet data file")
    p.add_argument("--output", help="output folder (resumes if it has finished items)")
    p.add_argument(
        "--workflow",
        help="text | vision | multi_attempt | vision_multi_attempt | vision_tool | import path",
    )
    p.add_argument("--reward", help="reward name (vlrollout.rewards registry) or import path")
    p.add_argument("--preprocessor", help="preprocessor name or import path")
    p.add_argument("--group-size", type=int, dest="group_size")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--limit", type=int, help="only the first N items")
    p.add_argument("--max-turns", type=int, dest="max_turns")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-new-tokens", type=int, dest="gconfig.max_new_tokens")
    p.add_argument("--temperature", type=float, dest="gconfig.temperature")
    p.add_argument("--greedy", action="store_const", const=True, dest="gconfig.greedy")
    p.add_argument("--engine", choices=["local", "sglang", "vllm"], dest="engine.kind")
    p.add_argument("--model", dest="engine.model", help="local model folder")
    p.add_argument("--device", dest="engine.device", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--address", action="append", dest="engine.addresses", help="server host:port (repeat)"
    )
    p.add_argument("--fail-fast", action="store_const", const=True, dest="fail_fast")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from vlrollout.run_config import RunConfig
    from vlrollout.run_main import run_from_config

    overrides = {
        k: v for k, v in vars(args).items() if k not in ("config", "func", "command", "no_progress")
    }
    cfg = RunConfig.load(args.config, **overrides)
    summary = run_from_config(cfg, progress=not args.no_progress)
    brief = {k: summary[k] for k in ("items", "episodes", "reward", "tokens_per_s", "wall_s")}
    print(json.dumps(brief, indent=1))
    for r in summary["rejections"][:20]:
        print(f"rejected item {r['id']}: {r['reason']}: {r['detail']}")
    print(f"wrote {cfg.output}/summary.json and {cfg.output}/report.html")
    return 1 if "stopped_early" in summary else 0


def _add_make_samples(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-samples",
        help="generate the synthetic sample set (images + JSONL; arguments go to the generator)",
        add_help=False,
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_make_samples)


def _cmd_make_samples(args: argparse.Namespace) -> int:
    from vlrollout.tiny import synthetic

    synthetic.main(args.rest)
    return 0


def _add_train_tiny(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-tiny",
        help="train the tiny Qwen2-VL model shipped in assets/ (arguments go to the trainer)",
        add_help=False,
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_train_tiny)


def _cmd_train_tiny(args: argparse.Namespace) -> int:
    from vlrollout.tiny import train

    train.main(args.rest)
    return 0


def _add_snapshot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--processor",
        required=True,
        help="local processor folder, or offline:FAMILY for a processor built in code "
        "(families: see vlrollout.processors.offline)",
    )
    p.add_argument("--preprocessor", default="auto", help="preprocessor name or import path")
    p.add_argument("--data", default="assets/samples/data.jsonl", help="items to prepare")
    p.add_argument("--min-pixels", type=int, dest="min_pixels")
    p.add_argument("--max-pixels", type=int, dest="max_pixels")


def _snapshot_inputs(args: argparse.Namespace):
    from vlrollout.datasets import load_items
    from vlrollout.processors.registry import get_preprocessor

    if args.processor.startswith("offline:"):
        from vlrollout.processors.offline import build_offline_processor

        processor = build_offline_processor(args.processor.split(":", 1)[1])
    else:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(args.processor, local_files_only=True)
    from vlrollout.snapshots import SnapshotError

    limits = {k: getattr(args, k) for k in ("min_pixels", "max_pixels") if getattr(args, k)}
    preprocessor = get_preprocessor(args.preprocessor, processor=processor, **limits)
    try:
        items = [i for i in load_items(args.data) if i.get("images")]
    except (OSError, ValueError) as e:
        raise SnapshotError(f"cannot read the data file {args.data}: {e}") from None
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


def _add_snapshot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="record a processor regression snapshot (review the diff before committing)",
    )
    _add_snapshot_args(p)
    p.add_argument("--out", required=True, help="snapshot JSON to write")
    p.set_defaults(func=_snapshot_errors(_cmd_snapshot))


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from vlrollout.snapshots import save_snapshot, take_snapshot

    preprocessor, items = _snapshot_inputs(args)
    save_snapshot(take_snapshot(preprocessor, items), args.out)
    print(f"wrote {args.out} ({len(items)} items)")
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vlrollout",
        description="Vision-language RL rollouts on AReaL: run workflows, build the tiny model, "
        "and keep processor regression snapshots.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_make_samples(sub)
    _add_train_tiny(sub)
    _add_snapshot(sub)
    _add_check(sub)
    return parser


# Commands whose arguments belong to another module's own parser.
PASS_THROUGH = {"make-samples": _cmd_make_samples, "train-tiny": _cmd_train_tiny}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASS_THROUGH:
        return PASS_THROUGH[argv[0]](argparse.Namespace(rest=argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
