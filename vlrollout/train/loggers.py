"""The experiment trackers of ``vlrollout train``: AReaL's own ``StatsLogger`` under the config's
``stats_logger`` section (TensorBoard, W&B, SwanLab, Trackio), as an AReaL trainer has them.

Per step the trackers get what ``metrics.jsonl`` has, flattened to scalars (``areal`` nested dict
→ ``areal/<key>``; ``None`` left out; AReaL's commit drops its ``__count`` keys), and the
scalars of an evaluation at that step (``eval.jsonl``'s ``eval/*``). The step is the records'
``step``: training steps completed, 0 for the evaluation before training. A few held-out
rollouts of each evaluation (:mod:`vlrollout.train.samples`) go to TensorBoard as images and
Markdown text, and to W&B and SwanLab as captioned images.

What AReaL's ``StatsLogger`` needs that is worked around here: it logs in to W&B whenever
``wandb.mode`` is not ``disabled``, which without an API key fails for ``offline`` too unless
``WANDB_MODE=offline`` is set, so it is set for an offline run; it logs in to SwanLab whenever
``swanlab.mode`` is not ``disabled``, which needs an account and the network, so the log-in is
skipped for ``offline`` (no account needed: ``swanlab sync`` uploads later). SwanLab's ``local``
mode (its dashboard database) fails at the first logged value with the pinned ``swanboard`` and
``peewee`` ("cannot commit - no transaction is active") and is refused before training starts.
Nothing is built when no tracker is configured (the default: ``tensorboard.path`` unset, the
others ``disabled``).
"""

from __future__ import annotations

import contextlib
import netrc
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch.distributed as dist

from vlrollout.train.samples import HeldOutRollout


def enabled(stats_logger: Any) -> bool:
    """Whether the ``stats_logger`` section asks for any tracker."""
    return (
        stats_logger.tensorboard.path is not None
        or stats_logger.wandb.mode != "disabled"
        or stats_logger.swanlab.mode != "disabled"
        or stats_logger.trackio.mode != "disabled"
    )


def problem(stats_logger: Any) -> str | None:
    """Why the ``stats_logger`` settings would fail only once training has started (SwanLab's
    ``local`` mode, see the module docstring; W&B online with no API key), or ``None``;
    ``vlrollout train`` refuses them while loading the config."""
    if stats_logger.swanlab.mode == "local":
        return (
            "stats_logger.swanlab.mode=local fails in SwanLab's local dashboard (swanboard) with "
            "the installed peewee; use offline (a run folder for `swanlab sync`) or cloud"
        )
    if stats_logger.wandb.mode == "online" and not _has_wandb_key(stats_logger.wandb):
        return (
            "stats_logger.wandb.mode=online needs a W&B API key: set WANDB_API_KEY, run "
            "`wandb login`, or set stats_logger.wandb.wandb_api_key; or use "
            "stats_logger.wandb.mode=offline (`wandb sync` uploads later)"
        )
    return None


def _has_wandb_key(wandb: Any) -> bool:
    """Whether W&B's log-in finds a key: the config's, ``WANDB_API_KEY``, or the netrc entry
    of its host (``NETRC``, else ``~/.netrc``), where ``wandb login`` writes it."""
    if wandb.wandb_api_key or os.environ.get("WANDB_API_KEY"):
        return True
    url = wandb.wandb_base_url or os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai"
    try:
        entries = netrc.netrc(os.environ.get("NETRC"))
    except (OSError, netrc.NetrcParseError):
        return False
    return entries.authenticators(urlparse(url).hostname or "") is not None


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a ``metrics.jsonl``/``eval.jsonl`` record, nested dicts joined with ``/``;
    ``step``, ``None`` and anything not a number are left out.

    >>> flatten({"step": 2, "reward_mean": 0.5, "lr": None, "areal": {"a/avg": 1}})
    {'reward_mean': 0.5, 'areal/a/avg': 1.0}
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
        elif name != "step" and isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


