"""Conformance oracle for engine-step scenarios: vLLM 0.31.0's own Scheduler / AsyncScheduler.

Runs inside the vLLM virtualenv (``.venv-vllm``, made by ``setup_vllm.sh``), never inside the
project's own one, and so must not import ``explorer``.

Protocol (as ``vllm_driver.py``): one normalized engine-step scenario per JSON line on stdin; for
each, one JSON line on stdout: the replay JSON of an engine-step scenario (design.md section 7:
``{"steps": [...], "final": {...}}``), or ``{"error": "..."}`` when vLLM raised or the scenario
asks for something the engine would refuse. With ``"num_cached_tokens": true`` in a scenario the
answer adds ``"num_cached_tokens": {id: n}``: what vLLM reports per request (the
``PrefillStats`` of its first admission, carried by its first ``EngineCoreOutput``). With ``"timing": {"repeat": N}`` in a scenario it is
replayed N times and ``"timing": {"build_s": [...], "replay_s": [...]}`` is added (scheduler
construction; the op loop, event encoding and the JSON excluded). A line ``{"toml_file": PATH}``
replays an engine-step TOML (read by ``engine_step_scenarios.py`` beside this file), timed whole.

What it builds, once per scenario: vLLM's real ``Scheduler`` (``scheduler = "sync"``) or
``AsyncScheduler`` (``"async"``) over a config.json-only model folder on the CPU, with
``num_gpu_blocks`` set by hand and the KV event publisher replaced by a recorder. The
``VllmConfig`` (its first ``ModelConfig`` costs seconds) is cached per distinct setting. The
model runner is played: a scheduled request that is not a prefill chunk samples the token of
its ``output`` at the position being computed. Each ``step`` op is one call of EngineCore's
``step()`` (sync) or ``step_with_batch_queue()`` with a queue of 2 (async), replayed around the
scheduler in the order ``vllm/v1/engine/core.py`` (0.31.0) calls it; every scheduling, cache,
event and stats decision is made by vLLM's own code.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

# vLLM's logger writes to stdout; keep stdout for the protocol alone (as vllm_driver.py does).
_PROTOCOL_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# No scenario may see an inherited seed; each sets its own before hashing.
os.environ.pop("PYTHONHASHSEED", None)

import msgspec  # noqa: E402
import vllm  # noqa: E402
import vllm.envs as vllm_envs  # noqa: E402
import vllm.v1.core.kv_cache_utils as kcu  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_block_hash, get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import KVCacheConfig  # noqa: E402
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm_groups import TINY_LLAMA, check_release, kv_cache_groups  # noqa: E402  (beside this file)

HERE = Path(__file__).resolve().parent
# vLLM's KVConnectorFactory imports the test connector by module name (design section 10).
sys.path.insert(0, str(HERE))
import vllm_offloading  # noqa: E402
from vllm_static_connector import StaticWorker  # noqa: E402

STAT_FIELDS = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")
# vllm/config/vllm.py:592-602 (0.31.0): async scheduling with the V1 runner and no pipeline
# parallelism gives max_concurrent_batches = 2, EngineCore's batch queue size (core.py:214-220).
BATCH_QUEUE_SIZE = 2


class ScenarioError(Exception):
    """The scenario asks for something the engine would refuse (bad input in design.md)."""


# ---- configs, cached per distinct setting -------------------------------------------------

_MAX_CACHED_CONFIGS = 64  # every size has a cap: the least recently used setting is dropped


class Configs:
    """ModelConfig per max_model_len, VllmConfig per distinct engine setting (one driver process)."""

    def __init__(self) -> None:
        self._root = tempfile.TemporaryDirectory(prefix="vllm-sched-model-")
        self._models: dict[int, ModelConfig] = {}
        self._vllm: dict[tuple, VllmConfig] = {}
        self.built = 0

    def model(self, max_model_len: int) -> ModelConfig:
        mc = self._models.get(max_model_len)
        if mc is None:
            folder = Path(self._root.name) / str(max_model_len)
            folder.mkdir(exist_ok=True)
            shape = dict(TINY_LLAMA, max_position_embeddings=max(max_model_len, 4096))
            (folder / "config.json").write_text(json.dumps(shape))
            mc = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float32", max_model_len=max_model_len)
            self._models[max_model_len] = mc
        return mc

    def vllm(self, eng: dict) -> VllmConfig:
        key = (
            int(eng["max_model_len"]),
            int(eng["block_size"]),
            bool(eng["enable_prefix_caching"]),
            eng["hash_algo"],
            bool(eng["events"]),
            eng["scheduler"],
            int(eng["max_num_batched_tokens"]),
            int(eng["max_num_seqs"]),
            int(eng["long_prefill_token_threshold"]),
            _connector_key(eng.get("kv_connector"), int(eng["block_size"])),
            _spec_key(eng.get("speculative")),
        )
        vc = self._vllm.pop(key, None)
        if vc is None:
            mml, bs, caching, algo, events, sched, mnbt, seqs, lpt, kv, spec = key
            if sched not in ("sync", "async"):
                raise ScenarioError(f"unknown scheduler {sched!r}")
            try:
                sc = SchedulerConfig(
                    max_num_seqs=seqs,
                    max_num_batched_tokens=mnbt,
                    max_model_len=mml,
                    long_prefill_token_threshold=lpt,
                    enable_chunked_prefill=True,
                    async_scheduling=sched == "async",
                    is_encoder_decoder=False,
                )
                cc = CacheConfig(block_size=bs, enable_prefix_caching=caching, prefix_caching_hash_algo=algo)
                sp = None
                if spec is not None:
                    # Rule 74's recipe: the drafter is the same config-only folder; ngram has none.
                    method, k = spec
                    mc = self.model(mml)
                    sp = SpeculativeConfig(
                        method=method,
                        num_speculative_tokens=k,
                        target_model_config=mc,
                        target_parallel_config=ParallelConfig(),
                        **({} if method == "ngram" else {"model": mc.model}),
                    )
                vc = VllmConfig(
                    model_config=self.model(mml),
                    device_config=DeviceConfig(device="cpu"),
                    scheduler_config=sc,
                    cache_config=cc,
                    kv_events_config=KVEventsConfig(enable_kv_cache_events=events, publisher="null"),
                    kv_transfer_config=_transfer_config(kv),
                    speculative_config=sp,
                )
            except (ValueError, NotImplementedError) as exc:  # pydantic's ValidationError is a ValueError
                first = next((ln.strip() for ln in str(exc).splitlines() if "error," in ln), str(exc).splitlines()[0])
                raise ScenarioError(f"vLLM refused the engine settings: {first}") from None
            if vc.max_concurrent_batches != (BATCH_QUEUE_SIZE if sched == "async" else 1):
                raise RuntimeError(f"unexpected max_concurrent_batches {vc.max_concurrent_batches}")
            self.built += 1
        self._vllm[key] = vc  # most recently used last
        while len(self._vllm) > _MAX_CACHED_CONFIGS:
            del self._vllm[next(iter(self._vllm))]
        return vc


CONFIGS: Configs | None = None  # built on first use, once per driver process


def _connector_key(kv: dict | None, block_size: int) -> tuple | None:
    if not kv:
        return None
    # The offloading connector's CPU bytes depend on the block size (vllm_offloading.py).
    return (kv["kind"], kv.get("failure_policy", "fail"), int(kv.get("cpu_blocks", 0)), block_size)


def _transfer_config(key: tuple | None) -> KVTransferConfig | None:
    """engine.kv_connector -> vLLM's KVTransferConfig, kv_role "kv_both" (design section 10)."""
    if key is None:
        return None
    kind, policy, cpu_blocks = key[:3]
    if kind == "offloading":  # vLLM's own OffloadingConnector (vllm_offloading.py)
        return vllm_offloading.transfer_config(policy, cpu_blocks, key[3])
    if kind != "static":
        raise ScenarioError(f"kv_connector kind {kind!r} is not driven")
    return KVTransferConfig(
        kv_connector="ExplorerStaticConnector",
        kv_connector_module_path="vllm_static_connector",
        kv_role="kv_both",
        kv_load_failure_policy=policy,
    )


