"""Our rewards as TRL ``GRPOTrainer`` reward functions.

TRL 1.16 (``GRPOTrainer._calculate_rewards``) calls each reward function once per batch as
``reward_func(prompts=..., completions=..., completion_ids=..., **columns)``: one entry per
completion in each list, every dataset column (``images`` included) repeated per completion, plus
``trainer_state``, ``log_extra``, ``log_metric`` (and ``environments``); it names the function by
``__name__``, turns ``None`` into NaN ("not applicable": left out of the group's mean and sd) and
awaits coroutine functions on its own event loop.

:class:`TRLReward` scores each completion the way a vlrollout episode does: through
:class:`~vlrollout.rewards.caller.RewardCaller` (the reward process pool, each worker building
the reward once, the calls of a batch sent together, the timeout, the reward's output cap), with
the dataset's other columns as task data. Images are read in the right frame: each row's geometry
comes from its ``geometry`` column when the dataset has one (:func:`~vlrollout.processors.
for_trainers.model_inputs` writes it), else from its images prepared by ``processor``
(:func:`~vlrollout.processors.for_trainers.image_geometry`). A completion the caller rejects (the
reward raised or timed out) scores ``None`` and its reason is counted in :attr:`TRLReward.rejected`;
the first one of each reason is logged with its detail.

The completion text: with ``processor``, decoded from ``completion_ids`` with special tokens kept
and trailing stop tokens dropped, as our workflows decode it (TRL's ``completions`` drop special
tokens, and Qwen2-VL writes boxes between special tokens); without, TRL's text (the last message's
content for conversational prompts). The ``prompt`` argument is the prompt's text (the last
message's, for conversational prompts) and ``prompt_ids`` is empty: TRL passes no prompt ids.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PIL import Image

from vlrollout.ledger import EpisodeRejected
from vlrollout.logs import get_logger
from vlrollout.processors.for_trainers import as_preprocessor, image_geometry

from .caller import RewardCaller
from .combine import reward_name
from .plain import build_reward
from .text_extract import completion_text

logger = get_logger(__name__)

TRL_KWARGS = ("trainer_state", "log_extra", "log_metric", "environments")
"""What TRL adds to the columns; not task data."""


def message_text(message: Any) -> str:
    """The text of a plain prompt/completion, or of a conversation's last message.

    >>> message_text([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}])
    'Hi'
    >>> message_text("plain")
    'plain'
    """
    if isinstance(message, str):
        return message
    if not isinstance(message, (list, tuple)) or (message and not isinstance(message[-1], Mapping)):
        raise TypeError(
            f"a {type(message).__name__} is not text, nor a conversation (a list of message "
            "dicts): TRL passes one or the other"
        )
    content = message[-1].get("content") if message else ""
    if content is None:  # a tool-call message: no text
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


class TRLReward:
    """One of our rewards as a TRL ``reward_funcs`` entry: batch in, ``list[float | None]`` out.

    Args:
        reward: A built-in reward name (``"iou"``, ``"cider_d"``...), an import path or a reward
            object (AReaL's per-sample signature; picklable, as for the reward pool).
        processor: The transformers processor (or a local model path, or our preprocessor) that
            TRL's trainer uses: for the geometry of the ``images`` column and to decode
            ``completion_ids``. Without it, rows take geometry from a ``geometry`` column only,
            and the text is TRL's ``completions``.
        items: For rewards built from their dataset (``"cider_d"``: document frequencies from the
            items' ``captions``).
        name: What TRL logs the reward as (``rewards/<name>/mean``); default ``vlrollout_<reward>``.
        timeout_s, max_workers: As for :class:`~vlrollout.rewards.caller.RewardCaller`.
        **options: Options of a reward given by name (``family=``, ``corpus=``...).

    Attributes:
        rejected: Completions scored ``None``, by reason (``reward_error``, ``reward_timeout``).
        __name__: The name TRL logs.
    """

    def __init__(
        self,
        reward: Callable[..., Any] | str,
        processor: Any = None,
        *,
        items: Sequence[Mapping[str, Any]] = (),
        name: str | None = None,
        timeout_s: float = 15.0,
        max_workers: int | None = None,
        **options: Any,
    ) -> None:
        self.caller = RewardCaller(build_reward(reward, items, **options), timeout_s, max_workers)
        self.preprocessor = as_preprocessor(processor) if processor is not None else None
        tokenizer = getattr(self.preprocessor, "tokenizer", None)
        self.tokenizer = tokenizer
        self.stop_ids = (
            {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None} if tokenizer else set()
        )
        label = reward if isinstance(reward, str) else reward_name(self.caller.reward_fn)
        self.__name__ = name or f"vlrollout_{label}".replace(":", "_").replace(".", "_")
        self.rejected: collections.Counter[str] = collections.Counter()
        self._geometry: dict[tuple, list[dict[str, float]]] = {}

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        **columns: Any,
    ) -> list[float | None]:
        scoring = self.ascore(prompts, completions, completion_ids, **columns)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(scoring)
        # An event loop already runs in this thread (a notebook's): score in a thread of our own.
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(asyncio.run, scoring).result()

    async def ascore(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        **columns: Any,
    ) -> list[float | None]:
        """The scores of a batch, each completion through the reward caller, awaited together."""
        if not len(prompts) == len(completions) == len(completion_ids):
            raise ValueError(
                f"{len(prompts)} prompts, {len(completions)} completions and "
                f"{len(completion_ids)} completion_ids: TRL passes one of each per completion"
            )
        data = {k: v for k, v in columns.items() if k not in TRL_KWARGS}
        for name, values in data.items():
            if len(values) != len(prompts):
                raise ValueError(
                    f"column {name!r} has {len(values)} value(s) for {len(prompts)} completions: "
                    "TRL passes one per completion"
                )
        rows = [{k: v[i] for k, v in data.items()} for i in range(len(prompts))]
        calls = [
            self._score(message_text(p), self.completion_text(c, ids), list(ids), row)
            for p, c, ids, row in zip(prompts, completions, completion_ids, rows, strict=True)
        ]
        return list(await asyncio.gather(*calls))

    async def _score(
        self, prompt: str, completion: str, ids: list[int], row: dict[str, Any]
    ) -> float | None:
        try:
            geometry = self.row_geometry(row)
            # Images stay out of the task data (the pool would pickle them): rewards get geometry.
            task_data = {k: v for k, v in row.items() if k != "image"}
            return await self.caller(prompt, completion, [], ids, task_data, geometry=geometry)
        except EpisodeRejected as e:
            if not self.rejected[e.reason]:
                logger.warning(
                    "%s: a completion scored None (%s: %s); later ones with this reason are "
                    "counted in .rejected",
                    self.__name__,
                    e.reason,
                    e.detail,
                )
            self.rejected[e.reason] += 1
            return None

    def completion_text(self, completion: Any, ids: Sequence[int]) -> str:
        """The text the reward reads (see the module docstring)."""
        if self.tokenizer is None:
            return message_text(completion)
        return completion_text(self.tokenizer, ids, self.stop_ids)

    def row_geometry(self, row: dict[str, Any]) -> list[dict[str, float]]:
        """A row's image geometry: its ``geometry`` column (a list, or one image's dict), else
        its images' (by their sizes)."""
        geometry = row.get("geometry")
        if isinstance(geometry, Mapping):
            return [dict(geometry)]
        if geometry is not None:
            return list(geometry)
        images = row.get("images")
        if images is None and row.get("image") is not None:
            images = row["image"]
        if images is not None and not isinstance(images, (list, tuple)):
            images = [images]  # a column of one image per row
        if not images or self.preprocessor is None:
            return []
        if not all(isinstance(im, Image.Image) for im in images):
            return image_geometry(images, self.preprocessor)
        # The processors resize by size alone: one preparation per distinct list of sizes, of
        # blank stand-ins, since transformers' processors take a PIL image's stored pixels as
        # they are while our image loading would apply its EXIF orientation.
        key = tuple(im.size for im in images)
        if key not in self._geometry:
            stand_ins = [Image.new("RGB", size) for size in key]
            self._geometry[key] = image_geometry(stand_ins, self.preprocessor)
        return self._geometry[key]


class AsyncTRLReward(TRLReward):
    """:class:`TRLReward` as a coroutine function: TRL awaits it beside its other async rewards."""

    async def __call__(  # type: ignore[override]
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        **columns: Any,
    ) -> list[float | None]:
        return await self.ascore(prompts, completions, completion_ids, **columns)
