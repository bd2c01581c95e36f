"""What a re-encoded engine image costs a group on the SGLang/vLLM path, per lossless codec.

An image that cannot be passed through to the engine as its original bytes (a PIL input, an
EXIF-rotated or transparent one) is re-encoded losslessly from the trainer's RGB pixels
(``processors/image_loading.py``). A GRPO group sends one prompt ``--group`` times, so the encode is
paid once per group; AReaL's remote client then builds and serialises each request's body
(``req.copy()``, its backend's ``build_generation_request``, ``json.dumps``: the work
``bench/remote_client_stub.py`` runs), and the server decodes the image for each request.

Per image and codec, medians over repetitions, the codecs timed in turn:

- **encode**: ms, once per group; **body**: bytes of one request's JSON body;
- **client per request**: ms of AReaL's client work on one request (SGLang and vLLM backends);
- **server decode per request**: ms of what SGLang and vLLM do with the image (base64 decode,
  ``PIL.Image.open``, ``convert("RGB")``);
- **client, group**: encode + group × the slower backend's client work: what the rollout
  process spends on the group's images beyond preparing the prompt;
- **client + server, group**: that plus group × the server decode.

Codecs: Pillow's lossless WebP at its fastest effort (``method=0``: what vlrollout sends), PNG at
zlib level 1 and uncompressed BMP. Each codec's bytes are checked to decode to exactly the pixels
(a lossy or changing codec could not be sent). Images: photo-like subjects from
``bench/images.py`` at 336x252, 800x600 (the size of ``bench_workflow_overhead.py``'s PIL input)
and 1411x1411. ``torch`` is not used; one thread.

    .venv/bin/python bench/bench_engine_image_codecs.py           # ~1 minute
    .venv/bin/python bench/bench_engine_image_codecs.py --quick

The headline is, per image, the codec with the least client time for the group and WebP's time
over it.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from areal.api import ModelRequest
from areal.api.cli_args import GenerationHyperparameters
from areal.engine.sglang_remote import SGLangBackend
from areal.engine.vllm_remote import VLLMBackend
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from images import subject_photo  # noqa: E402

from vlrollout.argtypes import whole_number  # noqa: E402
from vlrollout.processors.image_loading import PNG_COMPRESS_LEVEL, load_image  # noqa: E402

SIZES = (("texture", 336, 252), ("landscape", 800, 600), ("city", 1411, 1411))
BACKENDS = {"sglang": SGLangBackend(), "vllm": VLLMBackend()}
PROMPT_TOKENS = 300
"""Token ids in each request body (a short question around one image's placeholders)."""


@dataclass(frozen=True)
class Codec:
    """A lossless encoding of an RGB image that PIL (so SGLang and vLLM) decodes."""

    name: str
    encode: Callable[[Image.Image], bytes]


def _save(fmt: str, **params) -> Callable[[Image.Image], bytes]:
    def encode(image: Image.Image) -> bytes:
        buf = io.BytesIO()
        image.save(buf, format=fmt, **params)
        return buf.getvalue()

    return encode


CODECS = (
    Codec("WebP lossless, method 0 (ours)", lambda im: load_image(im, "bench").engine_bytes()),
    Codec(f"PNG, zlib level {PNG_COMPRESS_LEVEL}", _save("PNG", compress_level=PNG_COMPRESS_LEVEL)),
    Codec("BMP (uncompressed)", _save("BMP")),
)


def server_decode(b64: str) -> Image.Image:
    """What SGLang's and vLLM's image loaders do with an inline image."""
    return Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")


def request(b64: str) -> ModelRequest:
    """One group member's request: the prompt's token ids, the image for SGLang and the chat
    message for vLLM (whose client writes the image into it as a data URL)."""
    message = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": ""}}, {"type": "text"}],
        }
    ]
    return ModelRequest(
        input_ids=list(range(PROMPT_TOKENS)),
        image_data=[b64],
        vision_msg_vllm=[message],
        gconfig=GenerationHyperparameters(max_new_tokens=8),
    )


def client_work(backend, req: ModelRequest) -> tuple[float, int]:
    """Seconds of AReaL's client work on one request, and the body's bytes."""
    t0 = time.perf_counter()
    body = json.dumps(
        backend.build_generation_request(req.copy(), with_lora=False, version=0).payload
    )
    return time.perf_counter() - t0, len(body)


def measure(image: Image.Image, codec: Codec, reps: int) -> dict[str, float]:
    """Medians (ms) over ``reps`` of each part, and the body size."""
    data = codec.encode(image)
    b64 = base64.b64encode(data).decode("ascii")
    if not np.array_equal(np.asarray(server_decode(b64)), np.asarray(image)):
        raise RuntimeError(f"{codec.name} does not decode to the image's pixels")
    times: dict[str, list[float]] = {"encode": [], "decode": [], "sglang": [], "vllm": []}
    body = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        codec.encode(image)
        times["encode"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        server_decode(b64)
        times["decode"].append(time.perf_counter() - t0)
        for name, backend in BACKENDS.items():
            seconds, body = client_work(backend, request(b64))
            times[name].append(seconds)
    out = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {**out, "body_bytes": body}


def group_costs(m: dict[str, float], group: int) -> tuple[float, float]:
    """(client ms, client + server ms) for a group of ``group`` requests of one prompt.

    >>> group_costs({"encode": 10.0, "sglang": 1.0, "vllm": 2.0, "decode": 3.0}, 8)
    (26.0, 50.0)
    """
    client = m["encode"] + group * max(m["sglang"], m["vllm"])
    return client, client + group * m["decode"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--group", type=whole_number(1), default=8, help="requests per prompt")
    record.add_record_dir(parser)
    args = parser.parse_args(argv)
    started = record.Run("engine_image_codecs", argv)
    reps = 5 if args.quick else 21
    rows, numbers, best_lines = [], {}, []
    for subject, w, h in SIZES:
        image = subject_photo(subject, w, h)
        results = {codec.name: measure(image, codec, reps) for codec in CODECS}
        for name, m in results.items():
            client, total = group_costs(m, args.group)
            numbers[f"{w}x{h} {name}"] = {**m, "client_group": client, "total_group": total}
            rows.append(
                [
                    f"{w}x{h}",
                    name,
                    f"{m['encode']:.1f}",
                    f"{m['body_bytes'] / 1e3:.0f}",
                    f"{m['sglang']:.2f} / {m['vllm']:.2f}",
                    f"{m['decode']:.1f}",
                    f"{client:.1f}",
                    f"{total:.1f}",
                ]
            )
        clients = {n: group_costs(m, args.group)[0] for n, m in results.items()}
        best = min(clients, key=clients.__getitem__)
        ours = clients[CODECS[0].name]
        best_lines.append(f"{w}x{h} {best} (WebP {ours / clients[best]:.2f}x it)")
    table = record.Table(
        [
            "image",
            "codec",
            "encode ms",
            "body KB",
            "client ms per request (sglang / vllm)",
            "server decode ms per request",
            f"client ms, group of {args.group}",
            f"client + server ms, group of {args.group}",
        ],
        rows,
        title=f"one re-encoded image sent to a group of {args.group}; medians over {reps}",
    )
    print(table.text())
    headline = "least client time for the group: " + "; ".join(best_lines)
    print(headline)
    mode = "quick" if args.quick else "default"
    if args.group != 8:
        mode = "changed: " + " ".join(argv or [])
    record.write(started.record([table], headline, numbers, mode=mode), args.record_dir)
    return 0


if __name__ == "__main__":
    from entry import run

    run(lambda: main(sys.argv[1:]))
