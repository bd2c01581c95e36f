"""``vlrollout serve``: load a model into the embedded engine and serve it over HTTP."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

PROTOCOLS = ("sglang", "vllm")
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local model folder (weights + processor)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="sglang", help="HTTP protocol to speak")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument(
        "--device", default="cpu", help="cpu | cuda | cuda:N (ignored with --device-map)"
    )
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    p.add_argument("--max-batch-size", type=int, default=8, help="sequences decoded together")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="completions depend only on request and seed, not on load (one sequence at a time)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="compile the decode step with torch.compile (~30 s more at start-up)",
    )
    p.add_argument("--device-map", help="accelerate device map, e.g. auto (spreads the model)")
    p.add_argument(
        "--max-memory",
        action="append",
        metavar="DEVICE=SIZE",
        help="memory budget per device for --device-map, e.g. 0=20GiB cpu=64GiB (repeat)",
    )
    p.add_argument("--offload-folder", help="folder for layers offloaded to disk")
    p.add_argument(
        "--max-body-mb",
        type=float,
        default=DEFAULT_MAX_BODY_BYTES / 2**20,
        help="largest request body; larger ones get 413",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads")


def parse_max_memory(items: list[str] | None) -> dict[int | str, str] | None:
    """``["0=20GiB", "cpu=64GiB"]`` → ``{0: "20GiB", "cpu": "64GiB"}``.

    >>> parse_max_memory(["0=20GiB", "cpu=1GB"])
    {0: '20GiB', 'cpu': '1GB'}
    """
    if not items:
        return None
    out: dict[int | str, str] = {}
    for item in items:
        for part in item.replace(",", " ").split():
            key, sep, size = part.partition("=")
            if not sep or not size:
                raise ValueError(f"--max-memory expects DEVICE=SIZE, got {part!r}")
            out[int(key) if key.isdigit() else key] = size
    return out


def serve(args: argparse.Namespace) -> int:
    """Load ``args.model`` and serve until interrupted."""
    from aiohttp import web

    from vlrollout.engine import LocalInferenceEngine
    from vlrollout.logs import get_logger, log_to_stderr
    from vlrollout.serve.app import build_app

    log_to_stderr(logging.INFO)  # each refused request is logged with its reason
    if not Path(args.model, "config.json").is_file():
        print(f"vlrollout serve: --model {args.model!r} is not a model folder (no config.json)")
        return 2
    try:
        max_memory = parse_max_memory(args.max_memory)
    except ValueError as e:
        print(f"vlrollout serve: {e}")
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    engine = LocalInferenceEngine.from_pretrained(
        args.model,
        device=args.device,
        dtype=args.dtype,
        max_batch_size=args.max_batch_size,
        seed=args.seed,
        deterministic=args.deterministic,
        compile_decode=args.compile,
        device_map=args.device_map or None,  # from_pretrained ignores the rest without it
        max_memory=max_memory,
        offload_folder=args.offload_folder,
    ).initialize()
    app = build_app(
        engine,
        args.protocol,
        max_body_bytes=int(args.max_body_mb * 2**20),
        destroy_engine=True,
    )
    print(
        f"vlrollout serve: {args.protocol} protocol on http://{args.host}:{args.port}", flush=True
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        handler_cancellation=True,
        print=None,
        access_log=get_logger("vlrollout.serve.access"),  # one line per request, on stderr
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vlrollout serve", description=__doc__)
    add_arguments(parser)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
