"""Print, per model family, what the local engine gives on tiny random models of each family.

Columns, for images: episodes accepted (single-turn on every probe item, multi-attempt with 3
turns on the two-image item), the largest |rollout − teacher-forced| logprob over every generated
token (:func:`vlrollout.checks.logprob_consistency`, float32), and how many greedy completions
equal ``model.generate``'s on the same prepared inputs. For video, the same three on the video
probes (:data:`vlrollout.testing.family_items.VIDEO_ITEMS`: a clip alone, an image then a clip)
through the preprocessor's video path, for the families it reads videos for ("—" for the
others). "trains" is :func:`vlrollout.train.support.trains`: ``yes``, or why
``vlrollout train`` refuses the family at start-up. It also writes the table as a record,
``bench/results/families.json`` (``bench/record.py``), which ``make readme-numbers`` renders into
``docs/families.md`` (and its headline into the README). Usage::

    .venv/bin/python scripts/family_table.py [--seeds 2] [--families glm4v internvl]
        [--record-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from areal.api.cli_args import GenerationHyperparameters

from vlrollout.checks import logprob_consistency
from vlrollout.engine.local import LocalInferenceEngine
from vlrollout.processors import AutoProcessorPreprocessor
from vlrollout.testing.family_items import ITEMS, VIDEO_ITEMS, generate_greedy
from vlrollout.testing.tiny_families import TINY_FAMILIES, tiny_vlm
from vlrollout.train.support import trains
from vlrollout.workflows import VisionMultiAttemptWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.steps import build_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import record  # noqa: E402

REWARD = "format_think_answer"  # random text scores 0: multi-attempt runs all its turns
TEMPERATURE = 0.7
NEW_TOKENS = 8
COLUMNS = [
    "family",
    "images: episodes accepted",
    "images: max rollout vs teacher-forced logprob",
    "images: greedy = generate",
    "video: episodes accepted",
    "video: max logprob difference",
    "video: greedy = generate",
    "trains",
]


@dataclass
class Check:
    """Counts for one family and one kind of media, summed over seeds."""

    accepted: int = 0
    episodes: int = 0
    gap: float = float("nan")
    equal: int = 0
    tried: int = 0

    def add(self, other: Check) -> None:
        self.accepted += other.accepted
        self.episodes += other.episodes
        self.gap = other.gap if math.isnan(self.gap) else max(self.gap, other.gap)
        self.equal += other.equal
        self.tried += other.tried

    def cells(self) -> list[str]:
        return [f"{self.accepted}/{self.episodes}", f"{self.gap:.1e}", f"{self.equal}/{self.tried}"]


def _items(probes: dict[str, dict]) -> list[dict]:
    return [{"id": name, "answer": "never-matches", **item} for name, item in probes.items()]


def _gconfig() -> GenerationHyperparameters:
    return GenerationHyperparameters(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, temperature=TEMPERATURE
    )


def _greedy_equal(model, processor, engine, item) -> bool:
    wf = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    prepared = asyncio.run(wf.ctx.prepare(item))
    greedy = GenerationHyperparameters(max_new_tokens=NEW_TOKENS, greedy=True)
    resp = asyncio.run(
        engine.agenerate(build_request(prepared, greedy, processor.tokenizer, processor))
    )
    expected = generate_greedy(model, engine, prepared, NEW_TOKENS)
    return resp.output_tokens == expected[: len(resp.output_tokens)]


def _episode(wf, engine, item: dict, failures: list[str]) -> dict | None:
    """``wf``'s episode on ``item``; ``None`` (and the reason in ``failures``) when it raises."""
    try:
        return asyncio.run(wf.arun_episode(engine, item))
    except Exception as e:  # noqa: BLE001 -- the table reports every failure with its reason
        failures.append(f"{item['id']}: {type(e).__name__}: {str(e)[:200]}")
        return None


