"""Calling a synchronous reward from an episode: in the reward pool, batched, with a timeout.

Rewards are plain callables ``(prompt, completions, prompt_ids, completion_ids, **task_data) ->
float`` (AReaL's per-sample signature), a built-in name or an import path. :class:`RewardCaller`
runs them in a pool of worker processes (:mod:`vlrollout.rewards.executor`) and turns every way
a reward can fail into a rejection with a reason, never a silent 0.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import current_process
from typing import Any

from areal.utils.perf_tracer import trace_session

from vlrollout.ledger import EpisodeRejected

from . import executor as pools
from . import task_starts
from .combine import reward_name
from .pool import NotStarted, RewardBatch, RewardRecipe

# Keys of a data item that do not reach the reward function: raw images and videos are heavy to
# pickle into the reward process pool, and rewards get each image's geometry and each video's
# timing instead — unless the reward says it needs them (``needs_images = True``, e.g. CLIPScore).
_NOT_FOR_REWARD = ("images", "videos")

REWARD_ARGUMENTS = ("prompt", "completions", "prompt_ids", "completion_ids")
"""The reward's positional arguments: a data field of one of these names cannot reach it."""


def reward_argument_clash(data: Mapping[str, Any]) -> str | None:
    """Why ``data`` cannot be a reward's keyword arguments (a field named as one of
    :data:`REWARD_ARGUMENTS`, as a TRL or verl dataset's ``prompt`` column), else ``None``.

    >>> reward_argument_clash({"prompt": "How many?", "answer": 3})
    "field 'prompt' has the name of a reward argument (prompt, completions, prompt_ids, completion_ids): rename it, e.g. to 'question'"
    """
    for name in REWARD_ARGUMENTS:
        if name in data:
            return (
                f"field {name!r} has the name of a reward argument ({', '.join(REWARD_ARGUMENTS)})"
                ": rename it, e.g. to 'question'"
            )
    return None


def resolve_reward(reward_fn: Callable[..., float] | str) -> Callable[..., float]:
    """The reward a name stands for: a built-in reward name or an import path (a class path is
    instantiated); a callable as it is.

    Raises:
        TypeError: ``reward_fn`` is neither a name nor callable.
    """
    if isinstance(reward_fn, str):
        from .registry import get_reward

        reward_fn = get_reward(reward_fn)
    if not callable(reward_fn):
        raise TypeError(
            f"reward function must be a callable or an import path, got {type(reward_fn).__name__}"
        )
    return reward_fn


def runs_in_thread(reward_fn: Callable[..., float]) -> bool:
    """The reward runs in a thread of the calling process, not in the pool: torch-model rewards
    (``run_in_thread = True``), since a forked pool worker inherits torch's thread pools and can
    hang; and any reward called in a daemonic process (a ``multiprocessing.Pool`` worker), which
    may start no processes of its own."""
    return bool(getattr(reward_fn, "run_in_thread", False)) or current_process().daemon


def start_reward_workers(reward_fn: Callable[..., float] | str, max_workers: int | None = None):
    """Start now the pool workers that a :class:`RewardCaller` of ``reward_fn`` would call
    (:meth:`~vlrollout.rewards.executor.RewardPool.start`); nothing for a reward run in a thread.

    ``reward_fn`` and ``max_workers`` are as for :class:`RewardCaller`.
    """
    if not runs_in_thread(resolve_reward(reward_fn)):
        size = pools.default_max_workers() if max_workers is None else max_workers
        pools.current_pool(size).start()


