"""The thread that owns the model: queues, continuous batching, prefill and decode steps.

Requests arrive from any thread or event loop through :meth:`DecodeWorker.submit`, which takes a
:class:`GenerationTask` whose ``future`` (a ``concurrent.futures.Future``) resolves when the
task is done. The worker admits pending tasks up to ``max_batch_size``, prefills them together
(left-padded; one at a time in deterministic mode, where ``max_batch_size`` is 1), merges their
KV caches into the running left-padded decode batch (:mod:`vlrollout.engine.batch`) and
decodes one token per row per step; finished rows leave at once. Control operations (weight
updates, offload) run between steps; those that change weights send the running tasks back to
the queue, to be prefilled again (prompt + tokens so far) with the new weights.

Speed (the tiny model on a CPU is bound by per-step overhead, so it is measured against
``model.generate`` in ``bench/bench_engine.py``): steps run under ``torch.inference_mode``; a
decode step calls the text decoder and LM head directly where a probe shows the model's own
logits (:mod:`vlrollout.engine.step_forward`), feeding tokens and positions kept as tensors; the
decode mask grows in place and reaches SDPA models as a prepared 4-D mask; an idle worker waits
a moment for requests submitted together so they share one prefill.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from vlrollout import image_sharing
from vlrollout.compat.transformers import DynamicCache, attn_implementation, growing_cache
from vlrollout.engine.batch import (
    MaskBuffer,
    as_growing,
    can_merge,
    drop_rows,
    merge_caches,
    select_rows,
)
from vlrollout.engine.inputs import PreparedInputs, prompt_positions, uses_mrope
from vlrollout.engine.prefill_memo import PrefillMemo, same_inputs
from vlrollout.engine.sampling import SamplingParams, sample_batch, top_logprobs
from vlrollout.engine.step_forward import CompiledStep, DirectStep, FullStep, choose_step
from vlrollout.families import family_of

_STOP_TEXT_WINDOW = 64  # tokens decoded from the tail of the completion to look for stop strings
# Requests submitted together (``asyncio.gather``, a GRPO group) reach the queue a fraction of a
# millisecond apart, or each after its own preparation (see DecodeWorker.arrival). An idle worker
# waits while they keep coming or are being prepared, so they are prefilled in one forward
# instead of the first alone and the rest one step later; a lone request waits one gap.
_ARRIVAL_GAP_S = 0.001
_ARRIVAL_MAX_S = 0.02
_ARRIVAL_PAUSES = 3  # process-wide pauses (a garbage collection) forgiven while waiting
# A prefill has a fixed cost of a few decode steps (one more forward, a cache merge), while a free
# row in a decode step costs almost nothing. So while rows are running, queued requests are
# admitted in groups of a quarter of the batch (or all of a shorter queue), and no later than
# this many decode steps after a row fell free for them.
_ADMIT_MAX_WAIT_STEPS = 8
# Spare KV-cache columns per layer: decode steps append in place, and the buffers grow by this
# many columns when full (one copy per layer every that many steps, instead of one per step).
_CACHE_GROW = 64


def distinct_rows(tasks: list[Any], rows: list[list[int]]) -> list[int]:
    """For each task, the index of the first task with the same prefill row: the same tokens
    and the same prompt inputs (the same object, or equal token types and vision tensors)."""
    source: list[int] = []
    seen: dict[tuple[int, ...], list[int]] = {}
    for i, (task, row) in enumerate(zip(tasks, rows, strict=True)):
        same = seen.setdefault(tuple(row), [])
        match = next((j for j in same if same_inputs(tasks[j].inputs, task.inputs)), None)
        if match is None:
            same.append(i)
            match = i
        source.append(match)
    return source


def _joined_vision(inputs: list[PreparedInputs]) -> dict[str, torch.Tensor]:
    """The vision tensors of a prefill's rows, concatenated on their first dimension; a single
    row's own tensors, uncopied (a prompt of 4,096 Qwen2-VL image tokens has 77 MB of float32
    patch rows, and a copy of them would be that much more peak memory)."""
    if len(inputs) == 1:
        return dict(inputs[0].vision)
    return {key: torch.cat([i.vision[key] for i in inputs]) for key in inputs[0].vision}


@dataclass(eq=False)
class GenerationTask:
    """One request in flight, and its growing completion.

    ``out_tokens``/``out_logprobs``/``out_versions`` grow by one entry per sampled token;
    ``stop_reason`` is set when the task finishes. Timings are ``time.perf_counter()`` values.
    """

    inputs: PreparedInputs
    params: SamplingParams
    tokenizer: Any = None
    rid: str = ""
    generator: torch.Generator | None = None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    rope_delta: int = 0
    out_tokens: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    out_versions: list[int] = field(default_factory=list)
    counts: collections.Counter = field(default_factory=collections.Counter)
    out_top: list[list[tuple[int, float]]] = field(default_factory=list)
    stop_reason: str | None = None
    t_first: float | None = None
    t_last: float | None = None
    itl: list[float] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.inputs.input_ids) + len(self.out_tokens)


def _resolve(
    fut: concurrent.futures.Future, result: Any = None, error: BaseException | None = None
):
    if fut.done():
        return
    try:
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile
        pass


class DecodeWorker:
    """Runs generation for :class:`GenerationTask` objects on one background thread.

    Args:
        model: The model, already on ``device`` and in eval mode.
        device: Where inputs are built.
        max_batch_size: Rows decoded together.
        banned: Token ids never sampled (vision placeholders).
        generator: Sampling generator for tasks without their own.
        version: Returns the weight version stamped on each sampled token.
        compile: Decode through a ``torch.compile``d step (see ``step_forward``), compiled
            here, on the constructing thread: construct on one that lives as long as the
            process (the main thread).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        max_batch_size: int,
        banned: frozenset[int],
        generator: torch.Generator,
        version: Callable[[], int],
        compile: bool = False,
    ):
        self.model = model
        self.device = device
        self.max_batch_size = max_batch_size
        self.banned = banned
        self.generator = generator
        self.version = version
        self.stats: collections.Counter = collections.Counter()
        self._family = family_of(model.config)
        self._mrope = uses_mrope(model)
        self._cond = threading.Condition()
        self._step_lock = threading.Lock()  # held while computing
        self._pending: collections.deque[GenerationTask] = collections.deque()
        self._preparing = 0  # requests between arrival() and their submit
        self._controls: collections.deque = collections.deque()
        self._paused = False
        self._halted = False  # offloaded: wait for onload
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._active: list[GenerationTask] = []
        self._cache = None
        self._mask: MaskBuffer | None = None
        # [rows, 1] int64: the token each running row feeds in the next decode step, and its
        # position (its index in the sequence, shifted by the M-RoPE delta of the prompt's
        # images); kept as tensors, so a step builds no inputs from Python lists.
        self._next_ids: torch.Tensor | None = None
        self._next_pos: torch.Tensor | None = None
        self._admit_rows = max(1, max_batch_size // 4)
        self._waited_steps = 0  # decode steps run while a free row and a queued request waited
        # Transformers' SDPA path takes a prepared 4-D mask as-is (see MaskBuffer); not for
        # sliding-window layers, whose window the model would then no longer apply.
        text_config = model.config.get_text_config(decoder=True)
        mergeable = can_merge(DynamicCache(config=model.config))
        self._sdpa = attn_implementation(text_config) == "sdpa" and mergeable
        self._mask_dtype = model.get_input_embeddings().weight.dtype  # the queries' dtype
        # Chosen by a probe forward (see step_forward) in start(); a compiled one here and now,
        # on the caller's thread (with torch 2.10, state left by compiling on a thread that
        # later ends crashes later backwards and FSDP set-up).
        self._step_forward: FullStep | DirectStep | CompiledStep | None = None
        if compile:
            self._step_forward = choose_step(model, device, self._mrope, self._sdpa, True)
        # Caches that append in place (see batch.py); a compiled step keeps plain ones, whose
        # one memory layout its graph was compiled for.
        self._grow = _CACHE_GROW if mergeable and not compile else 0
        # Whether the model's own prefill makes a plain full-attention DynamicCache (some
        # families make their own cache class): learnt at the first prefill, which then
        # converts its cache; later prefills write into a growing cache directly.
        self._plain_cache: bool | None = None
        # One request at a time: the last prefill, for the next request of its prompt.
        self._memo: PrefillMemo | None = None

    # ---------------------------------------------------------------- called from other threads
    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Choose the decode step (its probe: a few forwards, seconds for a 2B model on a CPU)
        unless chosen, then start the thread: the first request's decode runs no probe."""
        if self._step_forward is None:
            self._step_forward = choose_step(self.model, self.device, self._mrope, self._sdpa)
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="DecodeWorker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread; queued and running tasks fail with ``RuntimeError``."""
        if self._thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        self._thread = None
        error = RuntimeError("The engine was destroyed before the request finished.")
        for task in [*self._pending, *self._active]:
            _resolve(task.future, error=error)
        for _, _, fut in self._controls:
            _resolve(fut, error=error)
        self._pending.clear()
        self._controls.clear()
        self._reset_batch()

    def submit(self, task: GenerationTask) -> concurrent.futures.Future:
        with self._cond:
            self._pending.append(task)
            self._cond.notify_all()
        return task.future

    @contextlib.contextmanager
    def arrival(self) -> Iterator[Callable[[GenerationTask], concurrent.futures.Future]]:
        """A request on its way to the queue while it is prepared (its tensors made, its images
        decoded): an idle worker waits for it as for one that arrived, so a burst whose requests
        each take longer than the arrival gap to prepare still shares one prefill. Yields the
        ``submit`` to call once prepared; leaving without calling it ends the arrival too."""
        open_ = True

        def submit(task: GenerationTask) -> concurrent.futures.Future:
            nonlocal open_
            with self._cond:  # re-entrant: the arrival ends as its task is queued
                self._preparing, open_ = self._preparing - 1, False
                return self.submit(task)

        with self._cond:
            self._preparing += 1
        try:
            yield submit
        finally:
            if open_:
                with self._cond:
                    self._preparing -= 1
                    self._cond.notify_all()

    def control(
        self, fn: Callable[[], Any], invalidates: bool, halt: bool | None = None
    ) -> concurrent.futures.Future:
        """Run ``fn`` on the worker between steps.

        Args:
            fn: The operation; its return value resolves the future.
            invalidates: ``fn`` changes the weights or moves the model, so running tasks must
                be prefilled again.
            halt: If not ``None``, afterwards stop (``True``) or resume (``False``) generating.
        """
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run():
            result = fn()
            if halt is not None:
                self._halted = halt
            return result

        with self._cond:
            self._controls.append((run, invalidates, fut))
            self._cond.notify_all()
        return fut

    def abort(self, rids: set[str] | None = None) -> concurrent.futures.Future:
        """Finish queued and running tasks now with ``stop_reason="abort"``, keeping the tokens
        generated so far (SGLang's abort); ``rids`` limits it to those request ids.

        The future resolves to the number of tasks aborted; it runs between steps, also while
        paused.
        """

        def run() -> int:
            def hit(task: GenerationTask) -> bool:
                return rids is None or task.rid in rids

            with self._cond:
                queued = [t for t in self._pending if hit(t)]
                for t in queued:
                    self._pending.remove(t)
            keep = [i for i, t in enumerate(self._active) if not hit(t)]
            running = [t for t in self._active if hit(t)]
            if running:
                self._select(keep)
            for task in [*running, *queued]:
                task.stop_reason = "abort"
                _resolve(task.future)
            return len(running) + len(queued)

        return self.control(run, invalidates=False)

    def pause(self) -> None:
        """Stop between decode steps; returns once the worker is idle."""
        with self._cond:
            self._paused = True
        with self._step_lock:
            pass

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    # ---------------------------------------------------------------- worker thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                if not (self._active or self._pending):  # kept image features serve a busy
                    image_sharing.forget(self.model)  # engine's later admissions, no idle one
                while not (self._stopping or self._controls or self._has_work()):
                    self._cond.wait()
                if self._stopping:
                    return
                if not self._active and not self._controls and self.max_batch_size > 1:
                    self._await_arrivals()  # releases the condition while it waits
                    if self._stopping:
                        return
                    if not (self._controls or self._has_work()):
                        continue  # paused meanwhile
                controls = list(self._controls)
                self._controls.clear()
                # Taken before the condition is released, so a pause() that comes after the
                # checks above waits for this step: pause returns only once the worker is idle.
                self._step_lock.acquire()
            try:
                if controls:
                    self._run_controls(controls)
                    continue
                self._admit()
                if self._active:
                    self._decode_step()
            finally:
                self._step_lock.release()

    def _await_arrivals(self) -> None:
        """With the condition held and no running rows: wait while more requests keep arriving
        (each within ``_ARRIVAL_GAP_S`` of the last) or are being prepared, ``_ARRIVAL_MAX_S``
        in all."""
        deadline, pauses = time.perf_counter() + _ARRIVAL_MAX_S, 0
        while (
            self._has_work()
            and len(self._pending) < self.max_batch_size
            and not (self._controls or self._stopping)
            and time.perf_counter() < deadline
        ):
            before, start = len(self._pending), time.perf_counter()
            self._cond.wait(_ARRIVAL_GAP_S)
            waited = time.perf_counter() - start
            if waited > 2 * _ARRIVAL_GAP_S and pauses < _ARRIVAL_PAUSES:
                # The whole process stood still (a garbage collection, the OS): so did whoever
                # was submitting, so this was no quiet gap. Wait again, the pause not counted.
                deadline, pauses = deadline + waited, pauses + 1
                continue
            if len(self._pending) == before and not self._preparing:
                return

    def _has_work(self) -> bool:
        return not (self._paused or self._halted) and bool(self._pending or self._active)

    def _run_controls(self, controls) -> None:
        for fn, invalidates, fut in controls:
            if invalidates:
                image_sharing.forget(self.model)  # features of the weights before
                self._memo = None
            if invalidates and self._active:
                with self._cond:
                    self._pending.extendleft(reversed(self._active))
                self._reset_batch()
            try:
                with torch.no_grad():
                    _resolve(fut, fn())
            except Exception as e:  # reported to whoever waits on the future
                _resolve(fut, error=e)

    def _reset_batch(self) -> None:
        self._active, self._cache, self._mask = [], None, None
        self._next_ids = self._next_pos = None

    @torch.inference_mode()
    def _select(self, keep: list[int]) -> None:
        """Keep only the running rows ``keep`` (indices into ``self._active``); none: reset."""
        if not keep:
            self._reset_batch()
            return
        if self._grow:  # finished rows' places taken by the last rows: no whole-cache copy
            self._cache, mask, order = drop_rows(self._cache, self._mask.mask, keep)
        else:
            (self._cache, mask), order = select_rows(self._cache, self._mask.mask, keep), keep
        self._mask = MaskBuffer(mask)
        self._active = [self._active[i] for i in order]
        index = torch.tensor(order, device=self.device)
        self._next_ids, self._next_pos = self._next_ids[index], self._next_pos[index]

    def _admission_due(self) -> bool:
        """Whether to prefill queued tasks now (see ``_ADMIT_MAX_WAIT_STEPS``)."""
        free = self.max_batch_size - len(self._active)
        if not self._active:
            return True
        if free <= 0 or not self._pending:
            self._waited_steps = 0
            return False
        if free >= min(len(self._pending), self._admit_rows):
            return True
        self._waited_steps += 1
        return self._waited_steps > _ADMIT_MAX_WAIT_STEPS

    def _admit(self) -> None:
        """Take queued tasks up to ``max_batch_size`` rows and prefill them together."""
        with self._cond:
            if not self._admission_due():
                return
            self._waited_steps = 0
            tasks = []
            while self._pending and len(self._active) + len(tasks) < self.max_batch_size:
                task = self._pending.popleft()
                if not task.future.cancelled():
                    tasks.append(task)
        groups: dict[tuple, list[GenerationTask]] = {}
        for task in tasks:  # one forward needs vision inputs that concatenate over its rows
            groups.setdefault(self._batch_key(task.inputs), []).append(task)
        for group in groups.values():
            try:
                self._prefill(group)
            except Exception as e:  # find the request(s) at fault; the others still run
                if len(group) == 1:
                    _resolve(group[0].future, error=e)
                    continue
                for task in group:
                    try:
                        self._prefill([task])
                    except Exception as e1:
                        _resolve(task.future, error=e1)

    @staticmethod
    def _batch_key(inputs: PreparedInputs) -> tuple:
        """Requests with equal keys prefill in one forward: the same vision inputs, each with
        the same shape past its first dimension, so they concatenate on it (images or patches
        for most families, sequences for Idefics3's ``[1, tiles, C, H, W]``)."""
        return tuple(sorted((k, tuple(v.shape[1:])) for k, v in inputs.vision.items()))

    def _token_types(self, tasks: list[GenerationTask], length: int) -> dict[str, torch.Tensor]:
        """The family's per-token modality input for a left-padded prefill (``{}`` when the
        family takes none in the forward, or positions already carry it, as with M-RoPE)."""
        name = self._family.token_types_input
        if name is None or self._mrope or not tasks[0].inputs.vision:
            return {}
        rows = []
        for task in tasks:
            types = task.inputs.mm_token_type_ids.reshape(-1).to(self.device)
            n = len(task.inputs.input_ids) + len(task.out_tokens)
            rows.append(torch.nn.functional.pad(types, (length - n, n - types.shape[0])))
        return {name: torch.stack(rows)}

    @torch.inference_mode()
    def _prefill(self, tasks: list[GenerationTask]) -> None:
        """One forward over the prompts (+ tokens so far) of ``tasks``, left-padded to a common
        length; per-row positions come from each prompt alone, so padding only shifts columns.
        The new rows' caches then join the running decode batch.

        The episodes of a GRPO group send one prompt n times: each distinct row (same tokens,
        same images) is run once, and its cache and last logits serve every task that sent it
        (each still samples its own tokens)."""
        rows = [task.inputs.input_ids + task.out_tokens for task in tasks]
        source = distinct_rows(tasks, rows)
        firsts = sorted(set(source))  # each a first occurrence, so in the tasks' order
        run = [tasks[i] for i in firsts]
        run_rows = [rows[i] for i in firsts]
        length = max(len(r) for r in run_rows)
        mask = torch.tensor(
            [[0] * (length - len(r)) + [1] * len(r) for r in run_rows], device=self.device
        )
        logits, cache = self._prefill_forward(run, run_rows, mask)
        self.stats["prefills"] += len(tasks)
        slot = {task_index: n for n, task_index in enumerate(firsts)}
        row_of = [slot[i] for i in source]  # each task's row of the forward
        for task, i in zip(tasks, source, strict=True):
            task.rope_delta = tasks[i].rope_delta
        if len(run) < len(tasks):
            logits = logits[torch.tensor(row_of, device=logits.device)]
        tokens, done = self._sample(tasks, logits)
        keep = [i for i, d in enumerate(done) if not d]
        if not keep:
            return
        new = [tasks[i] for i in keep]
        mask, next_ids = mask.bool(), tokens.view(-1, 1)
        next_pos = torch.tensor([[t.length - 1 + t.rope_delta] for t in new], device=self.device)
        wanted = [row_of[i] for i in keep]
        if wanted != list(range(len(run))):
            cache, mask = select_rows(cache, mask, wanted, self._grow)
        if len(keep) < len(tasks):
            next_ids = next_ids[torch.tensor(keep, device=self.device)]
        if self._cache is not None:
            cache, mask = merge_caches(self._cache, self._mask.mask, cache, mask, self._grow)
            next_ids = torch.cat([self._next_ids, next_ids])
            next_pos = torch.cat([self._next_pos, next_pos])
            new = self._active + new
        self._active, self._cache, self._mask = new, cache, MaskBuffer(mask)
        self._next_ids, self._next_pos = next_ids, next_pos

    def _prefill_forward(
        self, run: list[GenerationTask], rows: list[list[int]], mask: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """The last logits ``[len(run), vocab]`` and the cache (as the decode batch keeps it) of
        one forward over ``rows`` (distinct, left-padded to ``mask``'s width), setting each
        task's ``rope_delta``. A
        one-row worker starts from its last prefill instead where that was the same row
        (:mod:`~vlrollout.engine.prefill_memo`)."""
        memo = self._memo
        if len(run) == 1 and memo is not None and memo.serves(rows[0], run[0].inputs):
            run[0].rope_delta = memo.rope_delta
            self.stats["prefills_reused"] += 1
            return memo.copies()
        length = mask.shape[1]
        ids = torch.tensor([[0] * (length - len(r)) + r for r in rows], device=self.device)
        positions = []
        for task, row in zip(run, rows, strict=True):
            pos, task.rope_delta = prompt_positions(
                self.model,
                torch.tensor([row], device=self.device),
                task.inputs.mm_token_type_ids,
                task.inputs.vision,
            )
            positions.append(torch.nn.functional.pad(pos, (length - len(row), 0), value=1))
        out = self.model(
            input_ids=ids,
            attention_mask=mask if len(run) > 1 else None,
            position_ids=torch.cat(positions, dim=-2),  # [3, B, L] (M-RoPE) or [B, L]
            past_key_values=growing_cache(self._grow) if self._grow and self._plain_cache else None,
            use_cache=True,
            logits_to_keep=1,
            **self._token_types(run, length),
            **_joined_vision([task.inputs for task in run]),
        )
        self.stats["prefill_batches"] += 1
        self.stats["prefill_rows_run"] += len(run)
        logits, cache = out.logits[:, -1], self._growing(out.past_key_values)
        if self.max_batch_size > 1:
            return logits, cache
        self._memo = PrefillMemo(tuple(rows[0]), run[0].inputs, run[0].rope_delta, logits, cache)
        return self._memo.copies()

    def _growing(self, cache: Any) -> Any:
        """A prefill's cache as the decode batch keeps it: see ``_plain_cache``."""
        if not self._grow or self._plain_cache:
            return cache
        self._plain_cache = type(cache) is DynamicCache and can_merge(cache)
        if not self._plain_cache:
            self._grow = 0  # the model's own cache class, kept as it is
            return cache
        return as_growing(cache, self._grow)

    @torch.inference_mode()
    def _decode_step(self) -> None:
        rows = len(self._active)
        try:
            pos = self._next_pos
            if self._mrope:
                pos = pos.view(1, rows, 1).expand(3, rows, 1)
            self._mask.add_column()
            if self._step_forward is None:
                self._step_forward = choose_step(self.model, self.device, self._mrope, self._sdpa)
            logits, self._cache = self._step_forward(
                self._next_ids, self._step_mask(), pos, self._cache
            )
            self.stats["decode_steps"] += 1
            self.stats["decode_rows"] += rows
            live = [i for i, t in enumerate(self._active) if not t.future.cancelled()]
            if len(live) == rows:  # the usual case: no row copies
                tokens, done = self._sample(self._active, logits)
                self._next_ids = tokens.view(rows, 1)
            elif live:  # cancelled rows leave below; their next token does not matter
                tokens, done = self._sample([self._active[i] for i in live], logits[live])
                self._next_ids[live] = tokens.view(-1, 1)
            else:
                done = []
            self._next_pos += 1
            keep = [i for i, d in zip(live, done, strict=True) if not d]
        except Exception as e:  # a model failure fails every task in the batch
            for task in self._active:
                _resolve(task.future, error=e)
            self._reset_batch()
            return
        if len(keep) < rows:
            self._select(keep)

    def _step_mask(self) -> torch.Tensor | None:
        """The decode step's mask: none for an SDPA model when no row has padding, so
        transformers' SDPA path reads grouped key/value heads in place (``enable_gqa``, as in
        ``generate``) instead of copying them for every query head in every layer, which it
        does whenever a mask is given; the prepared 4-D mask otherwise (and always for a
        compiled step, whose graph takes one); the 2-D mask for other attention."""
        if not self._sdpa:
            return self._mask.mask
        if not self._mask.padded and not isinstance(self._step_forward, CompiledStep):
            return None
        return self._mask.for_sdpa(self._mask_dtype)

    def _sample(
        self, tasks: list[GenerationTask], logits: torch.Tensor
    ) -> tuple[torch.Tensor, list[bool]]:
        """Sample one token per task from ``[len(tasks), vocab]`` logits: the ``[len(tasks)]``
        tokens, and per task whether it finished."""
        tokens, logprobs = sample_batch(
            logits,
            [t.params for t in tasks],
            self.banned,
            [len(t.out_tokens) for t in tasks],
            [t.counts for t in tasks],
            [t.generator for t in tasks],
            self.generator,
        )
        now, version = time.perf_counter(), self.version()
        done = []
        for i, task in enumerate(tasks):
            if task.params.top_logprobs:
                task.out_top.append(top_logprobs(logits[i], task.params))
        for task, token, logprob in zip(tasks, tokens.tolist(), logprobs.tolist(), strict=True):
            if task.t_first is None:
                task.t_first = now
            else:
                task.itl.append(now - task.t_last)
            task.t_last = now
            task.out_tokens.append(token)
            task.out_logprobs.append(logprob)
            task.out_versions.append(version)
            p = task.params
            if p.frequency_penalty:
                task.counts[token] += 1
            n = len(task.out_tokens)
            # The common case in one comparison: not yet at the length limit, no stop token and
            # no stop string possible.
            if n < p.max_new_tokens and token not in p.stop_token_ids and not p.stop:
                done.append(False)
            else:
                done.append(self._check_finished(task, token))
        self.stats["tokens"] += len(tasks)
        return tokens, done

    def _check_finished(self, task: GenerationTask, token: int) -> bool:
        p, n = task.params, len(task.out_tokens)
        if n >= p.min_new_tokens and (token in p.stop_token_ids or self._hit_stop_string(task)):
            task.stop_reason = "stop"
        elif n >= p.max_new_tokens:
            task.stop_reason = "length"
        else:
            return False
        _resolve(task.future)
        return True

    @staticmethod
    def _hit_stop_string(task: GenerationTask) -> bool:
        if not task.params.stop or task.tokenizer is None:
            return False
        # A token is at least one byte of text: a window of 4 tokens per character (UTF-8's
        # longest) holds the whole of the longest stop string.
        window = max(_STOP_TEXT_WINDOW, 4 * max(map(len, task.params.stop)) + 1)
        tail = task.out_tokens[-window:]
        skip = task.params.stop_skips_special
        text = task.tokenizer.decode(tail, skip_special_tokens=skip)
        before = task.tokenizer.decode(tail[:-1], skip_special_tokens=skip)
        # Only a stop string that ends in the newest token's text counts (an earlier one fell
        # before min_new_tokens).
        return any(
            s and text.find(s, max(0, len(before) - len(s) + 1)) != -1 for s in task.params.stop
        )
