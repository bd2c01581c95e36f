"""The peer of ``bench_vs_trl.py``: TRL's ``GRPOTrainer`` on a ``vlrollout train`` recipe.

TRL (``pip install -e .[bench]``, trl 1.16) is an optional benchmark dependency: nothing here
imports it at module level, and :func:`run_trl` is the only function that needs it.

What the peer shares with ``vlrollout train``, taken from the recipe's loaded config:

- the model (``actor.path``), training items and held-out items (:func:`~vlrollout.train.data.
  load_data`), and the items of each step (:func:`trl_settings.step_order`: the loop's own
  :func:`~vlrollout.train.data.batch_items` fed to TRL through its train sampler);
- the reward object (:func:`~vlrollout.train.rewards.build_rewards`), called through the public
  TRL adapter (:class:`~vlrollout.rewards.for_trl.TRLReward`, in :class:`RewardAdapter`) with the
  geometry and decoded completion our workflow gives it, by a
  :class:`~vlrollout.rewards.caller.RewardCaller`;
- the hyper-parameters TRL has a key for (:func:`trl_settings.peer_settings`, which also lists
  what it cannot set);
- the evaluator: at every evaluation step the peer's weights are saved and evaluated by
  :func:`~vlrollout.train.evaluation.evaluate` on the engine and greedy workflow the loop builds
  (:class:`HeldOutEval`), its time left out of the peer's seconds per step.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl_settings import order_per_step, peer_settings, step_order

from vlrollout.rewards.for_trl import TRLReward


# ----------------------------------------------------------------------------- the reward
class RewardAdapter(TRLReward):
    """Our reward as a TRL reward function: the public :class:`~vlrollout.rewards.for_trl.
    TRLReward` over the training workflow's reward and preprocessor, with each item's task
    fields looked up by TRL's ``item_index`` column.

    Each completion is scored through the adapter's :class:`~vlrollout.rewards.caller.
    RewardCaller`, with the geometry of the row's images as our preprocessor prepares them and
    the completion decoded from TRL's ``completion_ids`` with trailing stop tokens dropped and
    special tokens kept, as our workflows decode it. A rejected episode scores ``None`` (TRL's
    "not applicable") and is counted in :attr:`rejected` by reason.

    Args:
        workflow: The training workflow (``VisionRLVRWorkflow(reward, gconfig, tokenizer,
            processor)``): its reward, timeout and preprocessor.
        items: The training items; TRL's ``item_index`` column indexes them.

    Attributes:
        calls: The item indices of each call, in order (one call per TRL step).
    """

    def __init__(self, workflow: Any, items: list[dict]) -> None:
        self.ctx = workflow.ctx
        reward = self.ctx.reward
        super().__init__(
            reward.reward_fn,
            self.ctx.preprocessor,
            name="vlrollout_reward",
            timeout_s=reward.timeout_s,
            max_workers=reward.max_workers,
        )
        self.items = items
        self.calls: list[list[int]] = []

    def prepared(self, index: int) -> Any:
        """Our preprocessor's :class:`~vlrollout.processors.base.PreparedPrompt` of an item."""
        return self.ctx.preprocessor.prepare(self.items[index])

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        item_index: list[int],
        **columns: Any,
    ) -> list[float | None]:
        if len(item_index) != len(completion_ids):
            raise ValueError(
                f"{len(item_index)} item indices for {len(completion_ids)} completions"
            )
        indices = [int(i) for i in item_index]
        self.calls.append(indices)
        fields = {k for i in indices for k in self.items[i]} - {"messages", "images", "videos"}
        task = {k: [self.items[i].get(k) for i in indices] for k in sorted(fields)}
        return super().__call__(prompts, completions, completion_ids, **{**columns, **task})


def trl_rows(items: list[dict]) -> dict[str, list]:
    """TRL's dataset columns for our items: a conversational ``prompt`` (the user text; TRL puts
    the images before it, as our items do), ``images`` and ``item_index``.

    Raises:
        ValueError: An item whose message is not one user turn of images then text, which this
            conversion would reorder.
    """
    prompts, images = [], []
    for item in items:
        messages = item["messages"]
        parts = messages[0]["content"] if len(messages) == 1 else None
        kinds = [p.get("type") for p in parts] if isinstance(parts, list) else None
        n_images = kinds.count("image") if kinds else 0
        if not kinds or kinds != ["image"] * n_images + ["text"] * (len(kinds) - n_images):
            raise ValueError(
                f"item {item.get('id')}: TRL's prompt puts images before the user text; this item's "
                f"message is {messages!r}"
            )
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        prompts.append([{"role": messages[0]["role"], "content": text}])
        images.append(list(item["images"]))
    return {"prompt": prompts, "images": images, "item_index": list(range(len(items)))}


# ----------------------------------------------------------------------------- evaluation
class OrderSampler:
    """A sampler that yields a fixed list of indices (TRL's train sampler, replaced)."""

    def __init__(self, order: list[int]) -> None:
        self.order = order

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


@dataclass
class PeerRun:
    """What the peer measured.

    Attributes:
        evals: Held-out ``eval/mean`` by step, our evaluator on the peer's saved weights.
        rewards: Sampled training reward (mean over the batch) by step.
        step_seconds: Seconds of each step, evaluation excluded.
        eval_seconds: Seconds of each evaluation (saving, engine start, episodes).
        phases: Mean seconds per step in ``generate``, ``reward``, ``score_rest`` (TRL's
            bookkeeping around them: padding, advantages) and ``update`` (loss, backward,
            optimizer, logging, data).
        order_checked: Every step's rewarded items were the loop's items of that step.
        alignment: Checks of the inputs TRL built against ours (name -> result line).
        rejected: Rejected episodes by reason.
    """

    evals: dict[int, float]
    rewards: dict[int, float]
    step_seconds: list[float]
    eval_seconds: list[float]
    phases: dict[str, float]
    order_checked: bool
    alignment: dict[str, str]
    rejected: dict[str, int]


class HeldOutEval:
    """A TRL callback: at step 0 and every ``every`` steps (and the last), save the weights and
    evaluate them with ``evaluate_path``; record each step's seconds without the evaluation."""

    def __init__(
        self, evaluate_path: Callable[[Path], float], every: int, total: int, folder: Path
    ):
        self.evaluate_path, self.every, self.total, self.folder = (
            evaluate_path,
            every,
            total,
            folder,
        )
        self.trainer: Any = None
        self.evals: dict[int, float] = {}
        self.step_seconds: list[float] = []
        self.eval_seconds: list[float] = []
        self._last = 0.0

    def _evaluate(self, step: int) -> None:
        t = time.perf_counter()
        path = self.folder / f"step_{step}"
        self.trainer.model.save_pretrained(path)
        self.trainer.processing_class.save_pretrained(path)
        self.evals[step] = self.evaluate_path(path)
        self.eval_seconds.append(time.perf_counter() - t)
        print(f"TRL held-out at step {step}: {self.evals[step]:.4f}", flush=True)

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._evaluate(0)
        self._last = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.step_seconds.append(time.perf_counter() - self._last)
        step = state.global_step
        if (self.every and step % self.every == 0) or step == self.total:
            self._evaluate(step)
        self._last = time.perf_counter()


def run_trl(cfg: Any, steps: int, folder: Path) -> PeerRun:
    """Train the recipe's model with TRL's ``GRPOTrainer`` for ``steps`` steps under ``folder``.

    Evaluates at step 0, every ``vlrollout.eval_every`` steps and at the end, as the loop does.
    """
    import torch
    from areal.api.cli_args import GenerationHyperparameters
    from datasets import Dataset
    from transformers import (
        AutoModelForImageTextToText,
        AutoProcessor,
        PrinterCallback,
        TrainerCallback,
    )
    from trl import GRPOConfig, GRPOTrainer

    from vlrollout.train.data import load_data
    from vlrollout.train.evaluation import evaluate
    from vlrollout.train.rewards import build_rewards
    from vlrollout.train.rollout_engine import build_rollout_engine
    from vlrollout.workflows import VisionRLVRWorkflow
    from vlrollout.workflows.preparation import load_processor

    torch.manual_seed(cfg.seed)
    vl = cfg.vlrollout
    train_items, eval_items = load_data(cfg)
    reward, eval_reward = build_rewards(vl.reward, vl.ground_metric, train_items, eval_items)
    ours_processor = load_processor(cfg.actor.path)
    tokenizer = ours_processor.tokenizer
    one = dataclasses.replace(cfg.gconfig, n_samples=1)
    adapter = RewardAdapter(VisionRLVRWorkflow(reward, one, tokenizer, ours_processor), train_items)
    greedy = GenerationHyperparameters(
        n_samples=1, greedy=True, max_new_tokens=cfg.gconfig.max_new_tokens
    )
    eval_workflow = VisionRLVRWorkflow(eval_reward, greedy, tokenizer, ours_processor)
    dtype = getattr(torch, cfg.actor.dtype)

    def evaluate_path(path: Path) -> float:
        engine, _ = build_rollout_engine(cfg, str(path), dtype)
        try:
            return float(evaluate(engine, eval_workflow, eval_items)["eval/mean"])
        finally:
            engine.destroy()

    settings = peer_settings(cfg, steps)
    model = AutoModelForImageTextToText.from_pretrained(cfg.actor.path, dtype=dtype)
    # Our engine stops on the tokenizer's stop and pad tokens (AReaL's
    # new_with_stop_and_pad_token_ids); TRL stops on the generation config's eos ids.
    model.generation_config.eos_token_id = list(
        one.new_with_stop_and_pad_token_ids(tokenizer).stop_token_ids
    )
    processor = AutoProcessor.from_pretrained(cfg.actor.path, local_files_only=True)
    dataset = Dataset.from_dict(trl_rows(train_items))
    order = step_order(
        len(train_items), steps, cfg.train_dataset.batch_size, cfg.seed, cfg.gconfig.n_samples
    )
    every = vl.eval_every
    callback = HeldOutEval(evaluate_path, every, steps, folder / "weights")
    phases: dict[str, list[float]] = collections.defaultdict(list)

    class Trainer(GRPOTrainer):
        def _get_train_sampler(self, dataset: Any = None) -> OrderSampler:
            return OrderSampler(order)

        def _generate(self, prompts: list) -> Any:
            t = time.perf_counter()
            out = super()._generate(prompts)
            phases["generate"].append(time.perf_counter() - t)
            return out

        def _calculate_rewards(self, *args: Any) -> Any:
            t = time.perf_counter()
            out = super()._calculate_rewards(*args)
            phases["reward"].append(time.perf_counter() - t)
            return out

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            phases["generate_and_score"].append(time.perf_counter() - t)
            return out

    class Callback(TrainerCallback):
        def on_train_begin(self, *a: Any, **k: Any) -> None:
            callback.on_train_begin(*a, **k)

        def on_step_end(self, *a: Any, **k: Any) -> None:
            callback.on_step_end(*a, **k)

    trainer = Trainer(
        model=model,
        reward_funcs=[adapter],
        args=GRPOConfig(output_dir=str(folder / "trl"), **settings.kwargs),
        train_dataset=dataset,
        processing_class=processor,
        callbacks=[Callback()],
    )
    callback.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # its per-step dicts; the benchmark prints its own
    alignment = check_inputs(trainer, dataset, adapter, order[:: cfg.gconfig.n_samples][:4])
    trainer.train()

    rewards: dict[int, float] = {}
    for row in trainer.state.log_history:
        if "reward" in row and "step" in row:
            rewards[int(row["step"])] = float(row["reward"])
    per_step = order_per_step(order, cfg.gconfig.n_samples * cfg.train_dataset.batch_size)
    order_checked = [sorted(c) for c in adapter.calls] == [sorted(s) for s in per_step]
    n = len(callback.step_seconds)
    gen = phases["generate"][:n]
    rew = phases["reward"][:n]
    gas = phases["generate_and_score"][:n]
    mean = statistics.fmean
    phase_means = {
        "generate": mean(gen),
        "reward": mean(rew),
        "score_rest": mean(gas) - mean(gen) - mean(rew),
        "update": mean(callback.step_seconds) - mean(gas),
    }
    return PeerRun(
        evals=callback.evals,
        rewards=rewards,
        step_seconds=callback.step_seconds,
        eval_seconds=callback.eval_seconds,
        phases=phase_means,
        order_checked=order_checked,
        alignment=alignment,
        rejected=dict(adapter.rejected),
    )


def check_inputs(trainer: Any, dataset: Any, adapter: RewardAdapter, indices: list[int]) -> dict:
    """Compare what TRL feeds the model for some items with what our preprocessor prepares:
    prompt token ids, ``pixel_values`` and ``image_grid_thw``, exactly. Returns one line per
    check, ``"equal ..."`` or ``"DIFFERENT ..."``."""
    import torch
    from trl.data_utils import prepare_multimodal_messages

    same_ids = same_pixels = 0
    for index in indices:
        row = dataset[index]
        prompt = prepare_multimodal_messages(row["prompt"], images=row["images"])
        ids, _, fields = trainer._tokenize_prompts([prompt])
        ours = adapter.prepared(index)
        same_ids += list(ids[0]) == list(ours.input_ids)
        mm = ours.multi_modal_input
        same_pixels += torch.equal(fields["pixel_values"], mm["pixel_values"]) and torch.equal(
            fields["image_grid_thw"], mm["image_grid_thw"]
        )
    n = len(indices)

    def line(k: int) -> str:
        return f"{'equal' if k == n else 'DIFFERENT'} in {k} of {n} items"

    ours_stop = sorted(adapter.ctx.gconfig.stop_token_ids)
    trl_stop = sorted(set(trainer.eos_token_ids))
    stop = "equal" if ours_stop == trl_stop else "DIFFERENT"
    return {
        "prompt ids": line(same_ids),
        "pixels and grid": line(same_pixels),
        "stop tokens": f"{stop}: ours {ours_stop}, TRL {trl_stop}",
    }
