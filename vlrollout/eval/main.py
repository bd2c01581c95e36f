"""``vlrollout eval``: score a model, or a served one, on a dataset with a benchmark task.

Every check that needs no model runs first (the task, the data, the model folder or the server,
the output folder, the ``--compare`` file and its task); then the model source is built, the items run
(:func:`vlrollout.eval.runner.evaluate_items`, resumable), and ``results.json``, ``report.html``
and the printed table come out. Exit status: 0 done, 1 a regression against ``--compare``,
2 a usage error, 3 no item was scored, 130 (143) stopped by Ctrl-C (SIGTERM; finished
predictions are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.argtypes import whole_number
from vlrollout.datasets import load_items
from vlrollout.engine.checks import check_engine
from vlrollout.engine.config import EngineConfig
from vlrollout.engine.factory import make_engine
from vlrollout.errors import ConfigError, UsageError
from vlrollout.eval.metrics.boxes import check_box_format
from vlrollout.eval.openai_client import OpenAIPredictor, api_base_url
from vlrollout.eval.predict import EnginePredictor
from vlrollout.eval.prediction import Predictor
from vlrollout.eval.report import write_report
from vlrollout.eval.results import (
    DEFAULT_THRESHOLD,
    check_baseline,
    compare,
    differing_inputs,
    format_table,
    read_results,
    write_results,
)
from vlrollout.eval.runner import EvalResult, aevaluate_items, pending_items, prepare_output
from vlrollout.eval.tasks import EvalTask, get_task
from vlrollout.families import family_name_at
from vlrollout.ledger import NothingAccepted
from vlrollout.readers import parse_mapping
from vlrollout.stopping import until_signalled
from vlrollout.workflows.preparation import FrameSampling

PROTOCOLS = ("openai", "sglang", "vllm")
DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_TEMPERATURE = 1.0
"""The sampling temperature of ``--k > 1`` when ``--temperature`` is not given."""

EPILOG = f"""\
Against a local model: --model DIR. Against a server: --address HOST:PORT --protocol
openai|sglang|vllm, with --model DIR the local folder of the served model's processor and config
(our preprocessor builds the prompt and reads each image's resize geometry from it; the model
family read from its config.json decides how boxes are parsed). --protocol openai talks to any
/v1/chat/completions server (vLLM, SGLang, `vlrollout serve --protocol vllm`, hosted APIs; the
key from $OPENAI_API_KEY); sglang and vllm use AReaL's remote engines.

Rerunning the same command resumes (finished items are kept in OUTPUT/predictions/, each with a
digest of its prompt and images: an item changed since, an edited data file, runs again and is
counted as redone); a rerun with other settings into the same --output is refused (--overwrite
starts over). --limit may change. --temperature is for --k > 1 (default 1.0); --k 1 is greedy.

--compare BASELINE.json exits 1 when a metric (overall or of a split in both) is lower than the
baseline's by more than --threshold, an absolute difference (default {DEFAULT_THRESHOLD}: one
point of a 0-1 accuracy); every metric is higher-is-better.
Exit status: 0 done, 1 a regression found by --compare (each one printed), 2 a usage error,
3 no item was scored (the reasons are printed; results.json and report.html are still written),
130 (143) stopped by Ctrl-C (SIGTERM): finished predictions are kept, rerun to resume.
Documentation: docs/eval.md.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        self.exit(2, f"vlrollout eval: error: {message}\n  see `vlrollout eval --help`\n")


MIN_BOOTSTRAP = 100
"""Fewest resamples a 95 % percentile interval is read from (its ends are the 2.5th and 97.5th
percentiles of the resampled metric; with a handful they are whatever those few draws were)."""


