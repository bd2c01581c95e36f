"""The trainer's one-time set-up, done at session start so that the first update does not pay
for it; its seconds are the run's ``time/setup``.

The first ``compute_logp`` and ``ppo_update`` of AReaL's FSDP actor pay for things later ones
reuse: the first forward pass builds torch's lazily made tables (``torch._dynamo``'s rule map,
which transformers' compile checks consult) and the CPU kernels' first-use state; the first
backward pass grows the allocator and the gradient buffers; the first ``optimizer_step`` clips
gradient norms and takes a fused Adam step over FSDP-sharded parameters for the first time
(``DTensor`` works out and caches how each operation is sharded, Adam creates its state).

:func:`warm_up` runs each of them once, on a batch shaped like a training step's
(:func:`warm_up_batch`: the first training items' prompts, each followed by
``gconfig.max_new_tokens`` tokens, in groups of ``gconfig.n_samples``), through the calls a step
makes: ``compute_logp``, then AReaL's ``train_batch`` (forward, backward, ``optimizer_step``)
with a loss of zero and the learning rate at 0. Nothing a run computes changes: every weight
stays as it was bit for bit (AdamW's step and decoupled decay are multiplied by the learning
rate), no gradient is left, the optimizer's state is what a new optimizer's is (Adam's ``step``,
``exp_avg`` and ``exp_avg_sq`` zeroed in place, any other optimizer's state dropped), the
learning rates, the scheduler and the weight version are untouched, and torch's random number
generators are put back. A checkpoint's optimizer state is loaded after it.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from areal.api import ModelResponse
from areal.utils.data import concat_padded_tensors

from vlrollout.packaging import TrajectoryBuilder
from vlrollout.processors.base import item_copy
from vlrollout.processors.errors import PreprocessError
from vlrollout.train import grouping

Batch = list[dict[str, Any]]


def warm_up_batch(
    preprocessor: Any, items: Sequence[dict], *, groups: int, group_size: int, new_tokens: int
) -> Batch:
    """``groups`` groups shaped like a training step's, from the first ``items`` that prepare.

    Each group is ``group_size`` copies of one item's prompt followed by ``new_tokens`` copies of
    the prompt's last token (a padded tensor dict with one row per sequence, as
    ``rollout_batch`` returns groups). Items the preprocessor refuses are skipped; the batch is
    shorter (or empty) when too few prepare.

    Args:
        preprocessor: The training workflow's preprocessor (``prepare(item)``).
        items: Training items.
        groups: Groups wanted (a step's items on this rank).
        group_size: Sequences per group (``gconfig.n_samples``).
        new_tokens: Generated tokens per sequence (``gconfig.max_new_tokens``).
    """
    batch: Batch = []
    for item in items:
        if len(batch) == groups:
            break
        try:
            prepared = preprocessor.prepare(item_copy(item))
        except PreprocessError:
            continue
        builder = TrajectoryBuilder.from_prepared(prepared)
        n = max(new_tokens, 1)
        builder.add_generated(
            ModelResponse(
                input_tokens=list(prepared.input_ids),
                output_tokens=[int(prepared.input_ids[-1])] * n,
                output_logprobs=[0.0] * n,
                output_versions=[0] * n,
            )
        )
        batch.append(concat_padded_tensors([builder.build(0.0) for _ in range(group_size)]))
    return batch


def warm_up(actor: Any, batch: Batch, *, encode_images_once: bool = True) -> float:
    """Run the first ``compute_logp``, backward pass and ``optimizer_step`` of ``actor`` on
    ``batch`` at learning rate 0, leaving everything a run computes as it was (module
    docstring); returns its seconds. With an empty batch only ``optimizer_step`` runs, on zero
    gradients.

    Args:
        actor: An initialised ``FSDPPPOActor``.
        batch: :func:`warm_up_batch`'s groups (the same on every process: each call is
            collective).
        encode_images_once: As the run's steps (``vlrollout.encode_images_once``).
    """
    start = time.perf_counter()
    with _kept_state(actor), _one_thread():
        if batch:
            with grouping.whole_groups(actor, batch, encode_images_once):
                actor.compute_logp(batch)
                actor.train()
                actor.train_batch(batch, loss_fn=_zero_loss, loss_weight_fn=_loss_tokens)
        else:
            for group in actor.optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
            actor.optimizer_step()
    return time.perf_counter() - start


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One intra-op thread within the block, as many as before after it.

    Before the first rollout the trainer's OpenMP team is the only one in the process, and
    libgomp's waiting threads then spin instead of sleeping: on a machine whose cores other
    processes also use, each parallel region waits for a descheduled spinner, and the warm-up
    took 10-20 times its single-threaded time (2 cores at load 6). Its results are discarded,
    so the thread count changes nothing a run computes.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _kept_state(actor: Any) -> Iterator[None]:
    """Within the block the learning rates are 0; on leaving, the gradients are gone, the
    learning rates, the module's mode and torch's generators as they were, and the optimizer's
    state a new optimizer's."""
    optimizer = actor.optimizer
    fresh = copy.deepcopy(optimizer.state_dict())
    rates = [group["lr"] for group in optimizer.param_groups]
    training = actor.model.training
    cuda = torch.cuda.is_available()
    rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None
    try:
        for group in optimizer.param_groups:
            group["lr"] = 0.0
        yield
    finally:
        actor.optimizer_zero_grad()
        for group, lr in zip(optimizer.param_groups, rates, strict=True):
            group["lr"] = lr
        actor.model.train(training)
        if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
            for state in optimizer.state.values():
                for value in state.values():
                    if torch.is_tensor(value):
                        value.zero_()
        else:
            optimizer.load_state_dict(fresh)
        torch.set_rng_state(rng[0])
        if cuda:
            torch.cuda.set_rng_state_all(rng[1])


def _zero_loss(logprobs: torch.Tensor, entropy: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
    """A loss of zero that still reaches every parameter through the logits."""
    return (logprobs.sum() + entropy.sum()) * 0.0


def _loss_tokens(mb: dict[str, Any]) -> torch.Tensor:
    """The micro-batch's generated tokens (AReaL's loss weight, as the PPO loss counts them)."""
    return mb["loss_mask"].count_nonzero()
