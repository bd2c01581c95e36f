"""Train a vision-language model with AReaL's GRPO (``PPOTrainer``) on vlrollout's vision workflow.

AReaL runs everything (inference servers, FSDP actor, weight updates, rollouts); vlrollout supplies
the workflow, named by import path, and the data items. Run from the repository root so that
AReaL's workers can import ``examples.areal_grpo`` (needs GPUs; see README.md here)::

    python3 -m examples.areal_grpo.train_vision_grpo --config examples/areal_grpo/vision_grpo.yaml

Overrides use AReaL's (Hydra) syntax: ``actor.path=/models/qwen2.5-vl-7b``; keys that are not in
the YAML need a ``+`` (``+vlrollout.max_prompt_tokens=4096``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from areal.api.cli_args import GenerationHyperparameters, load_expr_config

from examples.areal_grpo.config import VisionGRPOConfig
from vlrollout.datasets import DataFileError, load_items
from vlrollout.workflows.steps import resolve_callable

#: The workflow AReaL builds on each rollout worker, by import path.
WORKFLOW = "vlrollout.workflows.VisionRLVRWorkflow"


def load_dataset(path: str | Path) -> list[dict[str, Any]]:
    """Data items for ``PPOTrainer``: dicts with ``messages``, ``images`` and task fields.

    A list is a map-style dataset for AReaL's dataloader; its batches are lists of these dicts,
    and each dict reaches ``VisionRLVRWorkflow.arun_episode`` as ``data``. Images stay paths
    (made absolute against the data file) and are loaded on the rollout workers, so they must be
    readable there (a shared file system on several nodes).

    Args:
        path: A ``.jsonl`` or ``.parquet`` file in vlrollout's data-item format.

    Raises:
        DataFileError: The file is unreadable, or an item has no ``messages``.

    >>> load_dataset("missing.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vlrollout.datasets.DataFileError: data file ... does not exist
    """
    path = Path(path).resolve()
    items = load_items(path)
    if not items:
        raise DataFileError(f"{path} has no items")
    for item in items:
        if not isinstance(item.get("messages"), (list, str)):
            raise DataFileError(
                f"{path}: item {item['id']} has no 'messages' (a list of chat messages, or a "
                f"string with one <image> per entry of 'images')"
            )
    return items


def workflow_kwargs(
    config: VisionGRPOConfig, gconfig: GenerationHyperparameters, purpose: str = "train"
) -> dict[str, Any]:
    """Constructor arguments of ``VisionRLVRWorkflow``, all JSON-serialisable.

    AReaL builds the workflow on every rollout worker from these, so the tokenizer and processor
    are paths and the reward is an import path. ``gconfig.n_samples`` is the GRPO group size:
    AReaL runs the workflow that many times per item (the workflow asks for one sample each).
    ``share`` makes the workflows AReaL builds per item use one prompt cache, ledger and set of
    one-time checks per worker process (training and evaluation each their own).
    """
    vl = config.vlrollout
    return {
        "reward_fn": vl.reward,
        "gconfig": gconfig,
        "tokenizer": config.tokenizer_path,
        "processor": vl.processor_path or config.tokenizer_path,
        "preprocessor": vl.preprocessor,
        "enable_thinking": vl.enable_thinking,
        "min_pixels": vl.min_pixels,
        "max_pixels": vl.max_pixels,
        "reward_timeout_s": vl.reward_timeout_s,
        "max_prompt_tokens": vl.max_prompt_tokens,
        "share": f"{config.experiment_name}/{config.trial_name}/{purpose}",
    }


def train_kwargs(config: VisionGRPOConfig) -> dict[str, Any]:
    """Keyword arguments of ``PPOTrainer.train``: the workflow for training and for evaluation."""
    return {
        "workflow": WORKFLOW,
        "workflow_kwargs": workflow_kwargs(config, config.gconfig),
        "eval_workflow": WORKFLOW,
        "eval_workflow_kwargs": workflow_kwargs(config, config.eval_gconfig, "eval"),
    }


def main(argv: Sequence[str]) -> None:
    from areal import PPOTrainer

    config, _ = load_expr_config(list(argv), VisionGRPOConfig)
    # Fail here, not on the first rollout, when the reward path does not import.
    resolve_callable(config.vlrollout.reward, "reward function")
    train_dataset = load_dataset(config.train_dataset.path)
    valid_dataset = (
        load_dataset(config.valid_dataset.path) if config.valid_dataset is not None else None
    )
    with PPOTrainer(config, train_dataset=train_dataset, valid_dataset=valid_dataset) as trainer:
        trainer.train(**train_kwargs(config))


if __name__ == "__main__":
    main(sys.argv[1:])
