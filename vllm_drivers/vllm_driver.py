"""Conformance oracle: replay normalized scenarios through vLLM 0.31.0's classes.

Runs inside the vLLM virtualenv (``.venv-vllm``, made by ``setup_vllm.sh``),
never inside the project's own one, and so must not import ``explorer``.

Protocol: one normalized scenario per JSON line on stdin; for each, one JSON
line on stdout: the replay JSON of design.md section 5
(``{"steps": [...], "final": {...}}``), or ``{"error": "..."}`` when vLLM
raised (or the line was not a scenario). A line ``{"toml_file": PATH}`` replays
a scenario file instead, timed as a whole (see `run_toml_file`). One process serves many scenarios
because importing vLLM takes seconds.

The driver does, op by op, what vLLM's scheduler does around the
KVCacheManager in one engine step for one request (design.md section 3);
every cache decision (hashing, lookup, allocation, eviction, free order,
events, stats) is made by vLLM's own code.
"""

from __future__ import annotations

import json
import os
import sys
import time

# vLLM's logger writes to stdout; keep stdout for the protocol alone. The
# protocol stream is a private duplicate of fd 1, and fd 1 itself (plus
# sys.stdout) is pointed at stderr before vLLM is imported.
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
from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.multimodal.inputs import (  # noqa: E402
    MultiModalFeatureSpec,
    PlaceholderRange,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_block_hash,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.kv_cache_interface import KVCacheConfig  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm_groups import TINY_LLAMA, check_release, kv_cache_groups  # noqa: E402  (beside this file)


class ScenarioError(Exception):
    """The scenario asks for something the scheduler would never do."""


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
    # Exactly what a subscriber decoding vLLM's msgpack sees: a map led by
    # "type", fields at their default left out.
    return [_jsonable(msgspec.msgpack.decode(msgspec.msgpack.encode(ev))) for ev in events]


_SPEC_NUMBERS: dict[tuple[str, int], tuple[bool, int, int]] = {}  # one VllmConfig per setting


def _spec_numbers(spec: dict | None) -> tuple[bool, int, int, int]:
    """(use_eagle, num_lookahead_tokens, num_prefill_lookahead, num_hash_lookahead_tokens) as
    vLLM's own configs give them for ``engine.speculative`` (scheduler.py:274-318): a VllmConfig
    over the tiny Llama with a SpeculativeConfig built by rule 74's recipe; (False, 0, 0, 0)
    without drafts. The fourth is 0.33's lookahead hashes (0 in 0.31.0, which has none); the
    Scheduler then gives the manager ``use_eagle = drop and not lookahead``."""
    if spec is None:
        return False, 0, 0, 0
    key = (str(spec["method"]), int(spec["num_speculative_tokens"]))
    if key not in _SPEC_NUMBERS:
        import tempfile
        from pathlib import Path

        from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig

        method, k = key
        # the configs read the model folder while they are built, not after: it goes with them
        with tempfile.TemporaryDirectory(prefix="vllm-spec-model-") as tmp:
            folder = Path(tmp)
            (folder / "config.json").write_text(json.dumps(dict(TINY_LLAMA, max_position_embeddings=4096)))
            mc = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float32", max_model_len=4096)
            try:
                sp = SpeculativeConfig(
                    method=method,
                    num_speculative_tokens=k,
                    target_model_config=mc,
                    target_parallel_config=ParallelConfig(),
                    **({} if method == "ngram" else {"model": str(folder)}),
                )
                vc = VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"), speculative_config=sp)
            except (ValueError, NotImplementedError) as exc:
                raise ScenarioError(f"vLLM refused the speculative settings: {str(exc).splitlines()[0]}") from None
        la = getattr(vc, "num_hash_lookahead_tokens", 0)
        drop = sp.use_eagle_block_drop() and not la
        _SPEC_NUMBERS[key] = (drop, vc.num_lookahead_tokens, vc.num_prefill_lookahead_tokens, la)
    return _SPEC_NUMBERS[key]


def _block_ids(kv_blocks) -> list[int]:
    if kv_blocks is None:
        return []
    return list(kv_blocks.get_block_ids()[0])


class Replay:
    def __init__(self, scenario: dict):
        eng = scenario["engine"]
        check_release(eng)
        self.block_size = int(eng["block_size"])
        self.num_blocks = int(eng["num_blocks"])
        self.max_model_len = int(eng["max_model_len"])
        self.caching = bool(eng["enable_prefix_caching"])
        self.events_on = bool(eng["events"])
        # Hybrid KV cache groups (design section 8; spec part 2 rule 70's recipe).
        self.hybrid = "kv_cache_groups" in eng
        groups, self.hash_block_size, self.scheduler_block_size, retention = kv_cache_groups(eng)

        # Environment as vLLM reads it, per scenario.
        os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "1" if eng["int_block_hashes"] else "0"
        # vllm.envs reads lazily on every access unless enable_envs_cache()
        # wrapped its __getattr__ in functools.cache; undo that if it happened.
        if getattr(vllm_envs, "_is_envs_cache_enabled", lambda: False)():
            vllm_envs.disable_envs_cache()
        assert bool(eng["int_block_hashes"]) == vllm_envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES

        self.hasher = None
        if self.caching:
            seed = eng.get("hash_seed")
            if seed is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = str(seed)
            hash_fn = get_hash_fn_by_name(eng["hash_algo"])
            # As EngineCore.__init__ does, and before any Request exists.
            init_none_hash(hash_fn)
            # 0.33.0's EngineCore passes the lookahead (core.py:226-230); 0.31.0's takes two.
            la = _spec_numbers(eng.get("speculative"))[3]
            self.hasher = get_request_block_hasher(self.hash_block_size, hash_fn, *([la] if la else []))
            self.none_hash = kcu.NONE_HASH.hex()
            self.hash_seed = kcu.get_none_hash_seed()
        else:
            # Like the engine: no init_none_hash, no block hasher.
            self.none_hash = None
            self.hash_seed = None

        config = KVCacheConfig(
            num_blocks=self.num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            **({"prefix_cache_retention_interval": retention} if self.hybrid else {}),
        )
        use_eagle, self.lookahead, prefill_lookahead, hash_la = _spec_numbers(eng.get("speculative"))
        if not self.caching:
            use_eagle, hash_la = use_eagle or (hash_la > 0), 0  # lookahead hashes need caching on
        self.mgr = KVCacheManager(
            config,
            max_model_len=self.max_model_len,
            scheduler_block_size=self.scheduler_block_size,
            hash_block_size=self.hash_block_size,
            enable_caching=self.caching,
            enable_kv_cache_events=self.events_on,
            log_stats=True,
            use_eagle=use_eagle,
            num_prefill_lookahead=prefill_lookahead,
            **({"num_hash_lookahead_tokens": hash_la} if hash_la else {}),
        )
        self.drafts: dict[str, int] = {}  # request id -> drafts its last decode verifies
        self.pool = self.mgr.block_pool
        self.live: dict[str, Request] = {}  # every request not finished
        self.running: list[str] = []  # in order of becoming running
        self.reset_ok: list[bool] = []
        self.steps: list[dict] = []

    # ---- ops ------------------------------------------------------------

    def _request(self, rid: str) -> Request:
        try:
            return self.live[rid]
        except KeyError:
            raise ScenarioError(f"no live request {rid!r}") from None

    def op_arrive(self, op: dict, step: dict) -> None:
        rid = op["id"]
        if rid in self.live:
            raise ScenarioError(f"request {rid!r} is already live")
        lora = op.get("lora")
        lora_request = (
            LoRARequest(
                lora_name=lora["name"],
                lora_int_id=int(lora["id"]),
                lora_path=lora["path"],
            )
            if lora
            else None
        )
        mm_features = [
            MultiModalFeatureSpec(
                data=None,
                modality="image",
                identifier=item["id"],
                mm_position=PlaceholderRange(offset=int(item["offset"]), length=int(item["length"])),
            )
            for item in (op.get("mm") or [])
        ]
        # prompt_logprobs makes vLLM itself set skip_reading_prefix_cache.
        params = SamplingParams(
            max_tokens=self.max_model_len,
            prompt_logprobs=1 if op.get("prompt_logprobs") else None,
        )
        req = Request(
            request_id=rid,
            prompt_token_ids=[int(t) for t in op["prompt"]],
            sampling_params=params,
            pooling_params=None,
            mm_features=mm_features or None,
            lora_request=lora_request,
            cache_salt=op.get("cache_salt"),
            block_hasher=self.hasher,
        )
        self.live[rid] = req

    def _allocate_pending(self, req: Request, step: dict, drafts: int = 0) -> bool:
        """What the scheduler does for a running request: compute pending (and verify drafts:
        the running loop schedules them too, and _update_after_schedule moves past them)."""
        pending = req.num_tokens - req.num_computed_tokens
        if pending <= 0:
            raise ScenarioError(f"request {req.request_id!r} has no pending token")
        new = self.mgr.allocate_slots(req, pending + drafts, num_lookahead_tokens=self.lookahead)
        if new is None:
            return False
        req.num_computed_tokens += pending + drafts
        step["new_block_ids"].extend(_block_ids(new))
        return True

    def _group_fields(self, req: Request, step: dict, looked_up: bool, spb: int) -> None:
        """The hybrid lookup fields: each group's own hit (rule 70), the boundary."""
        n = len(self.mgr.kv_cache_config.kv_cache_groups)
        hits = [0] * n
        if looked_up:
            coordinator = self.mgr.coordinator
            if hasattr(coordinator, "find_longest_cache_hit_per_group"):
                _, per = coordinator.find_longest_cache_hit_per_group(req.block_hashes, req.num_tokens - 1)
                hits = list(per)
            else:  # one group: its own hit is the hit
                hits = [step["hit_tokens"]]
        step["group_hit_tokens"] = hits
        step["shared_prefix_boundary"] = spb

    def op_admit(self, op: dict, step: dict) -> None:
        req = self._request(op["id"])
        step["hit_tokens"] = 0
        step["new_block_ids"] = []
        first = req.num_computed_tokens == 0
        hit_blocks = None
        hit = 0
        looked_up = False
        if first:
            if req.status == RequestStatus.RUNNING:
                raise ScenarioError(f"request {req.request_id!r} is running")
            # get_computed_blocks itself returns (empty, 0, 0) when caching is
            # off or the request skips reading the cache (prompt_logprobs).
            looked_up = self.mgr.prefix_cache_lookup_enabled(req)
            hit_blocks, hit, spb = self.mgr.get_computed_blocks(req)
            # The scheduler stores the boundary on the request (scheduler.py:930-937).
            req.shared_prefix_boundary = spb
            step["hit_tokens"] = hit
            if self.hybrid:
                self._group_fields(req, step, looked_up, spb)
        elif self.hybrid:
            n = len(self.mgr.kv_cache_config.kv_cache_groups)
            step["group_hit_tokens"], step["shared_prefix_boundary"] = [0] * n, 0
        remaining = req.num_tokens - req.num_computed_tokens - hit
        if remaining <= 0:
            raise ScenarioError(f"request {req.request_id!r} has nothing to compute")
        chunk = op.get("tokens")
        num_new = remaining if chunk is None else min(int(chunk), remaining)
        new = self.mgr.allocate_slots(
            req,
            num_new,
            num_new_computed_tokens=hit,
            new_computed_blocks=hit_blocks,
            num_lookahead_tokens=self.lookahead,
        )
        if self.hybrid:
            n = len(self.mgr.kv_cache_config.kv_cache_groups)
            step["new_block_ids_by_group"] = (
                [[] for _ in range(n)] if new is None else [list(g) for g in new.get_block_ids()]
            )
        if new is None:
            step["ok"] = False
            return
        if first and looked_up:
            # At admission, after allocate_slots succeeded, with the local hit.
            self.mgr.record_prefix_cache_stats(req, hit)
        req.num_computed_tokens += hit + num_new
        if req.status != RequestStatus.RUNNING:
            req.status = RequestStatus.RUNNING
            self.running.append(req.request_id)
        step["new_block_ids"] = _block_ids(new)

    def _check_running(self, req: Request) -> None:
        if req.status != RequestStatus.RUNNING:
            raise ScenarioError(f"request {req.request_id!r} is not running")

    def op_sample(self, op: dict, step: dict) -> None:
        req = self._request(op["id"])
        self._check_running(req)
        drafts = self.drafts.pop(req.request_id, 0)
        if drafts:
            # update_from_output (scheduler.py:2051-2069): the accepted drafts and a bonus token.
            req.num_computed_tokens -= drafts - max(len(op["tokens"]) - 1, 0)
        for tok in op["tokens"]:
            req.append_output_token_ids(int(tok))

    def op_decode(self, op: dict, step: dict) -> None:
        req = self._request(op["id"])
        self._check_running(req)
        step["new_block_ids"] = []
        drafts = int(op.get("draft_tokens") or 0)
        if not self._allocate_pending(req, step, drafts):
            step["ok"] = False
        elif drafts:
            self.drafts[req.request_id] = drafts

    def op_generate(self, op: dict, step: dict) -> None:
        req = self._request(op["id"])
        self._check_running(req)
        step["new_block_ids"] = []
        for tok in op["tokens"]:
            if req.num_tokens > req.num_computed_tokens and not self._allocate_pending(req, step):
                step["ok"] = False
                return
            req.append_output_token_ids(int(tok))

    def op_finish(self, op: dict, step: dict) -> None:
        req = self._request(op["id"])
        self.mgr.free(req)
        req.status = RequestStatus.FINISHED_STOPPED
        del self.live[req.request_id]
        if req.request_id in self.running:
            self.running.remove(req.request_id)

    def _preempt(self, req: Request) -> None:
        # Scheduler._preempt_request: free, back to waiting, counted.
        self._check_running(req)
        self.mgr.free(req)
        self.drafts.pop(req.request_id, None)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.running.remove(req.request_id)

    def op_preempt(self, op: dict, step: dict) -> None:
        self._preempt(self._request(op["id"]))

    def op_reset(self, op: dict, step: dict) -> None:
        if op.get("running"):
            # Scheduler.reset_prefix_cache pops its running queue from the end.
            for rid in list(reversed(self.running)):
                self._preempt(self.live[rid])
        ok = bool(self.mgr.reset_prefix_cache())
        self.reset_ok.append(ok)
        step["ok"] = ok

    # ---- driver ---------------------------------------------------------

    def run(self, ops: list[dict]) -> dict:
        # Events are taken after every op, as the engine does; they are encoded after the
        # loop, so that a timed replay (see `replay`) measures vLLM's classes alone.
        taken: list[list] = []
        start = time.perf_counter()
        for index, op in enumerate(ops):
            name = op["op"]
            handler = getattr(self, f"op_{name}", None)
            if handler is None:
                raise ScenarioError(f"step {index}: unknown op {name!r}")
            step = {"op": name, "id": None if name == "reset" else op["id"], "ok": True}
            try:
                handler(op, step)
            except ScenarioError as exc:
                raise ScenarioError(f"step {index} ({name}): {exc}") from None
            except Exception as exc:
                raise ScenarioError(f"step {index} ({name}): vLLM raised {type(exc).__name__}: {exc}") from exc
            taken.append(self.mgr.take_events())
            self.steps.append(step)
        self.replay_seconds = time.perf_counter() - start
        for step, events in zip(self.steps, taken):
            step["events"] = _encode_events(events)
        return {"steps": self.steps, "final": self.final()}

    def final(self) -> dict:
        def digest_hex(key) -> str | None:
            return None if key is None else get_block_hash(key).hex()

        cached: dict[str, list[int]] = {}
        n = len(self.mgr.kv_cache_config.kv_cache_groups)
        by_group: dict[str, dict[str, list[int]]] = {str(g): {} for g in range(n)}
        for key, value in self.pool.cached_block_hash_to_block._cache.items():
            ids = [blk.block_id for blk in value.values()] if isinstance(value, dict) else [value.block_id]
            gid = int.from_bytes(bytes(key)[-4:], "big")
            by_group[str(gid)].setdefault(digest_hex(key), []).extend(ids)
            if not self.hybrid or gid == 0:  # `cached` is group 0's (design section 8)
                cached.setdefault(digest_hex(key), []).extend(ids)

        stats = self.mgr.prefix_cache_stats  # never reset by make_*: totals
        return {
            "free_queue": [blk.block_id for blk in self.pool.free_block_queue.get_all_free_blocks()],
            "blocks": [
                {
                    "id": blk.block_id,
                    "ref_cnt": blk.ref_cnt,
                    "hash": digest_hex(blk.block_hash),
                }
                for blk in self.pool.blocks
                if not blk.is_null
            ],
            "cached": cached,
            "requests": {
                rid: {
                    "block_ids": list(self.mgr.get_block_ids(rid)[0]),
                    "num_computed_tokens": req.num_computed_tokens,
                    "block_hashes": [h.hex() for h in req.block_hashes],
                    **({"block_ids_by_group": [list(g) for g in self.mgr.get_block_ids(rid)]} if self.hybrid else {}),
                }
                for rid, req in self.live.items()
            },
            "stats": {
                "requests": stats.requests,
                "queries": stats.queries,
                "hits": stats.hits,
                "preempted_requests": stats.preempted_requests,
                "preempted_queries": stats.preempted_queries,
                "preempted_hits": stats.preempted_hits,
            },
            "reset_ok": self.reset_ok,
            "none_hash": self.none_hash,
            "hash_seed": self.hash_seed,
            "vllm": vllm.__version__,
            **({"cached_by_group": by_group} if self.hybrid else {}),
        }


def hybrid_vectors() -> dict:
    """Spec part 2 rules 64 and 74 (hybrid), which no scenario can state: rule 64 evicts hashes
    by hand and records every call of the fixed point; rule 74 needs use_eagle. Run with
    vLLM's own hybrid KVCacheManager (rule 70's recipe)."""
    from vllm.v1.core import single_type_kv_cache_manager as stm

    os.environ.pop("PYTHONHASHSEED", None)
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(16, hash_fn)

    def manager(windows, retention, use_eagle=False):
        eng = {
            "block_size": 16,
            "kv_cache_groups": [
                {"kind": "full_attention", "block_size": 16, "sliding_window": None},
                *({"kind": "sliding_window", "block_size": 16, "sliding_window": w} for w in windows),
            ],
            "prefix_cache_retention_interval": retention,
        }
        groups, hbs, sbs, ri = kv_cache_groups(eng)
        cfg = KVCacheConfig(
            num_blocks=64, kv_cache_tensors=[], kv_cache_groups=groups, prefix_cache_retention_interval=ri
        )
        return KVCacheManager(
            cfg,
            max_model_len=4096,
            scheduler_block_size=sbs,
            hash_block_size=hbs,
            enable_caching=True,
            enable_kv_cache_events=True,
            log_stats=True,
            use_eagle=use_eagle,
        )

    def request(rid, tokens):
        return Request(
            request_id=rid,
            prompt_token_ids=list(tokens),
            sampling_params=SamplingParams(max_tokens=16),
            pooling_params=None,
            block_hasher=hasher,
        )

    def admit(mgr, r):
        blocks, hit, spb = mgr.get_computed_blocks(r)
        r.shared_prefix_boundary = spb
        mgr.allocate_slots(r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks)
        r.num_computed_tokens = r.num_tokens

    out: dict = {}
    # rule 64: FA + SWA-32 + SWA-64, dense; evict SWA-64 blocks 4..7 and SWA-32 blocks 2..3.
    mgr = manager([32, 64], None)
    a = request("A", range(140))
    admit(mgr, a)
    pool = mgr.block_pool
    fa, swa32, swa64 = mgr.get_block_ids("A")
    for bid in [*swa64[4:8], *swa32[2:4]]:
        blk = pool.blocks[bid]
        pool.cached_block_hash_to_block.pop(blk.block_hash, bid)
        blk.reset_hash()
    calls = []
    originals = {}
    for cls in (stm.FullAttentionManager, stm.SlidingWindowManager):
        originals[cls] = cls.__dict__["find_longest_cache_hit"]

        def recorded(klass, *args, _orig=originals[cls].__func__, **kw):
            blocks, hit = _orig(klass, *args, **kw)
            calls.append([getattr(kw["kv_cache_spec"], "sliding_window", None), kw["max_length"], hit])
            return blocks, hit

        cls.find_longest_cache_hit = classmethod(recorded)
    try:
        q = request("Q", [*range(140), *range(1000, 1020)])
        blocks, hit, spb = mgr.get_computed_blocks(q)
    finally:
        for cls, orig in originals.items():
            cls.find_longest_cache_hit = orig
    out["rule64"] = {"calls": calls, "hit": hit, "spb": spb, "blocks": [list(g) for g in blocks.get_block_ids()]}
    # rule 74: FA + SWA-32, dense, with and without EAGLE.
    for use_eagle in (True, False):
        mgr = manager([32], None, use_eagle)
        a = request("A", range(100))
        admit(mgr, a)
        b = request("B", [*range(100), *([5] * 50)])
        blocks, hit, _ = mgr.get_computed_blocks(b)
        out[f"rule74_eagle_{use_eagle}"] = {
            "hit": hit,
            "blocks": [list(g) for g in blocks.get_block_ids()],
            "replay_boundaries": list(_replay_boundaries(mgr.coordinator, a)),
            "eagle_group_ids": sorted(mgr.coordinator.eagle_group_ids),
        }
    return out


def _replay_boundaries(coordinator, request) -> tuple[int, ...]:
    """The coordinator's replay boundaries of ``request``: a coordinator method in 0.31.0, a
    module function of the prompt length in 0.33.0 (kv_cache_coordinator.py:65-86)."""
    if hasattr(coordinator, "get_replay_boundaries"):
        return coordinator.get_replay_boundaries(request)
    from vllm.v1.core.kv_cache_coordinator import replay_boundaries

    return replay_boundaries(
        request.num_prompt_tokens,
        coordinator.scheduler_block_size,
        use_eagle=bool(coordinator.drop_eagle_group_ids),
    )


def replay(scenario: dict) -> dict:
    """The replay JSON; with ``"timing": {"repeat": N}`` in the input (the `bench` command),
    the scenario is replayed N times and ``"timing": {"replay_s": [...]}`` is added: the
    seconds of each op loop (engine construction, event encoding and the JSON excluded)."""
    timing = scenario.get("timing")
    if not timing:
        return Replay(scenario).run(scenario["ops"])
    seconds = []
    for _ in range(max(1, int(timing.get("repeat", 1)))):
        rep = Replay(scenario)
        result = rep.run(scenario["ops"])
        seconds.append(rep.replay_seconds)
    result["timing"] = {"replay_s": seconds}
    return result


def normalize_toml_scenario(raw: dict) -> dict:
    """A scenario TOML whose prompts and tokens are integer arrays, in the normalized form the
    protocol carries (the `bench` command's whole-command comparison: both sides read the same
    file with tomllib). LoRA ids are 1, 2, ... in order of first appearance, as design.md says."""
    engine = {
        "block_size": 16,
        "num_blocks": 300,
        "max_model_len": 1048576,
        "hash_algo": "sha256",
        "hash_seed": None,
        "enable_prefix_caching": True,
        "events": True,
        "int_block_hashes": True,
        **raw.get("engine", {}),
    }
    engine["hash_seed"] = engine["hash_seed"] or None
    lora_ids: dict[str, int] = {}
    ops = []
    for step in raw.get("steps", []):
        name = step["op"]
        op: dict = {"op": name}
        if name == "reset":
            op["running"] = bool(step.get("running", False))
        else:
            op["id"] = step["id"]
        if name == "arrive":
            lora = step.get("lora")
            if lora is not None:
                lora_ids.setdefault(lora, len(lora_ids) + 1)
                lora = {"name": lora, "id": lora_ids[lora], "path": step.get("lora_path", f"loras/{lora}")}
            op.update(
                prompt=list(step["prompt"]),
                lora=lora,
                cache_salt=step.get("cache_salt"),
                mm=sorted(step.get("mm", []), key=lambda m: m["offset"]),
                prompt_logprobs=bool(step.get("prompt_logprobs", False)),
            )
        elif name == "admit":
            op["tokens"] = step.get("tokens")
        elif name == "decode" and "draft_tokens" in step:
            op["draft_tokens"] = step["draft_tokens"]
        elif name in ("sample", "generate"):
            op["tokens"] = list(step["tokens"])
        ops.append(op)
    return {"engine": engine, "ops": ops}


def run_toml_file(path: str) -> str:
    """The whole of a `run FILE --json` on vLLM's side, timed (the `bench` command): read the
    file with tomllib, normalize, replay, encode the replay JSON. Returns the protocol line
    ``{"whole_s": seconds, "result": <replay JSON>}``; imports are not timed."""
    import tomllib

    start = time.perf_counter()
    with open(path, "rb") as f:
        scenario = normalize_toml_scenario(tomllib.load(f))
    text = json.dumps(replay(scenario))
    seconds = time.perf_counter() - start
    return f'{{"whole_s": {seconds!r}, "result": {text}}}'


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            if message.get("vectors") == "hybrid":
                _PROTOCOL_OUT.write(json.dumps(hybrid_vectors()) + "\n")
                _PROTOCOL_OUT.flush()
                continue
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
