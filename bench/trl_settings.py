"""What of a ``vlrollout train`` recipe TRL's ``GRPOTrainer`` can be set to, and what not.

Pure functions of the loaded config (:class:`~vlrollout.train.config.TrainConfig`); nothing here
imports TRL, so ``bench_vs_trl.py`` prints the alignment and the tests check it without TRL.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SHARED_KEYS = frozenset(
    {
        "output",
        "task",
        "train_items",
        "eval_items",
        "data_seed",
        "eval_seed",
        "reward",
        "ground_metric",
        "eval_every",
        "eval_samples",
        "save_every",
        "log_rollouts",
        "progress",
        "engine",
        "freeze_vision_tower",
        "freeze_projector",
    }
)
"""``vlrollout`` keys both sides share (data, reward, evaluation, reporting) or that
:func:`peer_settings` checks by name; any other key set away from its default is a training
setting of ours that the peer lacks (a learning lever)."""

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
    "rejected episode: ours leaves it out of the batch and normalises its group over the "
    "accepted episodes; TRL gets None (NaN reward, left out of the group mean and sd, advantage "
    "0, its tokens still in the loss's denominator)",
    "work per step: ours prefills a group's shared prompt once and encodes each distinct image "
    "once per forward (the same logits and gradients); TRL's generate and loss run every copy",
    "seconds per step: ours is metrics.jsonl time/step (items -> rollout -> update -> weight "
    "sync); TRL's is the wall time between step ends (data, generation, reward, loss, backward, "
    "optimizer, logging), the evaluation callback's time taken out",
]
"""Differences no setting removes, printed with every run."""

SD_EPS_LINE = (
    "advantage: (r - group mean) / (group sd + eps), sample sd in both; eps 1e-5 (AReaL) vs "
    "1e-4 (TRL)"
)
"""Printed when both divide by the group's sd: the one constant that differs there."""


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
    levels = None if norm is None else (norm.mean_level, norm.std_level)
    if levels == ("group", "group") and not norm.mean_leave1out:
        out.aligned.append("advantage = group-normalised reward on every token (GAE 1, 1)")
        miss.append(SD_EPS_LINE)
    elif levels == ("group", None) and not norm.mean_leave1out:
        # Dr. GRPO: the reward minus its group's mean, not divided by the group's sd.
        kwargs["scale_rewards"] = "none"
        out.aligned.append(
            "advantage = reward minus its group's mean on every token, no sd (reward_norm "
            "std_level null = scale_rewards 'none', Dr. GRPO)"
        )
    else:
        if norm is not None and norm.mean_leave1out:
            levels = (*levels, "leave-one-out mean")
        miss.append(f"reward_norm {levels}: TRL runs scale_rewards='group' (group mean and sd)")
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
    miss += [
        f"vlrollout.{name}={value!r}: a vlrollout train setting the peer does not have"
        for name, value in changed_train_settings(vl).items()
    ]
    miss += FIXED_DIFFERENCES
    return out


def changed_train_settings(section: Any) -> dict[str, Any]:
    """The ``vlrollout`` keys outside :data:`SHARED_KEYS` whose values differ from their
    defaults: training settings of ours that TRL's trainer does not have.

    >>> from vlrollout.train.config import TrainSection
    >>> changed_train_settings(TrainSection(eval_items=8))
    {}
    """
    out = {}
    for f in dataclasses.fields(section):
        if f.name in SHARED_KEYS:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        value = getattr(section, f.name)
        if value != default:
            out[f.name] = value
    return out


def step_order(n_items: int, steps: int, batch_size: int, seed: int, group: int) -> list[int]:
    """Item indices in the order ``vlrollout train`` trains them, each repeated ``group`` times
    in a row (TRL's ``RepeatSampler`` layout: a group's completions sit side by side).

    >>> step_order(4, 2, 2, seed=1, group=2)[:4] == step_order(4, 1, 2, seed=1, group=2)
    True
    """
    from vlrollout.train.data import batch_items

    indices = list(range(n_items))
    return [
        j
        for step in range(steps)
        for j in batch_items(indices, step, batch_size, seed)
        for _ in range(group)
    ]


def order_per_step(order: list[int], per_step: int) -> list[list[int]]:
    """``order`` cut into steps of ``per_step`` indices."""
    return [order[k : k + per_step] for k in range(0, len(order), per_step)]
