"""What an engine-step replay JSON must satisfy, checked from the scenario and the JSON alone.

`check_invariants(scenario, result)` lists every violation (an empty list: none). It needs no
mirror of the scheduler, so it checks vLLM's own answers (and can check ours): the budget and
max_num_seqs per step, the played tokens delivered in order and exactly once, a finished
request having exactly ``len(output)`` tokens (or, length-capped, max_model_len tokens with its
prompt), the shapes of entries, events and the final state (free queue + blocks in use = the
pool, the hash map, the live requests), and the stats.
`check_expects(raw, result)` compares a golden TOML's ``expect`` tables with the JSON.
"""

from __future__ import annotations

from typing import Any

STAT_FIELDS = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")
EXTERNAL_STAT_FIELDS = tuple(f"external_{n}" for n in STAT_FIELDS)
STEP_KEYS = {"op", "id", "ok", "events", "scheduled", "outputs", "preempted", "finished", "step_stats"}
# With hybrid KV cache groups (design section 8) a step also reports these maps.
GROUP_STEP_KEYS = {"group_hit_tokens", "shared_prefix_boundary", "new_block_ids_by_group"}
# With a KV connector (design section 10) a step also reports each connector allocation.
CONNECTOR_STEP_KEYS = {"external"}
LIVE_STATUSES = {"waiting", "running", "preempted"}


def _add_stats(total: dict[str, int], stats: dict[str, int]) -> None:
    for name in STAT_FIELDS:
        total[name] += stats[name]