def _check(
    model, processor, engine, items: list[dict], multi_item: dict | None, failures: list[str]
) -> Check:
    """Single-turn episodes on ``items`` (and a 3-turn multi-attempt one on ``multi_item``), the
    largest logprob gap over the accepted ones, greedy = ``generate`` on each of ``items``."""
    single = VisionRLVRWorkflow(REWARD, _gconfig(), processor.tokenizer, processor)
    runs = [(single, item) for item in items]
    if multi_item is not None:
        multi = VisionMultiAttemptWorkflow(
            REWARD, _gconfig(), processor.tokenizer, processor, max_turns=3, turn_discount=0.9
        )
        runs.append((multi, multi_item))
    trajs = [_episode(wf, engine, item, failures) for wf, item in runs]
    accepted = [t for t in trajs if t is not None]
    for wf in {id(wf): wf for wf, _ in runs}.values():
        failures += [
            f"{r.item}: rejected: {r.reason}: {r.detail[:200]}" for r in wf.ctx.ledger.records
        ]
    gap = max(
        (logprob_consistency(model, t, temperature=TEMPERATURE).max_abs_diff for t in accepted),
        default=float("nan"),
    )
    greedy = []
    for item in items:
        try:
            greedy.append(_greedy_equal(model, processor, engine, item))
        except Exception as e:  # noqa: BLE001 -- counted as unequal, the reason reported
            failures.append(f"{item['id']} greedy: {type(e).__name__}: {str(e)[:200]}")
            greedy.append(False)
    return Check(len(accepted), len(runs), gap, sum(greedy), len(greedy))


def takes_video(processor) -> bool:
    """Whether the family takes video: the preprocessor reads a ``videos`` field for it (its
    transformers processor has a video processor whose output the model takes)."""
    return AutoProcessorPreprocessor(processor).has_video


def family_row(family: str, seed: int, failures: list[str]) -> tuple[Check, Check | None]:
    """The image check and (for a family that takes video) the video check of one seed; why
    episodes failed goes to ``failures``."""
    model, processor = tiny_vlm(family, seed=seed)
    engine = LocalInferenceEngine(model, processor, seed=seed).initialize()
    try:
        items = _items(ITEMS)
        images = _check(model, processor, engine, items, items[1], failures)
        video = None
        if takes_video(processor):
            videos = _items(VIDEO_ITEMS)
            video = _check(model, processor, engine, videos, videos[0], failures)
        return images, video
    finally:
        engine.destroy()


def _failure_table(failures: list[str]) -> record.Table:
    """Why episodes failed, one row per distinct reason (request ids dropped), with a count."""
    counts: dict[tuple[str, str], int] = {}
    for line in failures:
        family, rest = line.split(" (seed ", 1)
        reason = re.sub(r"request [0-9a-f]{32}: ", "", rest.split(") ", 1)[1])
        counts[(family, reason)] = counts.get((family, reason), 0) + 1
    rows = [[family, reason, str(n)] for (family, reason), n in counts.items()]
    return record.Table(["family", "failed (item: reason)", "times"], rows, title="failures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="random models per family")
    parser.add_argument("--families", nargs="+", choices=TINY_FAMILIES, default=list(TINY_FAMILIES))
    record.add_record_dir(parser)
    args = parser.parse_args()
    started = record.Run("families")
    torch.set_num_threads(1)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    table: list[list[str]] = []
    worst, failures = 0.0, []
    for family in args.families:
        images, video = Check(), None
        for seed in range(args.seeds):
            failed: list[str] = []
            image_check, video_check = family_row(family, seed, failed)
            failures += [f"{family} (seed {seed}) {line}" for line in failed]
            images.add(image_check)
            if video_check is not None:
                video = video or Check()
                video.add(video_check)
        video_cells = video.cells() if video is not None else ["—"] * 3
        table.append([family, *images.cells(), *video_cells, trains(family)])
        worst = max(worst, images.gap, video.gap if video is not None else 0.0)
        print("| " + " | ".join(table[-1]) + " |", flush=True)
    headline = (
        f"largest rollout vs teacher-forced logprob difference over every family: {worst:.1e}"
    )
    print(headline)
    for line in failures:
        print(f"failed: {line}")
    tables = [record.Table(COLUMNS, table)]
    if failures:
        tables.append(_failure_table(failures))
    rec = started.record(tables, headline, {"seeds": args.seeds})
    record.write(rec, args.record_dir)


if __name__ == "__main__":
    main()