def bootstrap_count(text: str) -> int:
    """``--bootstrap``: 0, or at least :data:`MIN_BOOTSTRAP` resamples."""
    value = whole_number(0)(text)
    if 0 < value < MIN_BOOTSTRAP:
        raise argparse.ArgumentTypeError(
            f"{value} resamples cannot give a 95% interval: use 0 (none) or at least "
            f"{MIN_BOOTSTRAP}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vlrollout eval",
        description="Score a model or a served endpoint on a dataset with benchmark metrics.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a = p.add_argument
    a("--data", required=True, help="data file or folder (any format vlrollout reads)")
    a("--task", required=True, help="refcoco | caption | count | mc | vqa")
    a("--model", help="local model folder (with --address: the served model's processor)")
    a("--address", help="HOST:PORT (or URL, for openai) of a running server")
    a("--protocol", choices=PROTOCOLS, help="how to talk to --address")
    a(
        "--served-model",
        dest="served_model",
        help="openai: the model name (default: the only one listed)",
    )
    a("--output", required=True, help="output folder (a rerun with the same settings resumes)")
    a("--limit", type=whole_number(1), help="only the first N items")
    a("--k", type=whole_number(1), default=1, help="completions per item (k > 1: sampled, pass@k)")
    a(
        "--temperature",
        type=float,
        help=f"sampling temperature of --k > 1 (default {DEFAULT_TEMPERATURE}); refused with "
        "--k 1, which decodes greedily",
    )
    a("--concurrency", type=whole_number(1), default=4, help="items in flight at once")
    a(
        "--max-new-tokens",
        type=whole_number(1),
        default=DEFAULT_MAX_NEW_TOKENS,
        dest="max_new_tokens",
    )
    a("--format", dest="fmt", help="data format (default: detected from the path)")
    a(
        "--map",
        nargs="+",
        default=[],
        metavar="FIELD=COLUMN",
        help="column mapping, e.g. answer=solution",
    )
    a("--images-root", dest="images_root", help="folder image paths in the data are relative to")
    a("--prompt", help="prompt template (default: the task's), fields in braces: {expression}")
    a(
        "--box-format",
        dest="box_format",
        metavar="NAME",
        help="how the model writes boxes, when not as its family does (a fine-tuned model): a "
        "family name (qwen2_vl: <|box_start|>(x,y),(x,y)<|box_end|> in 0-1000), a parser of "
        "vlrollout.rewards.box_parsing, or plain:FRAME for [x1, y1, x2, y2] lists in original, "
        "model, norm1000 or norm1 (default: the model family's)",
    )
    a("--seed", type=int, default=0, help="sampling (--k > 1) and bootstrap seed (default 0)")
    a(
        "--no-deterministic",
        action="store_false",
        dest="deterministic",
        help="let the local engine batch requests as they come: faster, but a rare greedy "
        "argmax can then flip with the load, so the numbers may not reproduce exactly",
    )
    a("--compare", metavar="BASELINE.json", help="results.json to compare with (exit 1 on a drop)")
    a(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"largest allowed drop of a metric, absolute (default {DEFAULT_THRESHOLD})",
    )
    a(
        "--bootstrap",
        type=bootstrap_count,
        default=1000,
        metavar="N",
        help=f"resamples per 95%% interval, 0 (none) or at least {MIN_BOOTSTRAP} (caption metrics "
        "recompute the corpus scores per resample: lower it for large caption sets)",
    )
    a("--video-fps", type=float, dest="video_fps", help="frames sampled per second of a video")
    a("--video-max-frames", type=whole_number(1), dest="video_max_frames", help="most frames")
    a("--video-min-pixels", type=whole_number(1), dest="video_min_pixels", help="frame budget")
    a("--video-max-pixels", type=whole_number(1), dest="video_max_pixels", help="frame budget")
    a("--overwrite", action="store_true", help="delete earlier results in --output first")
    a("--no-progress", action="store_true", dest="no_progress", help="no progress bar")
    a("--device", default="cpu", help="cpu, cuda or cuda:N for a local model")
    return p


@dataclass
class Plan:
    """What the checks found: the task, the items, the settings and the baseline."""

    args: argparse.Namespace
    task: EvalTask
    items: list[dict[str, Any]]
    settings: dict[str, Any]
    baseline: dict[str, Any] | None
    family: str


def _check_flags(args: argparse.Namespace) -> None:
    if not args.output.strip():  # Path("") is the working folder
        raise UsageError(f"--output must name a folder, got {args.output!r}")
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty: give a template, or leave it out for the task's")
    if args.address is None and args.served_model is not None:
        raise UsageError("--served-model needs --address: without a server the model is local")
    if args.address is None and args.protocol is not None:
        raise UsageError("--protocol needs --address HOST:PORT of a running server")
    if args.address is not None and args.protocol is None:
        raise UsageError(f"--address needs --protocol ({' | '.join(PROTOCOLS)})")
    if args.model is None:
        raise UsageError(
            "pass --model DIR: the local model, or with --address the served model's folder "
            "(its processor builds the prompts and its config names the family)"
        )
    frames = frame_sampling(args)
    if frames != FrameSampling() and args.protocol == "openai":
        raise UsageError("--video-* sample videos, which --protocol openai does not carry")
    if args.k == 1 and args.temperature is not None:
        raise UsageError("--temperature needs --k > 1; --k 1 decodes greedily")
    if args.k > 1 and not 0 < temperature(args) < math.inf:
        raise UsageError(f"--k {args.k} samples need --temperature > 0, got {args.temperature}")
    if not 0 <= args.threshold < math.inf:  # a NaN bound would pass every comparison
        raise UsageError(f"--threshold must be a number >= 0, got {args.threshold}")
    if args.seed < 0:  # numpy's bootstrap generator takes none
        raise UsageError(f"--seed must be >= 0, got {args.seed}")


def frame_sampling(args: argparse.Namespace) -> FrameSampling:
    """How videos are sampled, from the ``--video-*`` flags (the family's default where unset).

    Raises:
        UsageError: a setting that is not a positive number (``--video-fps nan``).
    """
    names = ("fps", "max_frames", "min_pixels", "max_pixels")
    values = [getattr(args, f"video_{name}") for name in names]
    for name, value in zip(names, values, strict=True):
        if value is not None and not value > 0:  # NaN fails too
            flag = "--video-" + name.replace("_", "-")
            raise UsageError(f"{flag} must be a positive number, got {value}")
    return FrameSampling(*values)


def temperature(args: argparse.Namespace) -> float:
    """The sampling temperature of ``--k > 1``: ``--temperature``, else the default."""
    return DEFAULT_TEMPERATURE if args.temperature is None else args.temperature


def check_server(address: str, protocol: str, model: str) -> None:
    """Refuse a server that does not answer, before loading anything."""
    if protocol != "openai":
        check_engine(EngineConfig(kind=protocol, model=model, addresses=[address]))
        return
    url = urlsplit(address if "://" in address else f"http://{address}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=3).close()
    except OSError as e:
        raise ConfigError(
            f"cannot reach the openai server at {address} ({e.strerror or type(e).__name__}); "
            "start it first or fix --address"
        ) from None


def model_family(model: str) -> str:
    """The :mod:`vlrollout.families` name of the model in folder ``model`` (from its config)."""
    try:
        return family_name_at(model)
    except ValueError as e:
        raise ConfigError(f"--model {e}; the family decides how boxes are read") from None


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that shape the results (what a resume must keep); the item count, the
    concurrency, the address, the output folder and the bootstrap count are not among them."""
    settings = {
        "task": args.task,
        "data": str(Path(args.data).resolve()),
        "format": args.fmt,
        "map": list(args.map),
        "images_root": str(Path(args.images_root).resolve()) if args.images_root else None,
        "prompt": args.prompt,
        "box_format": args.box_format,
        "model": str(Path(args.model).resolve()),
        "source": args.protocol or "local",
        "served_model": args.served_model,
        "device": args.device if args.protocol is None else None,
        "k": args.k,
        "temperature": temperature(args) if args.k > 1 else None,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "deterministic": args.deterministic if args.protocol is None else None,
    }
    frames = frame_sampling(args)
    if frames != FrameSampling():  # only when set: results written without them still resume
        settings["video"] = asdict(frames)
    return settings


def plan(args: argparse.Namespace) -> Plan:
    """Every check that needs no model.

    Raises:
        UsageError: (or a subclass) naming the bad value and the fix.
    """
    _check_flags(args)
    try:
        task = get_task(args.task)
    except ValueError as e:
        raise UsageError(f"--task: {e}") from None
    if args.protocol is None:
        check_engine(EngineConfig(kind="local", model=args.model, device=args.device))
    else:
        check_server(args.address, args.protocol, args.model)
    # A typed format is checked strictly; a model family without a format of its own reads
    # lmms-eval's 0-1 lists (box_format's fallback), whatever the task.
    if args.box_format:
        try:
            check_box_format(args.box_format)
        except ValueError as e:
            raise UsageError(f"--box-format: {e}") from None
    family = args.box_format or model_family(args.model)
    mapping = _mapping(args.map)
    items = load_items(
        args.data,
        args.limit,
        fmt=args.fmt,
        mapping=mapping,
        images_root=args.images_root,
        prompt=args.prompt or task.prompt,
    )
    baseline = None
    if args.compare:
        baseline = read_results(args.compare)
        check_baseline(baseline, task.name, args.compare)
    settings = settings_of(args)
    prepare_output(Path(args.output), settings, overwrite=args.overwrite)
    return Plan(args, task, items, settings, baseline, family)


def _mapping(pairs: Sequence[str]) -> dict[str, str] | None:
    return parse_mapping(pairs) if pairs else None


def served_model_name(args: argparse.Namespace) -> str:
    """``--served-model``, else the one model the server's ``/v1/models`` lists."""
    if args.served_model:
        return args.served_model
    url = api_base_url(args.address)
    try:
        client = openai.OpenAI(base_url=url, api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY")
        names = [m.id for m in client.models.list()]
    except openai.OpenAIError as e:
        raise ConfigError(f"{url}/models: {e}; pass --served-model NAME") from None
    if len(names) != 1:
        raise ConfigError(
            f"{url}/models lists {len(names)} models ({', '.join(names[:5])}); "
            "pass --served-model NAME"
        )
    return names[0]


def _context_length(engine: Any) -> int | None:
    config = getattr(getattr(engine, "model", None), "config", None)
    config = getattr(config, "text_config", None) or config
    n = getattr(config, "max_position_embeddings", None)
    return n if isinstance(n, int) else None


def build_predictor(args: argparse.Namespace) -> tuple[Predictor, Callable[[], None]]:
    """The model source the flags name, and how to release it: our local engine, AReaL's remote
    SGLang/vLLM engine (both through :class:`EnginePredictor`), or an OpenAI-compatible server."""
    if args.protocol == "openai":
        predictor = OpenAIPredictor(
            args.address,
            served_model_name(args),
            args.model,
            api_key=os.environ.get("OPENAI_API_KEY"),
            max_tokens=args.max_new_tokens,
            temperature=temperature(args),
            seed=args.seed,
        )
        return predictor, lambda: None
    local = args.protocol is None
    cfg = EngineConfig(
        kind="local" if local else args.protocol,
        model=args.model,
        device=args.device,
        addresses=[] if local else [args.address],
    )
    kwargs = {"deterministic": args.deterministic} if local else {}
    engine = make_engine(cfg, seed=args.seed, max_concurrent_rollouts=args.concurrency, **kwargs)
    context = _context_length(engine)
    gconfig = GenerationHyperparameters(
        max_new_tokens=args.max_new_tokens, temperature=temperature(args)
    )
    try:
        predictor = EnginePredictor(
            engine,
            getattr(engine, "tokenizer", None) or args.model,
            getattr(engine, "processor", None) or args.model,
            gconfig=gconfig,
            frames=frame_sampling(args),
            max_prompt_tokens=None if context is None else max(1, context - args.max_new_tokens),
        )
    except ValueError as e:  # a frame or pixel budget the processor refuses
        engine.destroy()
        raise ConfigError(str(e)) from None
    return predictor, engine.destroy


async def _evaluate(p: Plan, predictor: Predictor) -> EvalResult:
    args = p.args
    try:
        return await aevaluate_items(
            p.task,
            predictor,
            p.items,
            Path(args.output),
            k=args.k,
            concurrency=args.concurrency,
            progress=not args.no_progress,
            family=p.family,
            seed=args.seed,
            bootstrap=args.bootstrap,
        )
    finally:
        close = getattr(predictor, "aclose", None)
        if close is not None:
            await close()


class _NothingToRun:
    """The predictor when every prediction is already on disk (a rerun to rescore or compare):
    no model is loaded."""

    async def predict(self, item: dict[str, Any], k: int) -> Any:
        raise RuntimeError(f"item {item.get('id')}: nothing should run, its prediction is on disk")


def run_plan(p: Plan) -> EvalResult:
    """Build the model source (unless every prediction is on disk), run and score every item."""
    if pending_items(p.task, p.items, Path(p.args.output)):
        predictor, release = build_predictor(p.args)
    else:
        predictor, release = _NothingToRun(), lambda: None
    try:
        return asyncio.run(until_signalled(_evaluate(p, predictor)))
    finally:
        release()


def main(argv: Sequence[str] | None = None) -> int:
    """``vlrollout eval ARGS``; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    p = plan(args)
    result = run_plan(p)
    output = Path(args.output)
    results = write_results(output, result, model=args.model, data=args.data, settings=p.settings)
    write_report(output, result, p.items, correct_key=p.task.correct_key, title=str(args.model))
    print(format_table(results))
    if result.redone:
        print(
            f"redone: {len(result.redone)} item(s) whose prompt or image changed since their "
            "saved predictions were made ran again"
        )
    print(f"results: {output / 'results.json'}  report: {output / 'report.html'}")
    if not result.scores:
        records = [
            {"item": f"item {r['id']}", "reason": r["reason"], "detail": r["detail"]}
            for r in result.rejections
        ]
        raise NothingAccepted(
            "the evaluation", len(p.items), records, hint=f"every rejection: {output}/results.json"
        )
    if p.baseline is not None:
        for note in differing_inputs(results, p.baseline):
            print(f"note: the baseline differs in {note}", file=sys.stderr)
        drops = compare(results, p.baseline, args.threshold)
        for line in drops:
            print(f"regression: {line}", file=sys.stderr)
        if drops:
            return 1
        print(f"no metric dropped by more than {args.threshold} against {args.compare}")
    return 0
