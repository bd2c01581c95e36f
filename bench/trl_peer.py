"""The peer of ``bench_vs_trl.py``: TRL's ``GRPOTrainer`` on a ``vlrollout train`` recipe.

TRL (``pip install -e .[bench]``, trl 1.16) is an optional benchmark dependency: nothing here
imports it at module level, and :func:`run_trl` is the only function that needs it.

What the peer shares with ``vlrollout train``, taken from the recipe's loaded config:

- the model (``actor.path``), training items and held-out items (:func:`~vlrollout.train.loop.
  load_data`), and the items of each step (:func:`step_order`: the loop's own
  :func:`~vlrollout.train.loop.batch_items` fed to TRL through its train sampler);
- the reward object (:func:`~vlrollout.train.rewards.build_rewards`), called by
  :class:`RewardAdapter` with the prompt text, geometry and decoded completion our workflow gives
  it, through the same :class:`~vlrollout.rewards.caller.RewardCaller`;
- the hyper-parameters TRL has a key for (:func:`peer_settings`, which also lists what it cannot
  set);
- the evaluator: at every evaluation step the peer's weights are saved and evaluated by
  :func:`~vlrollout.train.loop.evaluate` on the engine and greedy workflow the loop builds
  (:class:`HeldOutEval`), its time left out of the peer's seconds per step.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOSS_LINE = (
    "loss aggregation: AReaL sums the clipped token losses of the batch and divides by the "
    "batch's loss tokens (micro-batches weighted by their token counts); TRL's loss_type='dapo' "
    "divides by the active tokens of the global batch: the same with one process, one "
    "mini-batch and no gradient accumulation (TRL's default 'grpo' would average per sequence "
    "first)"
)
"""How the two aggregate token losses; printed with the alignment."""

FIXED_DIFFERENCES = [
    "sampler: TRL samples with transformers' generate (one padded batch of items x group), ours "
    "with the embedded engine; both plain temperature sampling, different random streams, so "
    "the completions differ and only their distribution is shared",
    "image placeholder: TRL's generate suppresses the image token (a sampled one would break its "
    "forward), our engine does not (the tiny model all but never samples it)",
    "pi_old: ours is the engine's sampling logprob (ratio exp(trainer - engine), 1 up to "
    "numerics); TRL's is its own detached forward (ratio exactly 1); one update per batch clips "
    "nothing in either",
    "advantage: (r - group mean) / (group sd + eps), sample sd in both; eps 1e-5 (AReaL) vs "
    "1e-4 (TRL)",
    "rejected episode: ours leaves it out of the batch; TRL gets None (NaN reward, left out of "
    "the group mean and sd, advantage 0)",
    "seconds per step: ours is metrics.jsonl time/step (items -> rollout -> update -> weight "
    "sync); TRL's is the wall time between step ends (data, generation, reward, loss, backward, "
    "optimizer, logging), the evaluation callback's time taken out",
]
"""Differences no setting removes, printed with every run."""


# ----------------------------------------------------------------------------- settings
@dataclass
class PeerSettings:
    """``GRPOConfig`` keyword arguments for a recipe, and what they could not carry over.

    Attributes:
        kwargs: Arguments for ``trl.GRPOConfig`` (without ``output_dir``).
        aligned: One line per setting carried over, ``ours = TRL``.
        not_aligned: One line per setting TRL cannot reproduce, with both values.
    """

    kwargs: dict[str, Any]
    aligned: list[str] = field(default_factory=list)
    not_aligned: list[str] = field(default_factory=list)


def peer_settings(cfg: Any, steps: int) -> PeerSettings:
    """Map a loaded ``vlrollout train`` config (:class:`~vlrollout.train.config.TrainConfig`) to
    TRL's ``GRPOConfig`` arguments for ``steps`` optimizer steps of one generation batch each.

    One TRL step is one of ours: ``per_device_train_batch_size`` = items x group size, one
    gradient-accumulation step, one update per generation (``num_iterations=1``).
    """
    actor, gen, opt = cfg.actor, cfg.gconfig, cfg.actor.optimizer
    group, items = gen.n_samples, cfg.train_dataset.batch_size
    top_k = 0 if gen.top_k >= 2**20 else int(gen.top_k)  # AReaL's 1e8 means no top-k
    kwargs: dict[str, Any] = {
        "max_steps": steps,
        "per_device_train_batch_size": items * group,
        "gradient_accumulation_steps": 1,
        "num_generations": group,
        "num_iterations": 1,
        "max_completion_length": gen.max_new_tokens,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "top_k": top_k,
        "learning_rate": opt.lr,
        "lr_scheduler_type": opt.lr_scheduler_type,
        "warmup_steps": round(opt.warmup_steps_proportion * steps),
        "weight_decay": opt.weight_decay,
        "adam_beta1": opt.beta1,
        "adam_beta2": opt.beta2,
        "adam_epsilon": opt.eps,
        "max_grad_norm": opt.gradient_clipping,
        "epsilon": actor.eps_clip,
        "epsilon_high": actor.eps_clip_higher,
        "beta": 0.0,
        "loss_type": "dapo",
        "scale_rewards": "group",
        "disable_dropout": actor.disable_dropout,
        "gradient_checkpointing": False,
        "bf16": False,
        "fp16": False,
        "use_cpu": True,
        "seed": cfg.seed,
        "shuffle_dataset": False,
        "remove_unused_columns": False,
        "report_to": "none",
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    out = PeerSettings(kwargs)
    out.aligned += [
        f"model {actor.path} in {actor.dtype}, every weight trained",
        f"group size {group} = num_generations; batch {items} items x {group} = "
        f"per_device_train_batch_size {items * group}",
        f"temperature {gen.temperature}, top_p {gen.top_p}, no top-k; max_new_tokens "
        f"{gen.max_new_tokens} = max_completion_length",
        f"lr {opt.lr} ({opt.lr_scheduler_type}), Adam betas ({opt.beta1}, {opt.beta2}), eps "
        f"{opt.eps}, weight decay {opt.weight_decay}, grad clip {opt.gradient_clipping}",
        f"eps clip {actor.eps_clip}"
        + (f" / {actor.eps_clip_higher}" if actor.eps_clip_higher is not None else ""),
        "one update per batch (ppo_n_minibatches 1 = gradient_accumulation_steps 1, "
        "num_iterations 1)",
        LOSS_LINE,
    ]
    miss = out.not_aligned
    if actor.kl_ctl:
        miss.append(
            f"KL: AReaL kl_ctl={actor.kl_ctl} puts the KL into the reward; TRL's beta is a loss "
            "term against a reference model: run with beta=0 here"
        )
    else:
        out.aligned.append("no KL term (kl_ctl 0 = beta 0)")
    norm = actor.reward_norm
    if norm is None or (norm.mean_level, norm.std_level) != ("group", "group"):
        levels = None if norm is None else (norm.mean_level, norm.std_level)
        miss.append(f"reward_norm {levels}: TRL runs scale_rewards='group' (group mean and sd)")
    else:
        out.aligned.append("advantage = group-normalised reward on every token (GAE 1, 1)")
    if actor.adv_norm is not None:
        miss.append("adv_norm set: TRL has no second advantage normalisation")
    if actor.ppo_n_minibatches != 1:
        miss.append(f"ppo_n_minibatches {actor.ppo_n_minibatches}: the peer runs one update")
    if opt.lr_scheduler_type != "constant" and opt.min_lr_ratio:
        miss.append(f"min_lr_ratio {opt.min_lr_ratio}: TRL's schedulers decay to 0")
    if cfg.rollout.max_head_offpolicyness > 0:
        miss.append(
            f"max_head_offpolicyness {cfg.rollout.max_head_offpolicyness}: TRL generates "
            "on-policy, between updates"
        )
    if actor.use_decoupled_loss or actor.recompute_logprob:
        miss.append("decoupled loss / recomputed logprobs: TRL's pi_old is its own forward")
    if actor.use_lora:
        miss.append("use_lora: the peer trains every weight")
    vl = cfg.vlrollout
    if vl.freeze_vision_tower or vl.freeze_projector:
        miss.append("frozen vision tower / projector: the peer trains every weight")
    if getattr(actor, "reward_scaling", 1.0) != 1.0 or getattr(actor, "reward_bias", 0.0):
        miss.append("reward_scaling / reward_bias: TRL scores the raw reward")
    miss += FIXED_DIFFERENCES
    return out


def step_order(n_items: int, steps: int, batch_size: int, seed: int, group: int) -> list[int]:
    """Item indices in the order ``vlrollout train`` trains them, each repeated ``group`` times
    in a row (TRL's ``RepeatSampler`` layout: a group's completions sit side by side).

    >>> step_order(4, 2, 2, seed=1, group=2)[:4] == step_order(4, 1, 2, seed=1, group=2)
    True
    """
    from vlrollout.train.loop import batch_items

    indices = list(range(n_items))
    return [
        j
        for step in range(steps)
        for j in batch_items(indices, step, batch_size, seed)
        for _ in range(group)
    ]


# ----------------------------------------------------------------------------- the reward
class RewardAdapter:
    """Our reward as a TRL reward function: ``(prompts, completions, completion_ids, item_index,
    **kwargs) -> list[float | None]``.

    Each completion is scored as :class:`~vlrollout.workflows.SingleTurnWorkflow` scores an
    episode: the reward gets the item's chat-templated prompt text and prompt ids (our
    preprocessor's), the completion decoded from TRL's ``completion_ids`` with trailing stop
    tokens dropped and special tokens kept (TRL's own ``completions`` text drops special tokens,
    Qwen2-VL's box markers among them), the item's task data and the image geometry, through
    the workflow's :class:`~vlrollout.rewards.caller.RewardCaller`. A rejected episode scores
    ``None`` (TRL's "not applicable") and is counted in :attr:`rejected` by reason.

    Args:
        workflow: The training workflow (``VisionRLVRWorkflow(reward, gconfig, tokenizer,
            processor)``), whose context prepares, decodes and scores.
        items: The training items; TRL's ``item_index`` column indexes them.

    Attributes:
        calls: The item indices of each call, in order (one call per TRL step).
        rejected: Rejected episodes by reason.
    """

    __name__ = "vlrollout_reward"  # TRL names reward functions by __name__

    def __init__(self, workflow: Any, items: list[dict]) -> None:
        self.ctx = workflow.ctx
        self.items = items
        self._prepared: dict[int, Any] = {}
        self.calls: list[list[int]] = []
        self.rejected: collections.Counter[str] = collections.Counter()

    def prepared(self, index: int) -> Any:
        """Our preprocessor's :class:`~vlrollout.processors.base.PreparedPrompt` of an item."""
        if index not in self._prepared:
            self._prepared[index] = self.ctx.preprocessor.prepare(self.items[index])
        return self._prepared[index]

    async def _score(self, index: int, ids: list[int]) -> float | None:
        from vlrollout.ledger import EpisodeRejected

        prepared = self.prepared(index)
        try:
            return await self.ctx.reward(
                prepared.prompt_text,
                self.ctx.decode_completion(ids),
                prepared.input_ids,
                ids,
                self.items[index],
                geometry=[g.to_dict() for g in prepared.geometry],
            )
        except EpisodeRejected as e:
            self.rejected[e.reason] += 1
            return None

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        item_index: list[int],
        **_: Any,
    ) -> list[float | None]:
        if len(item_index) != len(completion_ids):
            raise ValueError(
                f"{len(item_index)} item indices for {len(completion_ids)} completions"
            )
        indices = [int(i) for i in item_index]
        self.calls.append(indices)

        async def score_all() -> list[float | None]:
            pairs = zip(indices, completion_ids, strict=True)
            return await asyncio.gather(*(self._score(i, list(ids)) for i, ids in pairs))

        return asyncio.run(score_all())


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
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from vlrollout.train.loop import build_rollout_engine, evaluate, load_data
    from vlrollout.train.rewards import build_rewards
    from vlrollout.workflows import VisionRLVRWorkflow
    from vlrollout.workflows.episode import load_processor

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
    model = Qwen2VLForConditionalGeneration.from_pretrained(cfg.actor.path, dtype=dtype)
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


def order_per_step(order: list[int], per_step: int) -> list[list[int]]:
    """``order`` cut into steps of ``per_step`` indices."""
    return [order[k : k + per_step] for k in range(0, len(order), per_step)]


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
