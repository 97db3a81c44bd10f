"""Who hashes how: the effective hashing of the engines and of the router under a config's
failure switches, and a memo that hands each engine the prompt chains already computed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from explorer.core.hashing import NON_CRYPTO_HASH_ALGOS, BlockHash, HashContext, init_none_hash
from explorer.core.request import Request
from explorer.router.config import FleetConfig
from explorer.router.stream import RequestStream


def drawn_seed(label: str, seed: int) -> str:
    """What ``os.urandom(32).hex()`` would give, drawn from the workload seed so a run repeats."""
    return random.Random(f"{label}-{seed}").randbytes(32).hex()


@dataclass(frozen=True)
class HashSetup:
    """The effective hashing of the engines and of the router under a config's switches."""

    engine_algo: str
    engine_seeds: tuple[str | None, ...]  # per instance: the seed to pass (None = the default)
    event_form: str  # what the events carry: "int64" or "digest"
    router_algo: str
    router_seed: str | None
    router_block_size: int
    router_form: str
    router_salt: bool  # the router hashes with the request's cache_salt

    def router_ctx(self) -> HashContext:
        return init_none_hash(self.router_algo, self.router_seed)


def hash_setup(cfg: FleetConfig) -> HashSetup:
    f, fl, seed = cfg.failures, cfg.fleet, cfg.workload.seed
    algo = fl.hash_algo
    fleet_seed: str | None = fl.hash_seed or None
    if f.xxhash_unshared_seed:
        algo = algo if algo in NON_CRYPTO_HASH_ALGOS else "xxhash"
        fleet_seed = None
    if algo in NON_CRYPTO_HASH_ALGOS and fleet_seed is None:
        # Each vLLM process draws os.urandom(32).hex(); here the draws come from the seed.
        seeds: tuple[str | None, ...] = tuple(drawn_seed(f"instance-{i}", seed) for i in range(fl.instances))
        router_seed: str | None = drawn_seed("router", seed)
    else:
        seeds = (fleet_seed,) * fl.instances
        router_seed = fleet_seed
    if f.router_hash_seed is not None:
        router_seed = f.router_hash_seed
    event_form = "int64" if fl.int_block_hashes else "digest"
    router_form = event_form
    if f.router_wrong_hash_form:
        router_form = "digest" if event_form == "int64" else "int64"
    return HashSetup(
        engine_algo=algo,
        engine_seeds=seeds,
        event_form=event_form,
        router_algo=f.router_hash_algo or algo,
        router_seed=router_seed,
        router_block_size=f.router_block_size or fl.block_size,
        router_form=router_form,
        router_salt=f.tenant_salt and not f.router_ignores_salt,
    )


def tenant_salt(tenant: int) -> str:
    return f"tenant-{tenant}"


class HashMemo:
    """Prompt hash chains of one stream, per (algorithm, resolved seed, block size, salted).

    Equal inputs give equal hashes, so a chain computed once (by the router or by any engine
    with the same hashing) is handed to every later engine with the same hashing instead of
    being recomputed: it only saves time. Engines hash their output blocks themselves.
    """

    def __init__(self, stream: RequestStream) -> None:
        self.stream = stream
        self.tables: dict[tuple[str, str, int, bool], dict[int, tuple[BlockHash, ...]]] = {}
        self.computed = 0

    def table(self, ctx: HashContext, block_size: int, salted: bool) -> dict[int, tuple[BlockHash, ...]]:
        return self.tables.setdefault((ctx.algo, ctx.hash_seed, block_size, salted), {})


class MemoHasher:
    """An engine's request block hasher that takes a new request's prompt chain from the memo
    (request ids are ``r<stream index>``) and runs the real hasher for everything else."""

    def __init__(
        self, real: Callable[[Request], list[BlockHash]], table: dict[int, tuple[BlockHash, ...]], memo: HashMemo
    ) -> None:
        self.real, self.table, self.memo = real, table, memo

    def __call__(self, request: Request) -> list[BlockHash]:
        if request.block_hashes or request.output_token_ids:
            return self.real(request)
        k = int(request.request_id[1:])
        got = self.table.get(k)
        if got is None:
            got = self.table[k] = tuple(self.real(request))
            self.memo.computed += 1
        return list(got)