def _spec_key(spec: dict | None) -> tuple[str, int] | None:
    """``engine.speculative`` as a hashable key: (method, num_speculative_tokens)."""
    return None if spec is None else (str(spec["method"]), int(spec["num_speculative_tokens"]))


def _configs() -> Configs:
    global CONFIGS
    if CONFIGS is None:
        CONFIGS = Configs()
    return CONFIGS


# ---- encoding -------------------------------------------------------------------------------


def _jsonable(value):
    """msgpack-decoded values -> JSON values (bytes become lowercase hex)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _encode_events(events) -> list:
    # What a subscriber decoding vLLM's msgpack sees: a map led by "type", defaults left out.
    return [_jsonable(msgspec.msgpack.decode(msgspec.msgpack.encode(ev))) for ev in events]


def _stats_dict(stats) -> dict:
    return {name: getattr(stats, name) for name in STAT_FIELDS}


class EventRecorder:
    """Stands in for the scheduler's kv_event_publisher: keeps every KVEventBatch published."""

    def __init__(self) -> None:
        self.batches: list = []

    def publish(self, batch) -> None:
        self.batches.append(batch)

    def shutdown(self) -> None:
        pass


# ---- one scenario ---------------------------------------------------------------------------


class EngineReplay:
    def __init__(self, scenario: dict):
        eng = scenario["engine"]
        check_release(eng)
        self.block_size = int(eng["block_size"])
        self.num_blocks = int(eng["num_blocks"])
        # Hybrid KV cache groups (design section 8): hashes at hash_block_size, the scheduler at the LCM.
        self.hybrid = "kv_cache_groups" in eng
        groups, self.hash_block_size, self.scheduler_block_size, retention = kv_cache_groups(eng)
        self.max_model_len = int(eng["max_model_len"])
        self.async_sched = eng["scheduler"] == "async"
        spec = _spec_key(eng.get("speculative"))
        self.num_spec_tokens = 0 if spec is None else spec[1]
        caching = bool(eng["enable_prefix_caching"])
        self.kv = eng.get("kv_connector") or None

        # Environment as vLLM reads it, per scenario (see vllm_driver.py).
        os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "1" if eng["int_block_hashes"] else "0"
        if getattr(vllm_envs, "_is_envs_cache_enabled", lambda: False)():
            vllm_envs.disable_envs_cache()
        assert bool(eng["int_block_hashes"]) == vllm_envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES

        vc = _configs().vllm(eng)
        start = time.perf_counter()
        # EngineCore.__init__ (core.py:225-234): NONE_HASH and the block hasher exist only with
        # prefix caching (or a connector); the hash seed is PYTHONHASHSEED as vLLM reads it.
        self.hasher = None
        self.none_hash = None
        self.hash_seed = None
        if caching or self.kv:  # a connector makes EngineCore build the hasher too
            seed = eng.get("hash_seed")
            if seed is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = str(seed)
            hash_fn = get_hash_fn_by_name(eng["hash_algo"])
            init_none_hash(hash_fn)
            # 0.33.0 hashes EAGLE blocks with lookahead tokens (core.py:226-230 there).
            la = getattr(vc, "num_hash_lookahead_tokens", 0)
            self.hasher = get_request_block_hasher(self.hash_block_size, hash_fn, *([la] if la else []))
            self.none_hash = kcu.NONE_HASH.hex()
            self.hash_seed = kcu.get_none_hash_seed()

        # Scheduler.__init__ asserts num_gpu_blocks (scheduler.py:195-196); it reads the config
        # only while it is built, so one cached VllmConfig serves every pool size.
        vc.cache_config.num_gpu_blocks = self.num_blocks
        kv_cache_config = KVCacheConfig(
            num_blocks=self.num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            **({"prefix_cache_retention_interval": retention} if self.hybrid else {}),
        )
        cls = AsyncScheduler if self.async_sched else Scheduler
        self.sched = cls(
            vllm_config=vc,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vc),
            block_size=self.scheduler_block_size,
            hash_block_size=self.hash_block_size,
            log_stats=True,
        )
        if self.hybrid:
            self._observe_hybrid()
        self.recorder = EventRecorder()
        self.sched.kv_event_publisher = self.recorder
        self.connector = self.sched.connector
        self.offloading = bool(self.kv) and self.kv["kind"] == "offloading"
        self.worker = (vllm_offloading.OffloadingWorker() if self.offloading else StaticWorker()) if self.kv else None
        if self.offloading:
            vllm_offloading.instrument(self.sched, int(self.kv["cpu_blocks"]))
        self.external_stats = dict.fromkeys(STAT_FIELDS, 0)
        if self.connector is not None:
            self._refuse_set_orders()
        # Observe (never change) preemptions in the order vLLM makes them.
        self.preempt_log: list[str] = []
        preempt = self.sched._preempt_request

        def recorded_preempt(request, *args, **kwargs):
            self.preempt_log.append(request.request_id)
            return preempt(request, *args, **kwargs)

        self.sched._preempt_request = recorded_preempt
        self.build_seconds = time.perf_counter() - start

        self.batch_queue: deque = deque()  # (scheduler_output, model_runner_output), newest left
        self.outputs: dict[str, list[int]] = {}  # the played model's tokens per request
        # Speculative decoding: drafts accepted per verifying step, and steps verified so far.
        self.accepted: dict[str, list[int]] = {}
        self.num_verified: dict[str, int] = {}
        self.arrived: set[str] = set()
        self.reset_ok: list[bool] = []
        self.reported_stats = dict.fromkeys(STAT_FIELDS, 0)
        self.steps: list[dict] = []
        self.events: list[list] = []  # per step: the raw events vLLM published in it
        self.arrivals = 0
        self.num_cached_tokens: dict[str, int] = {}  # per request, from its first output

    def _refuse_set_orders(self) -> None:
        """Orders vLLM takes from a set are not replayable (design section 7): two requests
        failing a load in one step, two finished loads freeing their blocks together."""
        sched = self.sched
        finish, xfer = sched.finish_requests, sched._update_from_kv_xfer_finished

        def finish_requests(request_ids, finished_status):
            if finished_status == RequestStatus.FINISHED_ERROR and len(request_ids) > 1:
                raise ScenarioError("two requests fail a KV load in one step (an order from a set)")
            return finish(request_ids, finished_status)

        def update_from_kv_xfer_finished(output):
            done = [r for r in output.finished_recving or () if sched.requests[r].is_finished()]
            if len(done) + len(output.finished_sending or ()) > 1:
                raise ScenarioError("two finished loads free their blocks in one step (an order from a set)")
            return xfer(output)

        sched.finish_requests = finish_requests
        sched._update_from_kv_xfer_finished = update_from_kv_xfer_finished

    def _observe_hybrid(self) -> None:
        """Record (never change) each lookup's per-group hits and boundary, and each
        waiting-queue admission's new blocks per group, as the scheduler makes them."""
        mgr = self.sched.kv_cache_manager
        n = len(mgr.kv_cache_config.kv_cache_groups)
        self.step_hybrid = {"group_hit_tokens": {}, "shared_prefix_boundary": {}, "new_block_ids_by_group": {}}
        get_computed_blocks, allocate_slots = mgr.get_computed_blocks, mgr.allocate_slots

        def looked_up(request, *cap):  # 0.33.0 passes max_cache_hit_length
            blocks, hit, spb = get_computed_blocks(request, *cap)
            hits = [0] * n
            if mgr.prefix_cache_lookup_enabled(request):
                coordinator = mgr.coordinator
                if hasattr(coordinator, "find_longest_cache_hit_per_group"):
                    hits = list(
                        coordinator.find_longest_cache_hit_per_group(request.block_hashes, request.num_tokens - 1)[1]
                    )
                else:
                    hits = [hit]
            self.step_hybrid["group_hit_tokens"][request.request_id] = hits
            self.step_hybrid["shared_prefix_boundary"][request.request_id] = spb
            return blocks, hit, spb

        def allocated(request, *args, **kwargs):
            admitting = request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            new = allocate_slots(request, *args, **kwargs)
            if admitting:
                ids = [[] for _ in range(n)] if new is None else [list(g) for g in new.get_block_ids()]
                self.step_hybrid["new_block_ids_by_group"][request.request_id] = ids
            return new

        mgr.get_computed_blocks, mgr.allocate_slots = looked_up, allocated

    # ---- the played model runner ----------------------------------------------------------

    def _execute(self, so) -> ModelRunnerOutput:
        """The model runner's answer for a scheduled batch, decided when the batch is scheduled.

        A request whose computed tokens (after this batch) stay below its num_tokens plus
        placeholders is a prefill chunk: the runner discards its sample (gpu_model_runner.py
        L2086-2091) and returns []. Every other request samples position num_computed_tokens,
        i.e. output index num_computed_tokens - num_prompt_tokens.
        """
        kvo = None
        if self.offloading:
            kvo = self.worker.execute(so.kv_connector_metadata)
        elif self.worker is not None:
            finished, invalid = self.worker.execute(so.kv_connector_metadata)
            kvo = KVConnectorOutput(finished_recving=finished, invalid_block_ids=invalid)
        if so.total_num_scheduled_tokens == 0:
            # The runner's kv_connector_no_forward (kv_connector_model_runner_mixin.py:25-37).
            return ModelRunnerOutput.with_kv_conn_output_only(kvo) if kvo is not None else EMPTY_MODEL_RUNNER_OUTPUT
        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = self.sched.requests[rid]
            if req.is_prefill_chunk:
                sampled.append([])
                continue
            drafts = list(so.scheduled_spec_decode_tokens.get(rid, ()))
            index = req.num_computed_tokens - len(drafts) - req.num_prompt_tokens
            output = self.outputs[rid]
            if not 0 <= index < len(output):
                raise ScenarioError(f"the played model was asked for output[{index}] of {rid!r} ({len(output)} tokens)")
            # Accepted drafts past the output's end are sampled as the drafts (0s): vLLM counts
            # them (scheduler.py:2059) before it trims the request at max_tokens (:2449).
            num_sampled = 1 + self._num_accepted(rid, drafts)
            tokens = output[index : index + num_sampled]
            sampled.append(tokens + [0] * (num_sampled - len(tokens)))
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=kvo,
        )

    def _num_accepted(self, rid: str, drafts: list[int]) -> int:
        """Drafts this step accepts: none of an admission's placeholders (-1); otherwise the
        request's next ``accepted`` entry (0 past the end), capped at the drafts scheduled."""
        if not drafts or all(t == -1 for t in drafts):
            return 0
        i = self.num_verified.get(rid, 0)
        self.num_verified[rid] = i + 1
        accepted = self.accepted.get(rid, [])
        return min(accepted[i] if i < len(accepted) else 0, len(drafts))

    def _post_step(self, so) -> None:
        """EngineCore.post_step (core.py:661-668), sync only: the played drafter proposes
        num_speculative_tokens drafts (0s) for every request of the batch that ran."""
        if self.num_spec_tokens and not self.async_sched and so.total_num_scheduled_tokens > 0:
            req_ids = list(so.num_scheduled_tokens)
            self.sched.update_draft_token_ids(DraftTokenIds(req_ids, [[0] * self.num_spec_tokens for _ in req_ids]))

    def _schedule(self, entry: dict):
        self.preempt_log = []
        if self.connector is not None:
            self.connector.allocs = []
        so = self.sched.schedule(False)  # EngineCore._should_throttle_prefills() is False (core.py:625-628)
        entry["scheduled"] = {rid: int(n) for rid, n in so.num_scheduled_tokens.items()}
        if self.connector is not None:
            entry["external"] = dict(self.connector.allocs)
        entry["preempted"] = list(self.preempt_log)
        return so, self._execute(so)

    def _update(self, entry: dict, so, mro) -> None:
        published = len(self.recorder.batches)
        eco = self.sched.update_from_output(so, mro)
        outputs: dict[str, list[int]] = {}
        finished: list[str] = []
        stats = None
        for client_outputs in eco.values():
            for out in client_outputs.outputs:
                if out.new_token_ids:
                    outputs[out.request_id] = [int(t) for t in out.new_token_ids]
                if out.finish_reason is not None:
                    finished.append(out.request_id)
                if out.prefill_stats is not None:
                    self.num_cached_tokens[out.request_id] = int(out.prefill_stats.num_cached_tokens)
            if client_outputs.scheduler_stats is not None:
                stats = client_outputs.scheduler_stats.prefix_cache_stats
                ext = client_outputs.scheduler_stats.connector_prefix_cache_stats
                if ext is not None:
                    for name in STAT_FIELDS:
                        self.external_stats[name] += getattr(ext, name)
        entry["outputs"] = outputs
        entry["finished"] = finished
        entry["step_stats"] = None if stats is None else _stats_dict(stats)
        if stats is not None:
            for name in STAT_FIELDS:
                self.reported_stats[name] += getattr(stats, name)
        batches = self.recorder.batches[published:]
        assert len(batches) <= 1, "update_from_output publishes at most one batch"
        self.events[-1] = list(batches[0].events) if batches else []

    # ---- ops --------------------------------------------------------------------------------

    def op_arrive(self, op: dict, entry: dict) -> None:
        rid = op["id"]
        if rid in self.sched.requests:
            raise ScenarioError(f"request {rid!r} is still live")
        if any(rid in so.num_scheduled_tokens for so, _ in self.batch_queue):
            # An aborted request's batch is still in flight: update_from_output looks requests up
            # by id (scheduler.py:2020, 2032), so vLLM would hand its output to the new request.
            raise ScenarioError(f"request {rid!r} is still in a batch in flight")
        if op.get("mm"):
            raise ScenarioError("mm is bad input in an engine-step scenario")
        prompt = [int(t) for t in op["prompt"]]
        output = [int(t) for t in op["output"]]
        if not prompt or not output:
            raise ScenarioError(f"request {rid!r} needs a non-empty prompt and output")
        if len(prompt) >= self.max_model_len:
            # The input processor's refusal (input_processor.py:520-552); a longer output is
            # the scheduler's to cap (FINISHED_LENGTH_CAPPED at max_model_len).
            raise ScenarioError(f"request {rid!r}: the prompt is at least max_model_len")
        lora = op.get("lora")
        lora_request = (
            LoRARequest(lora_name=lora["name"], lora_int_id=int(lora["id"]), lora_path=lora["path"]) if lora else None
        )
        params = SamplingParams(
            max_tokens=len(output),
            ignore_eos=True,
            prompt_logprobs=1 if op.get("prompt_logprobs") else None,
        )
        self.arrivals += 1
        req = Request(
            request_id=rid,
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self.arrivals),
            lora_request=lora_request,
            cache_salt=op.get("cache_salt"),
            block_hasher=self.hasher,
        )
        self.outputs[rid] = output
        self.accepted[rid] = [int(a) for a in op.get("accepted") or ()]
        self.num_verified[rid] = 0
        self.arrived.add(rid)
        if self.connector is not None and not self.offloading:  # what the static store holds
            load = op.get("external_load", self.kv.get("load", "async"))
            self.connector.held[rid] = (
                int(op.get("external_tokens", 0)),
                load == "async",
                int(op.get("load_steps", 1)),
                tuple(int(i) for i in op.get("invalid_external_blocks", ())),
            )
        self.sched.add_request(req)  # EngineCore.add_request (core.py:486-526)

    def op_step(self, op: dict, entry: dict) -> None:
        entry.update(scheduled={}, outputs={}, preempted=[], finished=[], step_stats=None)
        if self.connector is not None:
            entry["external"] = {}
        if self.async_sched:
            self._step_with_batch_queue(entry)
        else:
            self._step(entry)
        if self.hybrid:
            entry.update(self.step_hybrid)
            self.step_hybrid = {k: {} for k in self.step_hybrid}

    def _step(self, entry: dict) -> None:
        """EngineCore.step() (core.py:630-659)."""
        if not self.sched.has_requests():  # core.py:638-639: nothing to do
            return
        so, mro = self._schedule(entry)  # core.py:640-641 (schedule, execute_model)
        self.sched.get_grammar_bitmask(so)  # core.py:642
        self._update(entry, so, mro)  # core.py:653-656 (no aborts arrive mid-step)
        self._post_step(so)

    def _step_with_batch_queue(self, entry: dict) -> None:
        """EngineCore.step_with_batch_queue() (core.py:670-783) with a batch queue of 2."""
        queue = self.batch_queue
        assert len(queue) < BATCH_QUEUE_SIZE  # core.py:692
        if self.sched.has_requests():  # core.py:696
            so, mro = self._schedule(entry)  # core.py:697-701
            model_executed = so.total_num_scheduled_tokens > 0  # core.py:702-703
            if model_executed:  # core.py:709-717: nothing structured, so sample at once
                self.sched.get_grammar_bitmask(so)
            queue.appendleft((so, mro))  # core.py:725: empty batches are queued too
            if len(queue) < BATCH_QUEUE_SIZE and (model_executed or self.sched.has_requests()):
                return  # core.py:726-731: do not block on the oldest batch yet
        elif not queue:
            return  # core.py:733-737: nothing to do
        so, mro = queue.pop()  # core.py:740: the oldest batch
        self._update(entry, so, mro)  # core.py:754-757

    def op_abort(self, op: dict, entry: dict) -> None:
        rid = op["id"]
        if rid not in self.arrived:
            raise ScenarioError(f"request {rid!r} never arrived")
        # EngineCore.abort_requests (core.py:532-537); a finished id is ignored by vLLM.
        self.sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)

    def op_reset(self, op: dict, entry: dict) -> None:
        # EngineCore.reset_prefix_cache (core.py:831-836) -> Scheduler.reset_prefix_cache.
        ok = bool(self.sched.reset_prefix_cache(bool(op.get("running")), bool(op.get("external"))))
        self.reset_ok.append(ok)
        entry["ok"] = ok

    # ---- driver -----------------------------------------------------------------------------

    def run(self, ops: list[dict]) -> dict:
        start = time.perf_counter()
        for index, op in enumerate(ops):
            name = op.get("op")
            handler = getattr(self, f"op_{name}", None)
            if handler is None:
                raise ScenarioError(f"step {index}: unknown op {name!r}")
            entry = {"op": name, "id": op.get("id") if name in ("arrive", "abort") else None, "ok": True}
            self.events.append([])
            try:
                handler(op, entry)
            except ScenarioError as exc:
                raise ScenarioError(f"step {index} ({name}): {exc}") from None
            except Exception as exc:
                raise ScenarioError(f"step {index} ({name}): vLLM raised {type(exc).__name__}: {exc}") from exc
            self.steps.append(entry)
        self.replay_seconds = time.perf_counter() - start
        for entry, events in zip(self.steps, self.events):
            entry["events"] = _encode_events(events)
        return {"steps": self.steps, "final": self.final()}

    def answer(self, ops: list[dict], num_cached_tokens: bool) -> dict:
        result = self.run(ops)
        if num_cached_tokens:
            result["num_cached_tokens"] = self.num_cached_tokens
        return result

    def final(self) -> dict:
        mgr = self.sched.kv_cache_manager
        pool = mgr.block_pool

        def digest_hex(key) -> str | None:
            return None if key is None else get_block_hash(key).hex()

        cached: dict[str, list[int]] = {}
        n = len(mgr.kv_cache_config.kv_cache_groups)
        by_group: dict[str, dict[str, list[int]]] = {str(g): {} for g in range(n)}
        for key, value in pool.cached_block_hash_to_block._cache.items():
            ids = [blk.block_id for blk in value.values()] if isinstance(value, dict) else [value.block_id]
            gid = int.from_bytes(bytes(key)[-4:], "big")
            by_group[str(gid)].setdefault(digest_hex(key), []).extend(ids)
            if not self.hybrid or gid == 0:  # `cached` is group 0's (design section 8)
                cached.setdefault(digest_hex(key), []).extend(ids)
        # Every admission so far: the stats each update reported, plus what the manager has
        # recorded since the last make_stats (an async batch not updated yet).
        pending = mgr.prefix_cache_stats
        stats = {name: self.reported_stats[name] + getattr(pending, name) for name in STAT_FIELDS}
        if self.connector is not None:
            ext = self.sched.connector_prefix_cache_stats
            for name in STAT_FIELDS:
                stats[f"external_{name}"] = self.external_stats[name] + getattr(ext, name)
        return {
            "free_queue": [blk.block_id for blk in pool.free_block_queue.get_all_free_blocks()],
            "blocks": [
                {"id": blk.block_id, "ref_cnt": blk.ref_cnt, "hash": digest_hex(blk.block_hash)}
                for blk in pool.blocks
                if not blk.is_null
            ],
            "cached": cached,
            "requests": {
                rid: {
                    "block_ids": list(mgr.get_block_ids(rid)[0]),
                    "num_computed_tokens": req.num_computed_tokens,
                    "block_hashes": [h.hex() for h in req.block_hashes],
                    "status": req.status.name.lower(),
                    "num_output_tokens": req.num_output_tokens,
                    **({"block_ids_by_group": [list(g) for g in mgr.get_block_ids(rid)]} if self.hybrid else {}),
                }
                for rid, req in self.sched.requests.items()
            },
            "stats": stats,
            **({"cpu_tier": vllm_offloading.cpu_tier(self.connector)} if self.offloading else {}),
            "reset_ok": self.reset_ok,
            "none_hash": self.none_hash,
            "hash_seed": self.hash_seed,
            "vllm": vllm.__version__,
            **({"cached_by_group": by_group} if self.hybrid else {}),
        }