def check_invariants(scenario: dict[str, Any], result: dict[str, Any]) -> list[str]:
    eng = scenario["engine"]
    ops = scenario["ops"]
    bad: list[str] = []
    steps = result.get("steps", [])
    if len(steps) != len(ops):
        return [f"{len(steps)} entries for {len(ops)} ops"]
    caching = eng["enable_prefix_caching"]
    events_on = eng["events"]
    hybrid = "kv_cache_groups" in eng
    bs = eng["hash_block_size"] if hybrid else eng["block_size"]
    sync = eng["scheduler"] == "sync"
    connector = "kv_connector" in eng
    offloading = connector and eng["kv_connector"]["kind"] == "offloading"
    # Under `fail`, a request whose load reports invalid blocks ends finished_error, short.
    fail_policy = connector and eng["kv_connector"]["failure_policy"] == "fail"
    may_fail = {op["id"] for op in ops if op["op"] == "arrive" and fail_policy and op.get("invalid_external_blocks")}
    step_keys = STEP_KEYS | (GROUP_STEP_KEYS if hybrid else set()) | (CONNECTOR_STEP_KEYS if connector else set())

    outputs: dict[str, list[int]] = {}  # the played tokens of each live request
    prompts: dict[str, list[int]] = {}
    delivered: dict[str, list[int]] = {}
    live: list[str] = []
    reported = dict.fromkeys(STAT_FIELDS, 0)
    reset_ok: list[bool] = []
    for i, (op, entry) in enumerate(zip(ops, steps)):
        where = f"steps[{i}] ({op['op']})"
        if entry.get("op") != op["op"]:
            bad.append(f"{where}: op {entry.get('op')!r}")
            continue
        want_id = op.get("id") if op["op"] in ("arrive", "abort") else None
        if entry.get("id") != want_id:
            bad.append(f"{where}: id {entry.get('id')!r}, not {want_id!r}")
        if op["op"] != "step" and entry.get("events") != []:
            bad.append(f"{where}: only steps carry events")
        if op["op"] == "arrive":
            rid = op["id"]
            if rid in live:
                bad.append(f"{where}: {rid} arrived while live")
            live.append(rid)
            outputs[rid], prompts[rid], delivered[rid] = op["output"], op["prompt"], []
        elif op["op"] == "abort":
            if op["id"] in live:
                live.remove(op["id"])
        elif op["op"] == "reset":
            reset_ok.append(entry.get("ok"))
            if op["running"] and not connector and entry.get("ok") is not True:
                bad.append(f"{where}: a reset that preempts every running request succeeds (no connector)")
        if op["op"] != "step":
            if entry.get("ok") is not True and op["op"] != "reset":
                bad.append(f"{where}: ok {entry.get('ok')!r}")
            continue

        if set(entry) != step_keys:
            bad.append(f"{where}: keys {sorted(entry)}")
            continue
        if entry["ok"] is not True:
            bad.append(f"{where}: a step is always ok")
        scheduled = entry["scheduled"]
        if sum(scheduled.values()) > eng["max_num_batched_tokens"]:
            bad.append(f"{where}: {sum(scheduled.values())} tokens over the budget {eng['max_num_batched_tokens']}")
        if len(scheduled) > eng["max_num_seqs"]:
            bad.append(f"{where}: {len(scheduled)} requests over max_num_seqs {eng['max_num_seqs']}")
        for rid, n in scheduled.items():
            if rid not in live or not isinstance(n, int) or n <= 0:
                bad.append(f"{where}: scheduled {rid}: {n!r} (live: {live})")
        for rid in entry["preempted"]:
            if rid not in live:
                bad.append(f"{where}: preempted {rid}, which is not live")
        if entry["step_stats"] is None:
            if entry["outputs"] or entry["finished"] or entry["events"]:
                bad.append(f"{where}: no update ran, yet outputs, finished or events")
            if sync and scheduled:
                bad.append(f"{where}: a sync step that schedules also updates")
        else:
            if set(entry["step_stats"]) != set(STAT_FIELDS):
                bad.append(f"{where}: step_stats keys {sorted(entry['step_stats'])}")
                continue
            _add_stats(reported, entry["step_stats"])
        if sync and not set(entry["outputs"]) <= set(scheduled):
            bad.append(f"{where}: a sync update applies the batch it scheduled")
        for rid, toks in entry["outputs"].items():
            if rid not in live or not toks:
                bad.append(f"{where}: output {toks!r} for {rid}, which is not live")
                continue
            got = delivered[rid] + toks
            if got != outputs[rid][: len(got)]:
                bad.append(f"{where}: {rid} delivered {got}, not a prefix of its output")
            delivered[rid] = got
        for rid in entry["finished"]:
            if rid not in live:
                bad.append(f"{where}: finished {rid}, which is not live")
                continue
            # FINISHED_LENGTH_CAPPED: vLLM stops a request as soon as it holds max_model_len
            # tokens (sched/utils.py:114-119), short of its output; it admits only a prompt
            # below max_model_len, so that is exactly prompt + delivered tokens.
            capped = len(prompts[rid]) + len(delivered[rid]) == eng["max_model_len"]
            if delivered[rid] != outputs[rid] and not capped and rid not in may_fail:
                bad.append(f"{where}: {rid} finished with {len(delivered[rid])} of {len(outputs[rid])} tokens")
            live.remove(rid)
        for ev in entry["events"]:
            if offloading and ev.get("medium") == "CPU":
                # The CPU tier's events (design section 10): one chunk a BlockStored, vLLM's
                # placeholder payload naming the chunk's group (section 8); with GPU caching off
                # the tier still caches.
                if not events_on or _bad_cpu_event(ev, len(eng.get("kv_cache_groups") or [None])):
                    bad.append(f"{where}: CPU tier event {ev}")
                continue
            if not events_on or (not caching and ev.get("type") != "AllBlocksCleared"):
                # With caching off a reset still clears (and says so); nothing is stored.
                bad.append(f"{where}: a {ev.get('type')} event with events or caching off")
                break
            if ev.get("type") == "BlockStored":
                hashes = ev.get("block_hashes", [])
                # (a window group's retention leaves blocks of the range unhashed: no count to check)
                if not hybrid and (len(ev.get("token_ids", [])) != bs * len(hashes) or ev.get("block_size") != bs):
                    bad.append(
                        f"{where}: BlockStored of {len(hashes)} blocks with {len(ev.get('token_ids', []))} tokens"
                    )
                want = int if eng["int_block_hashes"] else str
                if not all(isinstance(h, want) for h in hashes):
                    bad.append(f"{where}: block hashes are not {want.__name__}")
            elif ev.get("type") not in ("BlockRemoved", "AllBlocksCleared"):
                bad.append(f"{where}: event type {ev.get('type')!r}")

    bad.extend(_check_final(eng, result.get("final", {}), live, prompts, delivered, reported, reset_ok))
    return bad


