"""An AReaL ``InferenceEngine`` that generates with a transformers model in this process.

``LocalInferenceEngine`` serves ``agenerate(ModelRequest) -> ModelResponse`` on CPU or one GPU,
for tests, demos and small-scale RL without an SGLang/vLLM server. Images reach the model from
``req.metadata["multi_modal_input"]`` (the trainer's tensors, so engine and trainer see the same
pixels) or, failing that, from ``req.image_data`` through the processor (see
:mod:`vlrollout.engine.inputs`). Sampling and the logprob convention are in
:mod:`vlrollout.engine.sampling`.

Concurrency: one worker thread owns the model. ``agenerate`` (from any event loop, including
the background loop of AReaL's ``WorkflowExecutor``) puts the request in a thread-safe queue and
awaits a ``concurrent.futures.Future``, so the event loop never runs model code. The worker
batches up to ``max_batch_size`` sequences: those admitted together are prefilled in one
forward, then join a left-padded decode batch (:mod:`vlrollout.engine.batch`); new requests
join between decode steps and finished ones leave (continuous batching). While rows are running,
queued requests are admitted a quarter of the batch at a time (a prefill costs a few decode
steps, an idle row almost nothing), never later than 8 steps after a row fell free for them.
``max_batch_size=1`` serialises requests.

Weight updates, offload and onload run on the worker between decode steps. After new weights
the in-flight sequences are prefilled again (prompt + tokens so far) with the new weights, like
SGLang's abort-and-resubmit, so later tokens come from the new weights and carry the version
set by ``set_version``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

import torch
from areal.api.engine_api import InferenceEngine
from areal.api.io_struct import ModelRequest, ModelResponse, WeightUpdateMeta

from vlrollout import image_sharing
from vlrollout.compat.transformers import DynamicCache
from vlrollout.engine import patch_embed
from vlrollout.engine.batch import can_merge
from vlrollout.engine.determinism import RequestKeys, dispatch_input_device
from vlrollout.engine.in_flight import InFlightInputs
from vlrollout.engine.inputs import check_token_ids, placeholder_token_ids, prepare_inputs
from vlrollout.engine.sampling import SamplingParams
from vlrollout.engine.worker import DecodeWorker, GenerationTask
from vlrollout.errors import EngineNotInitialized
from vlrollout.families import context_length, family_of
from vlrollout.logs import get_logger

logger = get_logger(__name__)

IMAGE_MEMO_BYTES = 256 << 20
"""Bytes of image features (and their patch rows) the engine keeps for later prefills of the
same images (:class:`vlrollout.image_sharing.FeatureMemo`): only while the engine is busy
(dropped when it has no request left), and dropped whenever the engine changes the weights or
moves the model. Weights written into ``engine.model`` by other code are not
seen: call :func:`vlrollout.image_sharing.forget` after doing so."""


def _split_processor(obj: Any) -> tuple[Any, Any]:
    """``(processor, tokenizer)`` from a processor or a bare tokenizer."""
    if obj is None:
        return None, None
    if hasattr(obj, "image_processor") and hasattr(obj, "tokenizer"):
        return obj, obj.tokenizer
    return None, obj


@dataclasses.dataclass
class LocalModelResponse(ModelResponse):
    """AReaL's ``ModelResponse`` plus what the local engine reports beyond it.

    Attributes:
        top_logprobs: Per generated token, the most likely ``(token id, logprob)`` pairs, when
            the request asked for them (``metadata["top_logprobs"]``); else empty.
    """

    top_logprobs: list[list[tuple[int, float]]] = dataclasses.field(default_factory=list)


class LocalInferenceEngine(InferenceEngine):
    """Generate with a transformers (vision-)language model in-process.

    Args:
        model: A causal LM or image-text-to-text model (e.g. ``Qwen2VLForConditionalGeneration``).
            It is moved to ``device`` and put in eval mode; a family
            :mod:`vlrollout.image_sharing` knows gets its image encoding wrapped so that a
            forward encodes each distinct image once (the same outputs), and its patch
            convolutions embed pre-cut patches with a matrix product
            (:mod:`~vlrollout.engine.patch_embed`: the same outputs up to float rounding).
        processor_or_tokenizer: The processor (used for ``req.image_data`` and placeholder ids)
            or a tokenizer (text-only); requests may carry their own.
        device: ``"cpu"`` or one GPU, e.g. ``"cuda:0"``.
        max_batch_size: Sequences decoded together; 1 serialises requests.
        seed: Seed of the engine's sampling generator (requests may pass ``metadata["seed"]``).
        banned_token_ids: Extra token ids never to sample, besides the vision placeholders.
        deterministic: Make every completion a function of (request, ``seed``) alone, whatever
            else is in flight or when it arrives (see :mod:`vlrollout.engine.determinism`):
            each request samples from its own generator seeded from ``seed`` and a digest of its
            content, and sequences run one at a time (``max_batch_size`` becomes 1), so no
            batch composition can change a floating-point result. Costs the batching speed-up.
        compile_decode: Decode through ``torch.compile`` (inductor; on a CPU it needs a C++
            compiler): much less per-step overhead for small models, at the price of compiling
            here, in the constructor, on the calling thread (tens of seconds on a CPU; build
            the engine on the main thread: with torch 2.10, compiling on a thread that later
            ends breaks later backwards and FSDP set-up in the process). Taken only where the
            compiled step's logprobs agree with the model's own (see
            :mod:`vlrollout.engine.step_forward`); otherwise, or if compiling fails, the engine
            warns and decodes uncompiled.

    A model already dispatched by accelerate (loaded with ``device_map``, see
    :meth:`from_pretrained`) stays where it is; inputs go to the device of its first module.

    >>> import asyncio
    >>> from areal.api.io_struct import ModelRequest
    >>> from areal.api.cli_args import GenerationHyperparameters
    >>> from vlrollout.testing.tiny_model import tiny_qwen2vl
    >>> model, processor = tiny_qwen2vl()
    >>> with LocalInferenceEngine(model, processor) as engine:
    ...     req = ModelRequest(input_ids=[1, 100, 101], gconfig=GenerationHyperparameters(
    ...         max_new_tokens=4, min_new_tokens=4, greedy=True))
    ...     resp = asyncio.run(engine.agenerate(req))
    >>> len(resp.output_tokens), resp.stop_reason, resp.output_versions
    (4, 'length', [0, 0, 0, 0])
    """

    reads_multi_modal_input = True
    """Requests carrying ``metadata["multi_modal_input"]`` are answered from those tensors: a
    workflow need not encode their ``image_data`` ahead (it is read only without them)."""

    def __init__(
        self,
        model: torch.nn.Module,
        processor_or_tokenizer: Any = None,
        device: str | torch.device = "cpu",
        *,
        max_batch_size: int = 8,
        seed: int = 0,
        banned_token_ids: tuple[int, ...] | list[int] = (),
        deterministic: bool = False,
        compile_decode: bool = False,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}.")
        if getattr(model, "hf_device_map", None):  # dispatched by accelerate: do not move it
            self.device = dispatch_input_device(model.hf_device_map)
            self.model = model.eval()
        else:
            self.device = torch.device(device)
            self.model = model.to(self.device).eval()
        self.deterministic = deterministic
        self.seed = seed
        self._request_keys = RequestKeys()
        # The requests of a GRPO group share one prompt (the same multi_modal_input object):
        # prepared once, they reach the queue together and prefill in one batch.
        self._in_flight = InFlightInputs()
        if deterministic:
            max_batch_size = 1
        self.processor, self.tokenizer = _split_processor(processor_or_tokenizer)
        family = family_of(model.config)  # refuses a family the engine cannot feed
        # A group's requests share their image: its prefill encodes the image once, and a
        # later prefill of the same image (a group larger than the free rows) reuses it.
        image_sharing.install(self.model, memo_bytes=IMAGE_MEMO_BYTES)
        patch_embed.install(self.model)  # pre-cut image patches: a matmul, not oneDNN's Conv3d
        if max_batch_size > 1 and family.one_row_decode:
            logger.warning(
                "%s: %s; requests run one at a time (max_batch_size=1).",
                type(model).__name__,
                family.one_row_decode,
            )
            max_batch_size = 1
        if max_batch_size > 1 and not can_merge(DynamicCache(config=model.config)):
            logger.warning(
                "%s has sliding-window attention layers, whose caches cannot be merged into a "
                "decode batch: requests run one at a time (max_batch_size=1).",
                type(model).__name__,
            )
            max_batch_size = 1
        self.max_batch_size = max_batch_size
        self._dtype = next(model.parameters()).dtype

        banned = placeholder_token_ids(model.config, self.processor, self.tokenizer)
        banned.update(int(t) for t in banned_token_ids)
        vocab = model.get_output_embeddings().weight.shape[0]
        self.banned_token_ids = frozenset(t for t in banned if 0 <= t < vocab)
        self.input_vocab_size = model.get_input_embeddings().num_embeddings
        self.context_len = context_length(model.config)

        eos: set[int] = set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos.update([gen_eos] if isinstance(gen_eos, int) else (gen_eos or []))
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(eos)

        self._version = 0
        self._version_lock = threading.Lock()
        self._workflow_executor = None
        # Disk updates waiting for their trainer (update_weights_from_disk); destroy() stops them.
        self._disk_update_threads: set[threading.Thread] = set()
        self._destroying = threading.Event()
        self._worker = DecodeWorker(
            self.model,
            self.device,
            max_batch_size,
            banned=self.banned_token_ids,
            generator=torch.Generator(device=self.device).manual_seed(seed),
            version=self.get_version,
            compile=compile_decode,
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path: str,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = "auto",
        *,
        device_map: str | dict[str, Any] | None = None,
        max_memory: dict[int | str, int | str] | None = None,
        offload_folder: str | None = None,
        **kwargs: Any,
    ) -> LocalInferenceEngine:
        """Load a model and its processor (or tokenizer) from a local directory.

        Models with a ``vision_config`` load with ``AutoModelForImageTextToText``, others with
        ``AutoModelForCausalLM``; nothing is downloaded (``local_files_only=True``). ``kwargs``
        go to the constructor.

        ``device_map`` (e.g. ``"auto"``), ``max_memory`` (e.g. ``{0: "20GiB", "cpu": "64GiB"}``)
        and ``offload_folder`` go to transformers' ``from_pretrained``, which lets accelerate
        place the layers over GPUs, CPU and disk for a model bigger than one device; ``device``
        is then ignored. Weight updates and ``offload()`` expect an undispatched model.
        """
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForImageTextToText,
            AutoProcessor,
            AutoTokenizer,
        )

        config = AutoConfig.from_pretrained(path, local_files_only=True)
        auto = (
            AutoModelForImageTextToText
            if hasattr(config, "vision_config")
            else AutoModelForCausalLM
        )
        placement = {}
        if device_map is not None:  # accelerate spreads the layers over devices, CPU and disk
            placement = {"device_map": device_map, "max_memory": max_memory}
            if offload_folder is not None:
                placement["offload_folder"] = str(offload_folder)
        model = auto.from_pretrained(path, dtype=dtype, local_files_only=True, **placement)
        try:
            proc = AutoProcessor.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, TypeError):
            proc = AutoTokenizer.from_pretrained(path, local_files_only=True)
        return cls(model, proc, device=device, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def initialize(self, config: Any = None, train_data_parallel_size: int | None = None):
        """Start the worker thread; with an ``InferenceEngineConfig``, also AReaL's
        ``WorkflowExecutor`` so ``submit``/``wait``/``rollout_batch``/``prepare_batch`` work.
        """
        self._worker.start()
        if config is not None and self._workflow_executor is None:
            from areal.utils import logging as areal_logging

            from vlrollout.compat.areal import WorkflowExecutor

            if config.experiment_name and config.trial_name:
                self.configure_disk_updates(config.experiment_name, config.trial_name)
            self._workflow_executor = WorkflowExecutor(config=config, inference_engine=self)
            self._workflow_executor.initialize(
                logger=areal_logging.getLogger("LocalInferenceEngine"),
                train_data_parallel_size=train_data_parallel_size,
            )
        return self

    def destroy(self):
        """Stop the worker; requests still queued or running fail with ``RuntimeError``.

        Disk weight updates still waiting for their trainer stop waiting (their futures raise
        ``RuntimeError``) and their threads are joined first, while the worker can still finish
        a load already under way; no thread of this engine outlives the call.
        """
        self._destroying.set()
        for thread in list(self._disk_update_threads):
            thread.join()
        if self._workflow_executor is not None:
            self._workflow_executor.destroy()
            self._workflow_executor = None
        self._worker.stop()
        self._destroying.clear()  # the engine may be initialized again

    def __enter__(self) -> LocalInferenceEngine:
        return self.initialize()

    def __exit__(self, *exc) -> None:
        self.destroy()

    @property
    def initialized(self) -> bool:
        return self._worker.running

    def set_version(self, version: int) -> None:
        with self._version_lock:
            self._version = version

    def get_version(self) -> int:
        with self._version_lock:
            return self._version

    def export_stats(self) -> dict[str, float]:
        """The workflows' scalar statistics (AReaL's ``stats_tracker``), as remote engines do."""
        from areal.utils import stats_tracker

        return stats_tracker.export_all(reduce_group=None)

    def stats(self) -> dict[str, int]:
        """Counters: ``prefills``, ``prefill_batches`` (prefill forwards), ``prefills_reused``
        (prefills that started from the previous one's copy, one request at a time),
        ``decode_steps``, ``decode_rows`` (rows summed over steps), ``tokens``;
        ``decode_rows / decode_steps`` is the mean decode batch size."""
        return dict(self._worker.stats)

    # ------------------------------------------------------------------ generation
    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """Generate one completion for ``req`` (safe to call concurrently, from any loop).

        The response carries ``input_tokens = req.input_ids``; ``output_tokens`` including the
        stop token when ``stop_reason == "stop"`` (as SGLang returns them), ``"length"`` when
        ``max_new_tokens`` (or ``max_tokens``) ran out; ``output_logprobs`` in AReaL's
        convention (:mod:`vlrollout.engine.sampling`); ``output_versions``: the engine's
        version when each token was sampled; ``latency``, ``ttft`` and ``itl`` in seconds;
        the request's tokenizer and processor, or the engine's. With
        ``req.metadata["top_logprobs"] = k`` the response's ``top_logprobs`` holds, per generated
        token, the ``k`` most likely ``(token id, logprob)`` pairs.

        Raises:
            EngineNotInitialized: The engine is not initialized (a ``RuntimeError``).
            PlaceholderMismatchError: Image placeholders in ``req.input_ids`` disagree with the
                images (a ``ValueError``).
            ValueError: Bad generation settings (``n_samples != 1``, no room for new tokens).
        """
        if not self.initialized:
            raise EngineNotInitialized("Call LocalInferenceEngine.initialize() before agenerate().")
        start = time.perf_counter()
        seed = (req.metadata or {}).get("seed")
        if seed is None and self.deterministic:  # before any await: arrival order of twins
            seed = self._request_keys.seed_for(self.seed, req)
        args = (req, self.processor, self.model.config, self.device, self._dtype)
        key = None
        try:
            with self._worker.arrival() as submit:  # an idle worker waits for it meanwhile
                if not (req.metadata or {}).get("multi_modal_input") and req.image_data:
                    inputs = await asyncio.to_thread(prepare_inputs, *args)  # decode, resize
                else:
                    key, inputs = self._in_flight.acquire(args)
                task = self._task(req, inputs, seed)
                future = submit(task)
            await asyncio.wrap_future(future)
        finally:
            self._in_flight.release(key)
        end = time.perf_counter()
        return LocalModelResponse(
            top_logprobs=task.out_top,
            input_tokens=list(req.input_ids),
            output_tokens=task.out_tokens,
            output_logprobs=task.out_logprobs,
            output_versions=task.out_versions,
            stop_reason=task.stop_reason,
            tokenizer=req.tokenizer or self.tokenizer,
            # Requests that carry the tensors may encode images lazily: not read here.
            input_images=[] if getattr(req, "images_unread", False) else list(req.image_data or []),
            processor=req.processor or self.processor,
            latency=end - start,
            ttft=(task.t_first or end) - start,
            itl=task.itl,
        )

    def _task(self, req: ModelRequest, inputs: Any, seed: int | None) -> GenerationTask:
        """The worker's task for ``req``, its prompt prepared as ``inputs``."""
        check_token_ids(inputs.input_ids, self.input_vocab_size)
        params = SamplingParams.from_gconfig(
            req.gconfig,
            len(inputs.input_ids),
            self.eos_token_ids,
            seed=seed,
            context_len=self.context_len,
        )
        top = int((req.metadata or {}).get("top_logprobs") or 0)
        if top:
            params = dataclasses.replace(params, top_logprobs=top)
        if (req.metadata or {}).get("stop_skips_special"):
            params = dataclasses.replace(params, stop_skips_special=True)
        return GenerationTask(
            inputs=inputs,
            params=params,
            tokenizer=req.tokenizer or self.tokenizer,
            rid=str(req.rid),
            generator=(
                torch.Generator(device=self.device).manual_seed(int(seed))
                if seed is not None
                else None
            ),
        )

    # ------------------------------------------------------------------ weights and control
    def sampling_state(self) -> dict[str, int]:
        """In deterministic mode, each prompt's count of requests so far (which of its draws
        comes next); a checkpoint saves it so a resumed run draws as the uninterrupted one."""
        return self._request_keys.state_dict()

    def load_sampling_state(self, state: dict[str, int]) -> None:
        """Continue the deterministic draws from :meth:`sampling_state` of an earlier process."""
        self._request_keys.load_state_dict(state)

    def pause_generation(self):
        """Stop decoding between steps; returns once the worker is idle.

        Weight updates still run while paused; running requests resume after
        :meth:`continue_generation`.
        """
        self._worker.pause()

    def continue_generation(self):
        self._worker.resume()

    def abort_requests(self, rids: set[str] | None = None) -> concurrent.futures.Future:
        """End queued and running requests now (all, or those whose ``req.rid`` is in ``rids``).

        Their ``agenerate`` returns ``stop_reason="abort"`` with the tokens generated so far, as
        SGLang's abort does; AReaL's remote client then resends prompt + those tokens. Works
        while paused. The future resolves to the number of requests aborted.
        """
        self._require_initialized()
        return self._worker.abort(rids)

    def update_weights_from_state_dict(
        self, state_dict: dict[str, torch.Tensor], version: int | None = None
    ) -> concurrent.futures.Future:
        """Load (part of) a state dict between decode steps; optionally set the version.

        Keys must be the model's own parameter names; unknown keys raise ``KeyError``.
        In-flight sequences are prefilled again with the new weights.
        """

        def load():
            result = self.model.load_state_dict(state_dict, strict=False)
            if result.unexpected_keys:
                raise KeyError(
                    f"{len(result.unexpected_keys)} keys are not parameters of the model, "
                    f"e.g. {result.unexpected_keys[:3]}."
                )
            if version is not None:
                self.set_version(version)

        return self._control(load, invalidates=True)

    def configure_disk_updates(
        self, experiment_name: str, trial_name: str, timeout_s: float = 600.0
    ) -> None:
        """Name the trainer whose name_resolve keys :meth:`update_weights_from_disk` waits for.

        ``initialize(config)`` calls this with the config's ``experiment_name``/``trial_name``.
        """
        self._disk_update_names = (experiment_name, trial_name)
        self._disk_update_timeout_s = timeout_s

    def load_weights_from_disk(self, meta: WeightUpdateMeta) -> concurrent.futures.Future:
        """Load the weights at ``meta.path`` now, between two decode steps, and take
        ``meta.version`` (when set) with them; the caller knows the folder is complete (another
        process of the same trainer has seen it published). In-flight sequences are prefilled
        again with the new weights.

        Returns:
            A future that completes after the load (or raises the loading error; a folder
            lacking any of the model's tensors is an error, as transformers would fill them with
            random values).
        """

        def load():
            new, info = type(self.model).from_pretrained(
                meta.path, dtype=self._dtype, local_files_only=True, output_loading_info=True
            )
            if info["missing_keys"]:  # transformers filled them with fresh random values
                missing = sorted(info["missing_keys"])
                raise ValueError(
                    f"{meta.path} lacks {len(missing)} of the model's tensors "
                    f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): a partial "
                    "save; the engine keeps its weights"
                )
            self.model.load_state_dict(new.state_dict(), strict=True)
            if meta.version is not None:
                self.set_version(meta.version)

        return self._control(load, invalidates=True)

    def update_weights_from_disk(self, meta: WeightUpdateMeta) -> concurrent.futures.Future:
        """Load the weights a trainer saves at ``meta.path``, once the trainer says they are there.

        AReaL's ``FSDPEngine._update_weights_from_disk`` calls this *before* it saves, then
        publishes the name_resolve key ``names.update_weights_from_disk(experiment, trial,
        version)`` and waits on the returned future. So, like AReaL's ``RemoteInfEngine``, the
        load waits for that key, where ``version`` is this engine's version when the update
        is requested (the trainer's version before ``set_version``), and for a timestamp not
        older than the request (a stale key from an earlier run is not the trainer's word). A
        folder that exists already (a reused path holding older weights) is therefore never read
        early, and a half-written folder never at all.

        Without :meth:`configure_disk_updates` (no trainer to wait for) the folder is loaded at
        once. Generation resumes when the load finishes, succeeded or not; in-flight sequences
        are prefilled again with the new weights. ``meta.version`` (set by AReaL's
        ``with_version``), when given, becomes the engine's version between the same two decode
        steps as the weights: generation resumes before the trainer's ``set_version``, and a
        token sampled in between must not carry the old version with the new weights.
        ``meta.clear_checkpoint_after_load`` removes the folder after a successful load, as
        AReaL's remote engines do.

        Returns:
            A future that completes after the load (raises ``TimeoutError`` if the key never
            appears, or the loading error).
        """
        if meta.type != "disk" or not meta.path:
            raise ValueError(
                f"update_weights_from_disk needs WeightUpdateMeta(type='disk', path=...), got "
                f"type={meta.type!r}, path={meta.path!r}."
            )
        names = getattr(self, "_disk_update_names", None)
        requested_at = time.time()
        version = self.get_version()

        if names is None:
            return self.load_weights_from_disk(meta)
        self._require_initialized()
        result: concurrent.futures.Future = concurrent.futures.Future()

        def wait_then_load():
            try:
                self._wait_for_trainer(names, version, requested_at)
                self.load_weights_from_disk(meta).result()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's future
                self.continue_generation()
                result.set_exception(exc)
                return
            self.continue_generation()
            if meta.clear_checkpoint_after_load:
                import shutil

                shutil.rmtree(meta.path, ignore_errors=True)
            result.set_result(None)

        def run():
            try:
                wait_then_load()
            finally:
                self._disk_update_threads.discard(threading.current_thread())

        # A daemon, so a process that never destroys the engine can still exit; destroy() joins it.
        thread = threading.Thread(target=run, name="disk-weight-update", daemon=True)
        self._disk_update_threads.add(thread)
        thread.start()
        return result

    def _wait_for_trainer(self, names: tuple[str, str], version: int, requested_at: float):
        """Poll name_resolve until the trainer publishes ``version``'s key (a fresh one)."""
        from areal.utils import name_resolve
        from areal.utils import names as areal_names
        from areal.utils.name_resolve import NameEntryNotFoundError

        key = areal_names.update_weights_from_disk(*names, version)
        deadline = time.monotonic() + self._disk_update_timeout_s
        while True:
            try:
                if float(name_resolve.get(key)) >= requested_at - 1e-3:
                    return
            except NameEntryNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the trainer did not publish name_resolve key {key!r} within "
                    f"{self._disk_update_timeout_s:.0f} s; weights for version {version} not loaded"
                )
            if self._destroying.wait(0.02):
                raise RuntimeError(
                    f"the engine was destroyed while waiting for name_resolve key {key!r}; "
                    f"weights for version {version} not loaded"
                )

    def _require_initialized(self) -> None:
        if not self.initialized:
            raise RuntimeError("Call LocalInferenceEngine.initialize() first.")

    def init_weights_update_group(self, meta, rank_ids=None):
        raise NotImplementedError(
            "LocalInferenceEngine has no distributed weight-update group; use "
            "update_weights_from_state_dict() in-process or update_weights_from_disk()."
        )

    def update_weights_from_distributed(self, meta, param_specs):
        raise NotImplementedError(
            "LocalInferenceEngine does not receive weights over NCCL; use "
            "update_weights_from_state_dict() in-process or update_weights_from_disk()."
        )

    def offload(self):
        """Move the model to CPU between steps; generation waits until :meth:`onload`."""

        self._control(lambda: self.model.to("cpu"), invalidates=True, halt=True).result()

    def onload(self, tags: list[str] | None = None):
        """Move the model back to the engine's device and resume generating."""
        self._control(lambda: self.model.to(self.device), invalidates=True, halt=False).result()

    def _control(self, fn, invalidates: bool, halt: bool | None = None):
        self._require_initialized()
        return self._worker.control(fn, invalidates, halt)

    # ------------------------------------------------------------------ AReaL rollout API
    @property
    def workflow_executor(self):
        if self._workflow_executor is None:
            raise RuntimeError(
                "No WorkflowExecutor: call initialize(config=InferenceEngineConfig(...)) to use "
                "submit/wait/rollout_batch/prepare_batch."
            )
        return self._workflow_executor

    def _resolve_workflow(self, workflow, workflow_kwargs, group_size):
        from areal.api.workflow_api import RolloutWorkflow
        from areal.utils.dynamic_import import import_from_string

        if isinstance(workflow, str):
            workflow = import_from_string(workflow)
        if isinstance(workflow, type) and issubclass(workflow, RolloutWorkflow):
            workflow = workflow(**(workflow_kwargs or {}))
        if not isinstance(workflow, RolloutWorkflow):
            raise NotImplementedError(
                f"LocalInferenceEngine runs RolloutWorkflow instances, classes or import paths; "
                f"got {workflow!r}. Agent workflows need AReaL's OpenAI proxy (RemoteInfEngine)."
            )
        if group_size > 1:
            from vlrollout.compat.areal import GroupedRolloutWorkflow

            workflow = GroupedRolloutWorkflow(workflow, group_size, self.workflow_executor.logger)
        return workflow

    def submit(
        self,
        data,
        workflow,
        workflow_kwargs=None,
        should_accept_fn=None,
        group_size: int = 1,
        task_id: int | None = None,
        is_eval: bool = False,
    ) -> int:
        if isinstance(should_accept_fn, str):
            from areal.utils.dynamic_import import import_from_string

            should_accept_fn = import_from_string(should_accept_fn)
        return self.workflow_executor.submit(
            data,
            workflow=self._resolve_workflow(workflow, workflow_kwargs, group_size),
            should_accept_fn=should_accept_fn,
            task_id=task_id,
            is_eval=is_eval,
        )

    def wait(self, count: int, timeout: float | None = None, raise_timeout: bool = True):
        return self.workflow_executor.wait(count, timeout=timeout, raise_timeout=raise_timeout)

    def wait_for_task(self, task_id: int, timeout=None, raise_timeout: bool = True):
        return self.workflow_executor.wait_for_task(task_id, timeout, raise_timeout)

    def rollout_batch(self, data, workflow, workflow_kwargs=None, group_size: int = 1):
        return self.workflow_executor.rollout_batch(
            data=data, workflow=self._resolve_workflow(workflow, workflow_kwargs, group_size)
        )

    def prepare_batch(
        self,
        dataloader,
        workflow,
        workflow_kwargs=None,
        should_accept_fn=None,
        group_size: int = 1,
        dynamic_bs: bool = False,
    ):
        return self.workflow_executor.prepare_batch(
            dataloader=dataloader,
            workflow=self._resolve_workflow(workflow, workflow_kwargs, group_size),
            should_accept_fn=should_accept_fn,
            dynamic_bs=dynamic_bs,
        )

    def pause(self):
        return self.workflow_executor.pause()

    def resume(self):
        return self.workflow_executor.resume()