def replay(scenario: dict) -> dict:
    """The replay JSON; with ``"timing": {"repeat": N}`` replayed N times, seconds added."""
    if scenario.get("kind", "engine_steps") != "engine_steps":
        raise ScenarioError(f"not an engine-step scenario: kind {scenario.get('kind')!r}")
    timing = scenario.get("timing")
    cached = bool(scenario.get("num_cached_tokens"))
    if not timing:
        return EngineReplay(scenario).answer(scenario["ops"], cached)
    build, seconds = [], []
    for _ in range(max(1, int(timing.get("repeat", 1)))):
        rep = EngineReplay(scenario)
        result = rep.answer(scenario["ops"], cached)
        build.append(rep.build_seconds)
        seconds.append(rep.replay_seconds)
    result["timing"] = {"build_s": build, "replay_s": seconds, "configs_built": _configs().built}
    return result


def run_toml_file(path: str) -> str:
    """A whole engine-step TOML on vLLM's side, timed: read, normalize, replay, encode."""
    sys.path.insert(0, str(HERE))
    import engine_step_scenarios  # stdlib only; lives beside this file

    start = time.perf_counter()
    scenario = engine_step_scenarios.load_toml(path)
    text = json.dumps(replay(scenario))
    seconds = time.perf_counter() - start
    return f'{{"whole_s": {seconds!r}, "result": {text}}}'


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            if "toml_file" in message:
                _PROTOCOL_OUT.write(run_toml_file(message["toml_file"]) + "\n")
                _PROTOCOL_OUT.flush()
                continue
            result = replay(message)
        except ScenarioError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # one bad scenario must not end the process
            result = {"error": f"{type(exc).__name__}: {exc}"}
        _PROTOCOL_OUT.write(json.dumps(result, separators=(",", ":")) + "\n")
        _PROTOCOL_OUT.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