class RewardCaller:
    """Runs a synchronous reward function in the reward process pool; awaited by episodes.

    A timeout rejects the episode with reason ``reward_timeout``, and an exception rejects it
    with ``reward_error`` — never an unexplained 0; a reward that raises is not called again. A
    crashed worker process is recovered (the pool is replaced and the call sent once more, with a
    warning, :func:`~vlrollout.rewards.executor.run_in_pool`);
    after a timeout the pool is replaced (:func:`~vlrollout.rewards.pools.replace_pool`), so a
    hung reward takes down only its own batch (below). The pool receives a :class:`RewardRecipe`,
    not the reward: each worker builds the reward once.

    A pool call's timeout counts from when a worker starts its task
    (:mod:`~vlrollout.rewards.task_starts`), not from when it joined the queue: a group of slow
    rewards ahead of it is no reason to reject it. The clock belongs to the task, so a hung call
    whose episode was cancelled still times out and frees its worker.

    Calls that become ready in the same event-loop iteration (the episodes of a group) go to the
    pool as one task per worker (:class:`~vlrollout.rewards.pool.RewardBatch`): each task pays an
    inter-process round trip, and without GPUs the pool has one worker. A lone call still leaves
    in the next iteration, as a batch of one. Each call keeps its own timeout and reason; a reward
    that raises rejects only its own episode, but a reward that hangs times out the calls batched
    with it. A batch starts no further call after ``BATCH_BUDGET_S``: the calls it hands back go
    one per task, and a reward that slow is not batched again (the round trip saved is then noise,
    and queueing behind it is not).

    Args:
        reward_fn: ``(prompt, completions, prompt_ids, completion_ids, **task_data) -> float``,
            a built-in reward name (``"iou"``, ``"cider_d"``... see
            :mod:`vlrollout.rewards.registry`) or an import path (a class is instantiated).
            Must be picklable.
        timeout_s: Seconds before the episode is rejected with ``reward_timeout``.
        max_workers: Size of the pool this reward runs in (default
            :func:`~vlrollout.rewards.pools.default_max_workers`); rewards asking for the same
            size share one pool.
    """

    def __init__(
        self,
        reward_fn: Callable[..., float] | str,
        timeout_s: float = 15.0,
        max_workers: int | None = None,
    ) -> None:
        if not timeout_s > 0:  # NaN too
            raise ValueError(f"reward timeout must be positive, got {timeout_s}")
        self.reward_fn = reward_fn = resolve_reward(reward_fn)
        call = vars(type(reward_fn)).get("__call__")  # an object with an async __call__
        if inspect.iscoroutinefunction(reward_fn) or inspect.iscoroutinefunction(call):
            raise TypeError(
                f"reward {reward_name(reward_fn)} is a coroutine function; rewards are plain "
                "functions (AReaL's signature), run in a process pool: define it with def"
            )
        # What crosses into the pool per call is a small recipe; each worker builds the reward
        # once from the file it names (vlrollout.rewards.pool), so per-call cost does not grow
        # with the reward's state (a CIDEr-D corpus). Raises ValueError if it cannot pickle.
        self.recipe = RewardRecipe.from_reward(self.reward_fn)
        self.timeout_s = timeout_s
        self.max_workers = pools.default_max_workers() if max_workers is None else max_workers
        # Every call reaches the pool as a RewardBatch (a lone call as a batch of one).
        self._batch = RewardBatch(self.recipe)
        self._pending: dict[asyncio.AbstractEventLoop, list[_PendingCall]] = {}
        self._batching = True  # off once a batch ran past its budget: the reward is slow
        self._running: set[asyncio.Task[None]] = set()

    @trace_session("reward")
    async def __call__(
        self,
        prompt: str,
        completion: str,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
        task_data: Mapping[str, Any],
        geometry: Sequence[Mapping[str, int]] = (),
    ) -> float:
        # Rewards that score the image itself (CLIPScore) declare ``needs_images = True``.
        dropped = () if getattr(self.reward_fn, "needs_images", False) else _NOT_FOR_REWARD
        kwargs = {k: v for k, v in task_data.items() if k not in dropped}
        if geometry:
            kwargs["geometry"] = [dict(g) for g in geometry]
        try:
            args = (prompt, completion, list(prompt_ids), list(completion_ids))
            if runs_in_thread(self.reward_fn):  # torch releases the GIL
                call = asyncio.to_thread(self.reward_fn, *args, **kwargs)
                value = await asyncio.wait_for(call, timeout=self.timeout_s)
            else:  # timed by its task (_supervise)
                value = await self._submit(args, kwargs)
        except TimeoutError as e:
            raise EpisodeRejected(
                "reward_timeout", f"reward function took longer than {self.timeout_s}s"
            ) from e
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded as the rejection reason
            raise EpisodeRejected("reward_error", f"{type(e).__name__}: {e}") from e
        return reward_value(value)

    def _submit(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
        """Queue one call for the pool; the first call of a loop iteration schedules the flush."""
        loop = asyncio.get_running_loop()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        future = loop.create_future()
        pending.append(_PendingCall(args, kwargs, future))
        return future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the queued calls as one task per pool worker (fewer if fewer calls)."""
        calls = [c for c in self._pending.pop(loop) if not c.future.done()]  # done: cancelled
        n = min(len(calls), self.max_workers) if self._batching else len(calls)
        for i in range(n):
            self._start(loop, calls[i * len(calls) // n : (i + 1) * len(calls) // n])

    def _start(self, loop: asyncio.AbstractEventLoop, chunk: list[_PendingCall]) -> None:
        task = loop.create_task(self._run(chunk))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, chunk: list[_PendingCall]) -> None:
        """One pool task for ``chunk``; each call's future gets its own value or exception."""
        token, start = task_starts.expect_start()
        # A lone call goes as a batch of one too: a reward that raises comes back as its
        # outcome, with the worker's traceback attached and nothing logged.
        calls = [(c.args, c.kwargs) for c in chunk]
        work = asyncio.ensure_future(
            pools.run_in_pool(self._batch, calls, token, max_workers=self.max_workers)
        )
        try:
            outcomes = await self._supervise(work, start)
            if not isinstance(outcomes, list) or len(outcomes) != len(chunk):
                raise RuntimeError(f"reward batch of {len(chunk)} returned {outcomes!r}")
        except Exception as e:  # noqa: BLE001 - every call of the task fails with it
            for call in chunk:
                _settle(call.future, error=e)
            return
        finally:
            task_starts.forget(token)
            work.cancel()  # done by now, unless this task itself was cancelled
        handed_back = [c for c, o in zip(chunk, outcomes, strict=True) if isinstance(o, NotStarted)]
        if handed_back:  # the batch spent its time budget: this reward is too slow to batch
            self._batching = False
            loop = asyncio.get_running_loop()
            for call in handed_back:
                if not call.future.done():
                    self._start(loop, [call])
        for call, outcome in zip(chunk, outcomes, strict=True):
            if isinstance(outcome, NotStarted):
                continue
            if isinstance(outcome, Exception):  # RewardBatch hands back what a call raised
                _settle(call.future, error=outcome)
            else:
                _settle(call.future, outcome)

    async def _supervise(self, work: asyncio.Future[Any], start: task_starts.TaskStart) -> Any:
        """``work``'s result, or ``TimeoutError`` once it has run ``timeout_s`` since a worker
        last started it; ``work`` is then cancelled and the pool it hangs in replaced (calls
        queued beside it are sent once more to the fresh pool; the calls batched with it time
        out with it)."""
        await asyncio.wait((work, start.started), return_when=asyncio.FIRST_COMPLETED)
        loop = asyncio.get_running_loop()
        while not work.done():
            left = start.at + self.timeout_s - loop.time()
            if left <= 0:
                work.cancel()  # before the pool goes: a cancelled call is not sent again
                pools.replace_pool(start.pool, hung=True)
                raise TimeoutError
            await asyncio.wait((work,), timeout=left)
        return work.result()


@dataclass
class _PendingCall:
    """A reward call waiting for the pool; its episode awaits :attr:`future`."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: asyncio.Future[Any]


def _settle(future: asyncio.Future[Any], value: Any = None, error: Exception | None = None) -> None:
    if future.done():  # its episode gave up (timeout or cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite value of AReaL's float32 ``rewards`` tensor."""


def reward_value(value: Any) -> float:
    """A reward function's return value as the float a trajectory holds.

    Raises:
        EpisodeRejected: ``reward_error`` for a value that is not a number (a string is a
            reward's bug, even one holding digits), NaN, or not finite in float32 (infinity,
            1e300): each would train on a meaningless advantage.
    """
    text = getattr(getattr(value, "dtype", None), "kind", "") in ("U", "S", "O")
    if text or isinstance(value, (str, bytes, bytearray, memoryview)):
        raise EpisodeRejected("reward_error", f"reward function returned {value!r}, not a number")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise EpisodeRejected(
            "reward_error", f"reward function returned {value!r}, not a number"
        ) from e
    if number != number:
        raise EpisodeRejected("reward_error", "reward function returned NaN")
    if not abs(number) <= FLOAT32_MAX:
        raise EpisodeRejected(
            "reward_error",
            f"reward function returned {number}, not finite in the float32 rewards tensor",
        )
    return number
