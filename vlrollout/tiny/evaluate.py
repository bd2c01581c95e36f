"""Batching, greedy evaluation and eval-only metrics for the tiny model's synthetic tasks.

Metrics, each against a baseline that needs no image understanding:

* ``count``: accuracy, the mean of the count task's RL reward
  (:func:`vlrollout.tiny.rewards.count_reward`: the last count in the answer, number words
  included); chance is 1/4 (answers 1–4, uniform).
* ``ground``: mean IoU in original pixels of the first ``(x1,y1),(x2,y2)`` box (0–1000 frame);
  baseline: the box of the training boxes' mean normalised size centred in the image.
* ``caption``: CIDEr-D (0–10) against the item's references with ``vlrollout.rewards.caption.CiderD``,
  document frequencies from the evaluated items' references (the usual evaluation "corpus mode",
  as ``pycocoevalcap``); baseline: the most frequent training caption for every image.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from vlrollout.rewards.caption import CiderD
from vlrollout.tiny.rewards import count_reward
from vlrollout.tiny.synthetic import generate_items, parse_qwen2vl_box

IGNORE_INDEX = -100


def prompt_texts(processor, items: Sequence[dict[str, Any]]) -> list[str]:
    """Chat-template each item's messages with the generation prompt (no tokenisation)."""
    return [
        processor.apply_chat_template(it["messages"], add_generation_prompt=True, tokenize=False)
        for it in items
    ]


def encode_batch(processor, items: Sequence[dict[str, Any]], with_solution: bool) -> dict:
    """Processor inputs for ``items``, left-padded; with ``with_solution`` also ``labels``.

    ``labels`` ([B, L], int64) are ``IGNORE_INDEX`` except on each item's ``solution`` tokens and
    the closing ``<|im_end|>``, which sit at the end of every row because padding is on the left.
    """
    tok = processor.tokenizer
    texts = prompt_texts(processor, items)
    images = [im for it in items for im in it["images"]]
    if with_solution:
        texts = [t + it["solution"] + tok.eos_token for t, it in zip(texts, items, strict=True)]
    batch = processor(
        text=texts, images=images, return_tensors="pt", padding=True, padding_side="left"
    )
    if not with_solution:
        return batch
    input_ids = batch["input_ids"]
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for row, it in enumerate(items):
        target = tok(it["solution"] + tok.eos_token, add_special_tokens=False)["input_ids"]
        tail = input_ids[row, -len(target) :].tolist()
        if tail != target:
            raise ValueError(
                f"item {it['id']}: solution tokens {target} do not match the sequence tail {tail}; "
                "the chat template or tokenizer merges across the prompt/answer boundary"
            )
        labels[row, -len(target) :] = input_ids[row, -len(target) :]
    batch["labels"] = labels
    return batch


@torch.no_grad()
def greedy_completions(
    model,
    processor,
    items: Sequence[dict[str, Any]],
    batch_size: int = 64,
    max_new_tokens: int = 24,
) -> list[str]:
    """Greedy completions, decoded with special tokens kept (box tokens are special) and cut at
    ``<|im_end|>``."""
    tok = processor.tokenizer
    model.eval()
    out: list[str] = []
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        batch = encode_batch(processor, chunk, with_solution=False)
        gen = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id
        )
        for row in gen[:, batch["input_ids"].shape[1] :]:
            text = tok.decode(row, skip_special_tokens=False)
            out.append(text.split(tok.eos_token)[0].replace(tok.pad_token, ""))
    return out


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two ``[x1, y1, x2, y2]`` boxes: the rewards package's :func:`iou`, so evaluation and
    RL rewards score boxes identically.

    >>> box_iou([0, 0, 2, 2], [1, 0, 3, 2])
    0.3333333333333333
    """
    from vlrollout.rewards.box_scores import iou

    return float(iou(tuple(a), tuple(b)))


def baselines_from_training(train_seed: int, n: int = 3000) -> dict[str, Any]:
    """Image-blind baselines fitted on ``n`` training items: mean box size, most frequent caption."""
    ground = generate_items("ground", n, train_seed)
    wn = sum((it["boxes"][0][2] - it["boxes"][0][0]) / it["image_size"][0] for it in ground) / n
    hn = sum((it["boxes"][0][3] - it["boxes"][0][1]) / it["image_size"][1] for it in ground) / n
    caps = Counter(it["solution"] for it in generate_items("caption", n, train_seed))
    return {"box_wh_norm": [wn, hn], "constant_caption": caps.most_common(1)[0][0]}


def evaluate(model, processor, items: Sequence[dict[str, Any]], baselines: dict[str, Any]) -> dict:
    """Greedy-decode ``items`` and score each task against its baseline."""
    return score_completions(items, greedy_completions(model, processor, items), baselines)


def score_completions(
    items: Sequence[dict[str, Any]], completions: Sequence[str], baselines: dict[str, Any]
) -> dict:
    """The metrics of :func:`evaluate` for given ``completions`` (one per item, in order)."""
    res: dict[str, Any] = {}
    by_task: dict[str, list[tuple[dict, str]]] = {}
    for it, c in zip(items, completions, strict=True):
        by_task.setdefault(it["task"], []).append((it, c))
    if "count" in by_task:
        pairs = by_task["count"]
        reward = count_reward()
        acc = sum(reward("", c, [], [], answer=it["answer"]) for it, c in pairs) / len(pairs)
        res["count"] = {"n": len(pairs), "accuracy": acc, "chance": 0.25}
    if "ground" in by_task:
        pairs = by_task["ground"]
        ious, base, unparsed = [], [], 0
        wn, hn = baselines["box_wh_norm"]
        for it, c in pairs:
            w, h = it["image_size"]
            gt = it["boxes"][0]
            pred = parse_qwen2vl_box(c, w, h)
            unparsed += pred is None
            ious.append(box_iou(pred, gt) if pred is not None else 0.0)
            centre = [w * (1 - wn) / 2, h * (1 - hn) / 2, w * (1 + wn) / 2, h * (1 + hn) / 2]
            base.append(box_iou(centre, gt))
        res["ground"] = {
            "n": len(pairs),
            "mean_iou": sum(ious) / len(ious),
            "iou_at_0.5": sum(i >= 0.5 for i in ious) / len(ious),
            "unparsable": unparsed,
            "centre_box_baseline_mean_iou": sum(base) / len(base),
        }
    if "caption" in by_task:
        pairs = by_task["caption"]
        refs = [it["captions"] for it, _ in pairs]
        cider = CiderD.from_references(refs)
        score = sum(cider.score(c, r) for (_, c), r in zip(pairs, refs, strict=True)) / len(pairs)
        const = sum(cider.score(baselines["constant_caption"], r) for r in refs) / len(pairs)
        exact = sum(c in it["captions"] for it, c in pairs) / len(pairs)
        res["caption"] = {
            "n": len(pairs),
            "cider_d": score,
            "exact_match": exact,
            "constant_caption_baseline_cider_d": const,
            "constant_caption": baselines["constant_caption"],
        }
    res["examples"] = [
        {"id": it["id"], "solution": it["solution"], "completion": c}
        for pairs in by_task.values()
        for it, c in pairs[:3]
    ]
    return res