def _bad_cpu_event(ev: dict[str, Any], num_groups: int) -> bool:
    if ev.get("group_idx") not in range(num_groups):
        return True
    if ev.get("type") == "BlockStored":
        placeholder = ev.get("token_ids") == [] and ev.get("block_size") == 0
        return len(ev.get("block_hashes", [])) != 1 or not placeholder
    return ev.get("type") != "BlockRemoved" or not ev.get("block_hashes")


def _check_final(eng, final, live, prompts, delivered, reported, reset_ok) -> list[str]:
    bad: list[str] = []
    num_blocks = eng["num_blocks"]
    blocks = final.get("blocks", [])
    if [b["id"] for b in blocks] != list(range(1, num_blocks)):
        return ["final.blocks: not every block but the null one, by id"]
    free = final["free_queue"]
    if sorted(free) != [b["id"] for b in blocks if b["ref_cnt"] == 0] or len(set(free)) != len(free):
        bad.append("final.free_queue: not exactly the blocks with ref_cnt 0")
    hybrid = "kv_cache_groups" in eng
    hashed = {b["id"]: b["hash"] for b in blocks if b["hash"] is not None}
    if hybrid:  # every group's map; a full-attention block may hold a partial tail entry too
        in_map_ids = {bid for g in final["cached_by_group"].values() for ids in g.values() for bid in ids}
        if set(hashed) != in_map_ids:
            bad.append("final.cached_by_group: not exactly the blocks that hold a hash")
    elif hashed != {bid: h for h, ids in final["cached"].items() for bid in ids}:
        bad.append("final.cached: not exactly the blocks that hold a hash")
    reqs = final["requests"]
    if sorted(reqs) != sorted(live):
        bad.append(f"final.requests: {sorted(reqs)}, live {sorted(live)}")
    held = {}
    for rid, req in reqs.items():
        if rid not in prompts:
            continue
        if req["status"] not in LIVE_STATUSES:
            bad.append(f"final.requests.{rid}: status {req['status']!r}")
        if req["num_output_tokens"] != len(delivered[rid]):
            bad.append(
                f"final.requests.{rid}: {req['num_output_tokens']} output tokens, {len(delivered[rid])} delivered"
            )
        num_tokens = len(prompts[rid]) + req["num_output_tokens"]
        hash_bs = eng["hash_block_size"] if hybrid else eng["block_size"]
        want_hashes = num_tokens // hash_bs if eng["enable_prefix_caching"] else 0
        if len(req["block_hashes"]) != want_hashes:
            bad.append(f"final.requests.{rid}: {len(req['block_hashes'])} block hashes for {num_tokens} tokens")
        for bid in (b for g in req["block_ids_by_group"] for b in g if b) if hybrid else req["block_ids"]:
            held[bid] = held.get(bid, 0) + 1
    ref = {b["id"]: b["ref_cnt"] for b in blocks}
    if any(ref.get(bid) != n for bid, n in held.items()) or sum(ref.values()) != sum(held.values()):
        bad.append("final: ref counts are not the live requests' block tables")
    connector = "kv_connector" in eng
    # A connector adds its external_* totals (design section 10); no step reports them.
    stats = {n: final["stats"][n] for n in STAT_FIELDS}
    if connector and set(final["stats"]) != set(STAT_FIELDS) | set(EXTERNAL_STAT_FIELDS):
        bad.append(f"final.stats keys {sorted(final['stats'])}")
    if any(stats[n] < reported[n] for n in STAT_FIELDS):
        bad.append(f"final.stats {stats} below the reported {reported}")
    if eng["scheduler"] == "sync" and stats != reported:
        bad.append(f"final.stats {stats}: a sync engine reports every admission in its step ({reported})")
    if final["reset_ok"] != reset_ok:
        bad.append(f"final.reset_ok {final['reset_ok']}, entries {reset_ok}")
    # With prefix caching off and a connector, vLLM still builds the hasher (design section 10).
    if (final["none_hash"] is None) == (eng["enable_prefix_caching"] or connector):
        bad.append("final.none_hash: null iff prefix caching is off (and no connector)")
    return bad


