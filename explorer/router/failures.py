"""The failure switches and what they do: each `FailureSpec` switch breaks one link of the
chain from an engine's block hashes to the router's lookup; `explain` turns the numbers of a
run into one sentence per switch that is on."""

from __future__ import annotations

from explorer.core.hashing import NON_CRYPTO_HASH_ALGOS
from explorer.router.config import BASELINE, POLICIES, POLICY_LABELS
from explorer.router.results import FleetResult

# ---- the wrong values a switch gives the router ------------------------------------------------


def other_algo(algo: str) -> str:
    """The algorithm a misconfigured router uses instead of ``algo``."""
    return {"sha256": "sha256_cbor", "sha256_cbor": "sha256", "xxhash": "xxhash_cbor", "xxhash_cbor": "xxhash"}[algo]


def other_block_size(block_size: int) -> int:
    return 32 if block_size != 32 else 16


def other_seed(seed: str) -> str:
    """A router started with PYTHONHASHSEED=0 (which vLLM reads as the NONE_HASH seed)."""
    return "0" if seed != "0" else "1"


# ---- what each switch does, and what it did ------------------------------------------------------


SWITCH_HELP: dict[str, str] = {
    "router_hash_algo": (
        "The router hashes with another algorithm than the instances (say sha256_cbor against "
        "sha256). Every block hash differs, so no published hash ever matches one of the router's."
    ),
    "router_hash_seed": (
        "The router's NONE_HASH comes from another seed: vLLM reads PYTHONHASHSEED as the seed, so a "
        "router process started with PYTHONHASHSEED=0 chains from another first parent, and every "
        "hash of the chain differs."
    ),
    "router_block_size": (
        "The router cuts prompts into blocks of another size. Its blocks hold other tokens, so "
        "their hashes exist nowhere in the fleet."
    ),
    "router_wrong_hash_form": (
        "Events carry the low 64 bits of each hash as an int (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, "
        "on by default); a router that keys its lookup on the raw 32-byte digests compares bytes "
        "with ints and never finds one."
    ),
    "xxhash_unshared_seed": (
        "With xxhash and no PYTHONHASHSEED every vLLM process draws its own random seed (a "
        "predictable one would let an attacker precompute collisions), so equal prompts hash "
        "differently on every instance and on the router."
    ),
    "tenant_salt": (
        "Each tenant sends its own cache_salt. It goes into the first block's extra keys, so the "
        "whole chain differs per tenant: a tenant only ever hits its own blocks, even on a shared "
        "system prompt (which closes the timing side channel)."
    ),
    "router_ignores_salt": (
        "The router hashes without the request's cache_salt, while the instances hash with it: "
        "its chains match nothing."
    ),
    "drop_batches": (
        "Some event batches never reach the router and nobody asks for a replay. The subscriber "
        "counts the gaps, but its view goes stale: stores it missed look absent, removals it "
        "missed leave phantom blocks behind."
    ),
}


