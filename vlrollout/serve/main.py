"""``vlrollout serve``: load a model into the embedded engine and serve it over HTTP."""

from __future__ import annotations

import argparse
import errno
import logging
import math
from pathlib import Path

from vlrollout.engine.checks import check_device
from vlrollout.errors import UsageError
from vlrollout.processors.decode_room import RESIDENT_PER_PIXEL, machine_memory_bytes
from vlrollout.processors.image_loading import DEFAULT_MAX_PIXELS
from vlrollout.processors.video_limits import DEFAULT_MAX_FRAME_PIXELS
from vlrollout.serve.admission import QueueLimits
from vlrollout.serve.auth import API_KEY_ENV, api_key, exposure_warning
from vlrollout.serve.limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUED_REQUESTS,
    PROTOCOLS,
    QUEUE_MEMORY_SHARE,
    RESIDENT_PER_QUEUED_BYTE,
)

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""What ``--dtype`` takes: ``auto`` loads the checkpoint's own dtype."""


def default_max_queued_mb() -> int:
    """:data:`QUEUE_MEMORY_SHARE` of the machine's memory divided by
    :data:`RESIDENT_PER_QUEUED_BYTE`, in MiB, and never below the default body limit (a bound
    smaller than one body would refuse that body forever)."""
    share = machine_memory_bytes() * QUEUE_MEMORY_SHARE / RESIDENT_PER_QUEUED_BYTE
    return max(int(share // 2**20), DEFAULT_MAX_BODY_BYTES // 2**20)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local model folder (weights + processor)")
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="sglang",
        help="HTTP protocol to speak (default: %(default)s)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    p.add_argument("--port", type=int, default=30000, help="port (default: %(default)s)")
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu | cuda | cuda:N (ignored with --device-map; default: %(default)s)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="weights' dtype (default: %(default)s, the checkpoint's)",
    )
    p.add_argument("--max-batch-size", type=int, default=8, help="sequences decoded together")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="completions depend only on the request, the seed and how many times the request "
        "came before, not on load (one sequence at a time)",
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
    add_access_arguments(p)
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument(
        "--min-pixels",
        type=int,
        help="each image's smallest pixel budget, as vlrollout run's --min-pixels (clients must "
        "build input_ids with the same; default: the model's processor settings)",
    )
    p.add_argument(
        "--max-pixels", type=int, help="each image's largest pixel budget (as --min-pixels)"
    )
    p.add_argument(
        "--max-image-pixels",
        type=int,
        help=f"largest image decoded, width x height (default {DEFAULT_MAX_PIXELS}): a guard "
        "against decompression bombs, apart from the pixel budget",
    )
    p.add_argument(
        "--max-video-frame-pixels",
        type=int,
        help=f"largest video frame decoded, width x height (default {DEFAULT_MAX_FRAME_PIXELS}): "
        "a guard against decompression bombs, apart from --video-max-pixels",
    )
    p.add_argument("--video-fps", type=float, help="frames sampled per second of a video")
    p.add_argument("--video-max-frames", type=int, help="most frames sampled from one video")
    p.add_argument("--video-min-pixels", type=int, help="smallest pixel budget of a video frame")
    p.add_argument("--video-max-pixels", type=int, help="largest pixel budget of a video frame")


def add_access_arguments(p: argparse.ArgumentParser) -> None:
    """Who may call the server and how much it queues."""
    p.add_argument(
        "--api-key",
        help=f"require 'Authorization: Bearer KEY' on every route (prefer ${API_KEY_ENV}: "
        "arguments show in process listings)",
    )
    p.add_argument(
        "--no-control",
        dest="control",
        action="store_false",
        help="serve generation only: no pause, continue or weight-update routes",
    )
    p.add_argument(
        "--weights-root",
        help="weight updates load only from folders under this one, which may not exist yet "
        "(default: the parent of --model)",
    )
    p.add_argument(
        "--max-queued-requests",
        type=int,
        default=DEFAULT_MAX_QUEUED_REQUESTS,
        help="generation requests held at once; more get 503 with Retry-After (0: no bound)",
    )
    mb = default_max_queued_mb()
    p.add_argument(
        "--max-queued-mb",
        type=float,
        default=mb,
        help=f"request-body MiB held at once; more get 503 (0: no bound). Default {mb}: "
        f"1/{round(1 / QUEUE_MEMORY_SHARE)} of this machine's memory over "
        f"{RESIDENT_PER_QUEUED_BYTE}, the resident bytes a queued image request may cost per "
        "body byte. The image pixels decoded at once are held to the same share of memory, at "
        f"{RESIDENT_PER_PIXEL} bytes per pixel",
    )


def queue_limits(args: argparse.Namespace) -> QueueLimits:
    """``--max-queued-requests`` / ``--max-queued-mb`` as :class:`QueueLimits` (0: no bound)."""
    requests, mb = args.max_queued_requests, args.max_queued_mb
    return QueueLimits(max_requests=requests or None, max_bytes=int(mb * 2**20) if mb else None)


def parse_max_memory(items: list[str] | None) -> dict[int | str, str] | None:
    """``["0=20GiB", "cpu=64GiB"]`` → ``{0: "20GiB", "cpu": "64GiB"}``.

    >>> parse_max_memory(["0=20GiB", "cpu=1GB"])
    {0: '20GiB', 'cpu': '1GB'}
    """
    from accelerate.utils import convert_file_size_to_int

    if not items:
        return None
    out: dict[int | str, str] = {}
    for item in items:
        for part in item.replace(",", " ").split():
            key, sep, size = part.partition("=")
            if not sep or not size:
                raise UsageError(f"--max-memory expects DEVICE=SIZE, got {part!r}")
            try:  # accelerate's own size parser: what from_pretrained will do with it
                n_bytes = convert_file_size_to_int(int(size) if size.isdigit() else size)
            except ValueError as e:
                raise UsageError(f"--max-memory {part}: {e}") from None
            if n_bytes <= 0:
                raise UsageError(f"--max-memory {part}: the size must be positive")
            out[int(key) if key.isdigit() else key] = size
    return out


def check_flags(args: argparse.Namespace) -> dict[int | str, str] | None:
    """Refuse impossible flags before the model loads (seconds to minutes); returns the parsed
    ``--max-memory``. Raises ``UsageError`` naming the flag."""

    if not Path(args.model, "config.json").is_file():
        raise UsageError(f"--model {args.model!r} is not a model folder (no config.json)")
    if not args.device_map:  # with a device map, --device is ignored
        check_device(args.device)
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be in 1..65535, got {args.port}")
    for flag, value in (("--threads", args.threads), ("--max-batch-size", args.max_batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if not args.max_body_mb > 0:
        raise UsageError(f"--max-body-mb must be > 0, got {args.max_body_mb:g}")
    check_queue_flags(args)
    check_processor_settings(args)
    max_memory = parse_max_memory(args.max_memory)
    if (max_memory or args.offload_folder) and not args.device_map:
        raise UsageError(
            "--max-memory and --offload-folder need --device-map (e.g. --device-map auto): "
            "without one the model loads whole onto --device"
        )
    check_can_listen(args.host, args.port)
    return max_memory


def check_queue_flags(args: argparse.Namespace) -> None:
    """The queue's bounds are whole requests and MiB >= 0, and the byte bound holds one body."""
    if args.max_queued_requests < 0:
        raise UsageError(f"--max-queued-requests must be >= 0, got {args.max_queued_requests}")
    if not (math.isfinite(args.max_queued_mb) and args.max_queued_mb >= 0):
        raise UsageError(f"--max-queued-mb must be >= 0, got {args.max_queued_mb:g}")
    if 0 < args.max_queued_mb < args.max_body_mb:
        raise UsageError(
            f"--max-queued-mb {args.max_queued_mb:g} is below --max-body-mb "
            f"{args.max_body_mb:g}: a body that large would be refused forever"
        )


def frame_settings(args: argparse.Namespace) -> dict[str, float | int | None]:
    """The ``--video-*`` flags as :class:`~vlrollout.workflows.FrameSampling`'s arguments: how
    the served preprocessor samples a request's videos (the model family's defaults for those
    not given). Raises ``UsageError`` naming the flag."""
    names = ("fps", "max_frames", "min_pixels", "max_pixels")
    values = {n: getattr(args, f"video_{n}", None) for n in names}
    for name, value in values.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            flag = "--video-" + name.replace("_", "-")
            raise UsageError(f"{flag} must be a positive number, got {value}")
    return values


def check_processor_settings(args: argparse.Namespace) -> None:
    """The image budget and video flags, checked against the model's processor before the model
    loads (a fixed-size family takes no pixel budget). Raises ``UsageError`` naming the flags."""
    from vlrollout.workflows import FrameSampling
    from vlrollout.workflows.preparation import vision_settings_problem

    budget = (("--min-pixels", args.min_pixels), ("--max-pixels", args.max_pixels))
    limits = (
        ("--max-image-pixels", args.max_image_pixels),
        ("--max-video-frame-pixels", args.max_video_frame_pixels),
    )
    for flag, value in (*budget, *limits):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    frames = FrameSampling(**frame_settings(args))
    if args.min_pixels is None and args.max_pixels is None and not frames.options():
        return
    problem = vision_settings_problem(
        args.model, None, args.min_pixels, args.max_pixels, frames, "--min-pixels/--max-pixels"
    )
    if problem:
        raise UsageError(problem)


def check_can_listen(host: str, port: int) -> None:
    """Bind ``host:port`` once (as aiohttp will, with address reuse) so an unknown host or a port
    in use is said before the model loads, not after."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:  # gaierror included
        reason = "the port is in use" if getattr(e, "errno", None) == errno.EADDRINUSE else e
        raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None


def serve(args: argparse.Namespace) -> int:
    """Load ``args.model`` and serve until interrupted."""
    from aiohttp import web

    from vlrollout.engine import LocalInferenceEngine
    from vlrollout.logs import get_logger, log_to_stderr
    from vlrollout.serve.app import build_app
    from vlrollout.workflows.preparation import FrameSampling

    log_to_stderr(logging.INFO)  # each refused request is logged with its reason
    max_memory = check_flags(args)
    key = api_key(args)
    weights_root = Path(args.weights_root or Path(args.model).resolve().parent)
    warning = exposure_warning(args.host, key, args.control, weights_root.resolve())
    if warning:
        get_logger(__name__).warning(warning)
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
        frames=FrameSampling(**frame_settings(args)),
        min_pixels=args.min_pixels,
        max_pixels=args.max_pixels,
        max_image_pixels=args.max_image_pixels,
        max_video_frame_pixels=args.max_video_frame_pixels,
        destroy_engine=True,
        api_key=key,
        control=args.control,
        weights_root=weights_root,
        limits=queue_limits(args),
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
