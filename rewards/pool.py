"""What crosses into the reward pool: a small recipe built once per worker, and batches of calls.

A process pool pickles the callable into a worker on every call. For a reward with heavy state
(a CIDEr-D reward over a COCO-sized reference corpus) that costs time proportional to the state,
on every episode. Here the object that crosses the process boundary on each call is a
:class:`RewardRecipe`: the reward's import path, the path of a file holding the pickled reward
(written once, named by its content hash) and that hash. Each worker process loads the file the
first time it sees the hash and keeps the built reward; later calls pickle only the recipe, a few
hundred bytes whatever the corpus size. ``bench/bench_reward_pool.py`` measures it.

Each task sent to the pool pays an inter-process round trip, and on a machine without GPUs the
pool has one worker (:func:`vlrollout.rewards.executor.default_max_workers`), so the rewards of a
group would queue one round trip each. :class:`RewardBatch` scores several calls in one task;
:class:`~vlrollout.rewards.caller.RewardCaller` sends the calls that become ready together as one
task per worker. The pools themselves live in :mod:`vlrollout.rewards.executor`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .task_starts import report_start

RECIPE_DIR_ENV = "VLROLLOUT_REWARD_DIR"
"""Environment variable naming the folder for reward files (default: ``$TMPDIR/vlrollout-rewards``);
workers must be able to read it, which a process pool on one machine always can."""

_BUILT: OrderedDict[str, Any] = OrderedDict()  # per process: content hash -> built reward
_BUILT_MAX = 8
# In the caller: id(reward) -> (reward, recipe), the most recently used last. The entry holds the
# reward, so its id cannot be reused while it is here; the bound lets go of rewards nobody calls.
_RECIPES: OrderedDict[int, tuple[Any, RewardRecipe]] = OrderedDict()
_RECIPES_MAX = 16
_LOCK = threading.Lock()


def _qualified_name(obj: Any) -> str:
    named = isinstance(obj, type) or hasattr(obj, "__qualname__")  # a class or a function
    target = obj if named else type(obj)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


def reward_dir() -> Path:
    """Folder for reward files: ``$VLROLLOUT_REWARD_DIR`` or ``$TMPDIR/vlrollout-rewards``."""
    return Path(os.environ.get(RECIPE_DIR_ENV) or Path(tempfile.gettempdir()) / "vlrollout-rewards")


@dataclass(frozen=True)
class RewardRecipe:
    """A small picklable stand-in for a reward: what to build, from which file, with which hash.

    Calling a recipe calls the reward it names, built at most once per process.

    Attributes:
        name: Import path of the reward's class or function (for messages and logs).
        path: File holding the pickled reward.
        sha256: Content hash of that file; the per-process cache key, and checked on load so a
            worker never scores with a file that changed underneath it.
    """

    name: str
    path: str
    sha256: str

    @classmethod
    def from_reward(cls, reward: Any, directory: Path | None = None) -> RewardRecipe:
        """Pickle ``reward`` once into a content-addressed file and return its recipe.

        The same reward object gives the same recipe without pickling again (workflows build a
        ``RewardCaller`` per instance, and AReaL builds a workflow instance per data item), while
        it is among the last ``_RECIPES_MAX`` rewards seen; older ones are let go (a later call
        pickles again and finds its file already written).

        Raises:
            ValueError: ``reward`` cannot be pickled (a lambda, a closure), naming the fix.
        """
        with _LOCK:
            cached = _RECIPES.get(id(reward))
            if cached is not None and cached[0] is reward:
                _RECIPES.move_to_end(id(reward))
                return cached[1]
        try:
            data = pickle.dumps(reward, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - re-raised with the fix
            raise ValueError(
                f"reward function {reward!r} cannot be pickled ({e}); it runs in a "
                "process pool, so use a module-level function or an instance of a module-level "
                "class (not a lambda or a closure), or pass its import path"
            ) from e
        digest = hashlib.sha256(data).hexdigest()
        folder = directory or reward_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{digest}.pkl"
        if not path.exists():
            tmp = folder / f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)  # atomic: a worker never reads half a file
        recipe = cls(_qualified_name(reward), str(path), digest)
        with _LOCK:
            _RECIPES[id(reward)] = (reward, recipe)
            _RECIPES.move_to_end(id(reward))
            while len(_RECIPES) > _RECIPES_MAX:
                _RECIPES.popitem(last=False)
        return recipe

    def build(self) -> Any:
        """The reward, loaded from :attr:`path` on the first call in this process, then reused."""
        with _LOCK:
            reward = _BUILT.get(self.sha256)
            if reward is not None:
                _BUILT.move_to_end(self.sha256)
                return reward
        data = Path(self.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise RuntimeError(
                f"reward file {self.path} for {self.name} no longer has hash {self.sha256[:12]}; "
                "something rewrote it (reward files are content-addressed and never change)"
            )
        reward = pickle.loads(data)
        with _LOCK:
            _BUILT[self.sha256] = reward
            while len(_BUILT) > _BUILT_MAX:
                _BUILT.popitem(last=False)
        return reward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.build()(*args, **kwargs)
        except Exception as e:
            # An exception that cannot make the trip back would kill the executor's result
            # thread and break the pool for every call in flight: send one that names it.
            returnable = _returnable(e)
            if returnable is e:
                raise
            raise returnable from None


# Batching saves about a millisecond of round trip per call. Once a batch has run this long, the
# calls still waiting in it would gain under 2% by riding along and lose their place behind a slow
# reward (sent alone, a one-worker pool would return them one by one), so they are handed back.
BATCH_BUDGET_S = 0.05


@dataclass(frozen=True)
class NotStarted:
    """A :class:`RewardBatch` outcome: the call was not started (the batch spent its budget)."""


@dataclass(frozen=True)
class RewardBatch:
    """Scores several reward calls in one pool task: ``[(args, kwargs), ...] -> [outcome]``.

    A call that raises gives its exception in its place (with the worker's traceback as a note),
    so one failing reward does not fail its neighbours; it is not called again, since a reward may
    keep state and a second call would hide the first error. An exception that would not survive
    the trip back (pickling it, or unpickling it in the caller, fails) becomes a ``RuntimeError``
    naming it: the executor would otherwise report the whole pool broken. Calls not started once
    ``budget_s`` has passed come back as :class:`NotStarted` (the first call always runs).

    Attributes:
        recipe: The reward to call, built once per worker as for single calls.
        budget_s: Seconds after which no further call of the batch is started.
    """

    recipe: RewardRecipe
    budget_s: float = BATCH_BUDGET_S

    def __call__(
        self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], token: int | None = None
    ) -> list[Any]:
        """The calls' outcomes; the task's start is reported under ``token`` first (the clock of
        the calls' timeout, :mod:`vlrollout.rewards.task_starts`)."""
        report_start(token)
        reward = self.recipe.build()
        results: list[Any] = []
        start = time.perf_counter()
        for args, kwargs in calls:
            if results and time.perf_counter() - start > self.budget_s:
                results.append(NotStarted())
                continue
            results.append(_call_once(reward, args, kwargs))
        return results


def _call_once(reward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The value, or the exception with the worker's traceback as a note (an exception handed
    back is not raised, so it carries no remote traceback of its own)."""
    try:
        return reward(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - handed back as this call's outcome
        e.add_note("in the reward worker:\n" + traceback.format_exc().rstrip())
        return _returnable(e)


def _returnable(error: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - replaced by an error that names it
        return RuntimeError(repr(error))
    return error