def explain(result: FleetResult) -> list[tuple[str, str]]:
    """(switch, one sentence from the numbers) for each failure switch that is on, then a line
    comparing the policies."""
    cfg, s = result.config, result.setup
    f = cfg.failures
    run = result.runs.get("prefix")
    base = result.runs.get(BASELINE)
    out: list[tuple[str, str]] = []
    if run is None:
        return out
    rr = result.runs.get("round_robin")
    matched = run.predicted
    known = run.router_keys_known
    total = run.router_keys
    tail = f"the prefix-aware hit rate is {run.hit_rate:.1%}"
    if base is not None:
        tail += f" (with every switch off: {base.hit_rate:.1%})"
    if rr is not None:
        tail += f", round robin {rr.hit_rate:.1%}"
    zero = (
        f"the router matched {matched:,} tokens: {known:,} of its {total:,} distinct block hashes were ever in an "
        f"instance's published set, so it routed on load and tie-break alone; {tail}."
    )
    if f.router_hash_algo and f.router_hash_algo != s.engine_algo:
        out.append(
            ("router_hash_algo", f"Router hashes with {f.router_hash_algo}, instances with {s.engine_algo}: " + zero)
        )
    if f.router_hash_seed is not None and f.router_hash_seed != s.engine_seeds[0]:
        out.append(
            (
                "router_hash_seed",
                f"Router seeds NONE_HASH with {f.router_hash_seed!r}, the instances with "
                f"{run.instances[0].seed!r}: " + zero,
            )
        )
    if f.router_block_size and f.router_block_size != cfg.fleet.block_size:
        out.append(
            (
                "router_block_size",
                f"Router cuts {f.router_block_size}-token blocks, the instances "
                f"{cfg.fleet.block_size}-token ones: " + zero,
            )
        )
    if f.router_wrong_hash_form:
        what = (
            "raw digests against 64-bit int event hashes"
            if s.event_form == "int64"
            else "64-bit ints against raw-digest event hashes"
        )
        out.append(("router_wrong_hash_form", f"Router compares {what}: " + zero))
    if f.xxhash_unshared_seed or (s.engine_algo in NON_CRYPTO_HASH_ALGOS and len(set(s.engine_seeds)) > 1):
        out.append(
            (
                "xxhash_unshared_seed",
                f"The {cfg.fleet.instances} instances run {s.engine_algo} with "
                f"{len(set(s.engine_seeds))} different drawn seeds and the router with one more: " + zero,
            )
        )
    if f.tenant_salt:
        if f.router_ignores_salt:
            out.append(
                ("router_ignores_salt", "Instances hash with each tenant's cache_salt, the router without: " + zero)
            )
        else:
            base_cross = base.cross_tenant_hit_tokens if base is not None else None
            more = f" (without salts {base_cross:,} hit tokens crossed tenants)" if base_cross is not None else ""
            out.append(
                (
                    "tenant_salt",
                    f"With a cache_salt per tenant, {run.cross_tenant_hit_tokens:,} hit tokens "
                    f"crossed tenants{more}: {cfg.workload.tenants} tenants sharing "
                    f"{cfg.workload.system_prompts} system prompts now each cache their own copy; {tail}.",
                )
            )
    if f.drop_batches > 0:
        sub = run.subscriber
        phantom = sum(i.phantom for i in run.instances)
        missing = sum(i.missing for i in run.instances)
        chk = run.prediction_check()
        base_match = f" (with every batch: {base.predicted:,})" if base is not None else ""
        unseen = run.dropped_batches - sub["lost"]
        more = f"; {unseen:,} more went unnoticed (at the start or the end of an instance's stream)" if unseen else ""
        out.append(
            (
                "drop_batches",
                f"{run.dropped_batches:,} of {run.published_batches:,} batches were lost and "
                f"the subscriber counted {sub['gaps']:,} missing sequence numbers (no replay){more}: at the end the router's view holds {phantom:,} "
                f"evicted blocks and misses {missing:,} cached ones; it matched {matched:,} tokens{base_match}, "
                f"and for {chk['over'] + chk['under']:,} requests admitted at once its match differed from the "
                f"engine's hit; {tail}.",
            )
        )
    if not out:
        ll = result.runs.get("least_loaded")
        parts = [f"{POLICY_LABELS[p]} {result.runs[p].hit_rate:.1%}" for p in POLICIES if p in result.runs]
        chk = run.prediction_check()
        line = (
            f"Hit rate: {', '.join(parts)}. The router's match equalled the engine's own hit for "
            f"{chk['exact']:,} of {chk['exact'] + chk['over'] + chk['under']:,} requests admitted at once"
        )
        if ll is not None and ll.hits:
            line += f"; it saved {run.saved_ms - ll.saved_ms:,.0f} ms of estimated prefill over least-loaded"
        out.append(("healthy", line + "."))
    return out