def _external_records(scenario: dict[str, Any], steps: list[dict[str, Any]]) -> list[bool]:
    """Per op: whether it may record external stats (a connector allocation other than the
    promotion after the request's own async load, which looks nothing up)."""
    kv = scenario["engine"].get("kv_connector")
    if kv is None:
        return [False] * len(steps)
    loads_async = {}
    for op in scenario["ops"]:
        if op["op"] == "arrive":
            loads_async[op["id"]] = kv["kind"] == "offloading" or op.get("external_load", kv["load"]) == "async"
    last_offer: dict[str, int] = {}
    out = []
    for op, entry in zip(scenario["ops"], steps):
        if op["op"] == "arrive":
            last_offer.pop(op["id"], None)
        recorded = False
        for rid, tokens in entry.get("external", {}).items():
            promotion = tokens == 0 and last_offer.get(rid, 0) > 0 and loads_async.get(rid, False)
            recorded = recorded or not promotion
            last_offer[rid] = tokens
        out.append(recorded)
    return out


def check_expects(raw: dict[str, Any], scenario: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Every ``expect`` of a golden TOML, against the replay JSON.

    Checkable here: ``scheduled``, ``preempted``, ``finished``, ``event_types``, ``ok`` and the
    hybrid maps on any step; the ``stats_*`` totals on any step of a sync engine
    (it reports each admission in its own step) and on the last op of an async one; the
    ``stats_external_*`` totals (which no step reports) on any step after which no op allocates
    through the connector or resets it; ``num_free_blocks`` and ``free_queue`` on the
    last op. Anything else is a failure, so that no golden states what nobody checked.
    """
    bad: list[str] = []
    steps = result["steps"]
    totals = dict.fromkeys(STAT_FIELDS, 0)
    running_totals = []
    for entry in steps:
        if entry.get("step_stats"):
            _add_stats(totals, entry["step_stats"])
        running_totals.append(dict(totals))
    last = len(steps) - 1
    final = result["final"]
    records = _external_records(scenario, steps)
    for index, step in enumerate(raw.get("steps", [])):
        for key, want in step.get("expect", {}).items():
            entry = steps[index]
            if key in (
                "scheduled",
                "preempted",
                "finished",
                "ok",
                "group_hit_tokens",
                "shared_prefix_boundary",
                "new_block_ids_by_group",
            ):
                got = entry.get(key)
            elif key == "event_types":
                got = [ev["type"] for ev in entry["events"]]
            elif key.startswith("stats_") and key[6:] in EXTERNAL_STAT_FIELDS:
                # No step reports the external totals: checkable where they are final, i.e. on
                # the last op or when no later op records any (a connector lookup at admission;
                # an async load's promotion looks nothing up) or resets them.
                if any(records[index + 1 :]) or any(
                    st.get("op") == "reset" and st.get("external") for st in raw["steps"][index + 1 :]
                ):
                    bad.append(f"steps[{index}]: {key} is checkable only after the last connector allocation")
                    continue
                got = final["stats"][key[6:]]
            elif key.startswith("stats_") and key[6:] in STAT_FIELDS:
                if index == last:
                    got = final["stats"][key[6:]]
                elif scenario["engine"]["scheduler"] == "sync":
                    got = running_totals[index][key[6:]]
                else:
                    bad.append(f"steps[{index}]: {key} of an async engine is checkable on the last op only")
                    continue
            elif key in ("num_free_blocks", "free_queue") and index == last:
                got = final["free_queue"] if key == "free_queue" else len(final["free_queue"])
            else:
                bad.append(f"steps[{index}]: expect key {key!r} is not checkable here")
                continue
            if got != want:
                bad.append(f"steps[{index}]: expected {key} = {want!r}, vLLM gives {got!r}")
    return bad