@dataclass
class TrainLoggers:
    """The trackers of one run: scalars gathered per step, then committed together.

    Build with :meth:`open` after the actor (AReaL's ``StatsLogger`` writes on rank 0 only and
    asks ``torch.distributed`` which rank this is). Call :meth:`add` with each ``metrics.jsonl``
    and ``eval.jsonl`` record, :meth:`rollouts` with an evaluation's shown rollouts, then
    :meth:`commit` once the step's records are all in: W&B takes one row per step, in order.
    """

    stats: Any = None
    config: Any = None
    steps_per_epoch: int = 1
    pending: dict[int, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def open(cls, cfg: Any, ft_spec: Any, resume_step: int = 0) -> TrainLoggers:
        """AReaL's ``StatsLogger(cfg, ft_spec)`` when ``cfg.stats_logger`` configures a tracker;
        else loggers that only drop what they are given. ``resume_step``: the checkpoint's step
        a resumed run starts after; TensorBoard's events after it are purged
        (:func:`purge_tensorboard_after`), as ``metrics.jsonl`` is cut back to it.

        Raises:
            ValueError: settings :func:`problem` refuses.
        """
        section = cfg.stats_logger
        if problem(section):
            raise ValueError(problem(section))
        if not enabled(section):
            return cls()
        # Lazy: AReaL's stats_logger imports wandb, swanlab and trackio.
        from areal.utils.stats_logger import StatsLogger

        with _offline_login(section):
            stats = StatsLogger(cfg, ft_spec)
        if resume_step > 0:
            purge_tensorboard_after(stats, resume_step)
        return cls(stats, section, max(1, ft_spec.steps_per_epoch))

    def add(self, record: dict[str, Any]) -> None:
        """Gather the scalars of a record (see :func:`flatten`) under its ``step``."""
        if self.stats is not None:
            self.pending.setdefault(int(record["step"]), {}).update(flatten(record))

    def rollouts(self, step: int, shown: Sequence[HeldOutRollout]) -> None:
        """Send an evaluation's shown rollouts: TensorBoard images and text under
        ``eval_rollouts/K``, W&B and SwanLab images under ``eval_rollouts`` (caption: item,
        reward, completion)."""
        if self.stats is None or not shown:
            return
        writer = getattr(self.stats, "summary_writer", None)  # unset on ranks other than 0
        if writer is not None:
            for r in shown:
                if r.image is not None:
                    writer.add_image(
                        f"eval_rollouts/{r.index}", np.asarray(r.image), step, dataformats="HWC"
                    )
                writer.add_text(f"eval_rollouts/{r.index}", r.markdown(), step)
            writer.flush()
        if not _rank0():
            return
        pictured = [r for r in shown if r.image is not None]
        if pictured and self.config.wandb.mode != "disabled":
            import wandb

            images = [wandb.Image(r.image, caption=_caption(r)) for r in pictured]
            wandb.log({"eval_rollouts": images}, step=step)
        if pictured and self.config.swanlab.mode != "disabled":
            import swanlab

            images = [swanlab.Image(r.image, caption=_caption(r)) for r in pictured]
            swanlab.log({"eval_rollouts": images}, step=step)

    def commit(self) -> None:
        """Send the gathered scalars, one commit per step in step order (AReaL's
        ``StatsLogger.commit``, whose logged step is the ``global_step`` passed: here the
        records' ``step``)."""
        for step in sorted(self.pending):
            done = max(step - 1, 0)  # 0-based index of the step completed, for AReaL's log line
            epoch, in_epoch = divmod(done, self.steps_per_epoch)
            self.stats.commit(epoch, in_epoch, step, self.pending[step])
        self.pending.clear()
        if self.stats is not None and getattr(self.stats, "summary_writer", None) is not None:
            self.stats.summary_writer.flush()

    def close(self) -> None:
        """Commit what is gathered and close every tracker (W&B and SwanLab finish their run)."""
        if self.stats is None:
            return
        self.commit()
        self.stats.close()
        self.stats = None


def purge_tensorboard_after(stats: Any, step: int) -> None:
    """Reopen AReaL's TensorBoard writer (``StatsLogger.summary_writer``, set on rank 0) with
    ``purge_step=step + 1``: TensorBoard then hides the events after ``step`` that the run wrote
    before it stopped, which the resumed run writes again (shown twice otherwise)."""
    from tensorboardX import SummaryWriter

    writer = getattr(stats, "summary_writer", None)
    if writer is None:
        return
    writer.close()
    stats.summary_writer = SummaryWriter(log_dir=writer.logdir, purge_step=step + 1)


def _caption(r: HeldOutRollout) -> str:
    return r.title if r.completion is None else f"{r.title}\n{r.completion}"


def _rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


@contextlib.contextmanager
def _offline_login(section: Any) -> Iterator[None]:
    """Let AReaL's log-ins pass for offline trackers (see the module docstring)."""
    import swanlab

    saved = os.environ.get("WANDB_MODE")
    login = swanlab.login
    if section.wandb.mode == "offline":
        os.environ["WANDB_MODE"] = "offline"
    if section.swanlab.mode == "offline":
        swanlab.login = lambda *args, **kwargs: None
    try:
        yield
    finally:
        swanlab.login = login
        if saved is None:
            os.environ.pop("WANDB_MODE", None)
        else:
            os.environ["WANDB_MODE"] = saved
