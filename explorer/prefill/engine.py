"""Requests through the explorer's KV cache manager, their KV in the model's paged pool.

The story of the walkthrough, run for real:
1. request A shares its first ``hit`` tokens with B (then differs). A is looked up (no hit),
   allocated, prefilled into the pool, and freed: its full blocks stay cached, ref count 0;
2. B is looked up: the manager finds exactly A's hit blocks. ``allocate_slots`` touches them and
   hands out new blocks for the rest; the model computes only the suffix, reading the hit blocks
   of the pool as A left them. That is the *cached* run;
3. the same prompt as a request that skips reading the cache (vLLM's flag for requests that want
   prompt logprobs) gets fresh blocks for every token and computes all of them: the *full* run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.prefill.configs import BLOCK_SIZE
from explorer.prefill.model import PagedLlama
from explorer.prefill.paged_kv import PagedKVPool
from explorer.request_steps import RequestSteps

Progress = Callable[[float, str], None]


def prompt_pair(
    vocab_size: int, prompt_tokens: int, hit_tokens: int, seed: int = 0, tokens: list[int] | None = None
) -> tuple[list[int], list[int]]:
    """A's prompt and B's. B is ``tokens`` when given, else seeded random ids (ids below 32,
    control tokens in real vocabularies, avoided). A is B's first ``hit`` tokens and then one
    token that differs, so that B's lookup stops exactly at ``hit`` (no A when hit is 0)."""
    low = min(32, vocab_size // 2)
    if tokens is None:
        rng = random.Random(seed)
        b = [rng.randrange(low, vocab_size) for _ in range(prompt_tokens)]
    else:
        b = list(tokens)
    if hit_tokens == 0:
        return [], b
    other = b[hit_tokens] + 1 if b[hit_tokens] + 1 < vocab_size else low
    return b[:hit_tokens] + [other], b


def pool_blocks_needed(prompt_tokens: int, decode_tokens: int) -> int:
    """The null block + two copies of B's blocks (cached and full) with room to decode.

    A needs no room of its own: it is freed before B arrives, B takes over its hit blocks,
    and A's one unhashed block goes back to the free queue.
    """
    return 1 + 2 * -(-(prompt_tokens + decode_tokens) // BLOCK_SIZE)


class PagedEngine:
    """One manager and one pool, and the request-level steps of a scheduler + model runner."""

    def __init__(self, model: PagedLlama, num_blocks: int) -> None:
        self.model = model
        self.mgr = KVCacheManager(num_blocks, block_size=BLOCK_SIZE, max_model_len=model.cfg.max_model_len)
        self.sched = RequestSteps(self.mgr)
        self.pool: PagedKVPool = model.new_pool(num_blocks)
        self.hasher = get_request_block_hasher(BLOCK_SIZE, init_none_hash("sha256"))

    def admit(self, request_id: str, tokens: list[int], read_cache: bool = True) -> tuple[Request, int]:
        """Lookup + allocate_slots for the whole prompt; the hit length it got."""
        # A request that skips reading the cache is vLLM's own notion (prompt logprobs need
        # every prompt token computed): the lookup returns no hit and nothing is touched.
        req = Request(request_id, tokens, self.hasher, prompt_logprobs=not read_cache)
        admitted = self.sched.admit(req)
        if not admitted.ok:
            raise RuntimeError(f"the pool has no room for request {request_id}")  # sized to fit: a bug
        return req, admitted.hit_tokens

    def table(self, req: Request) -> list[int]:
        return self.mgr.get_blocks(req.request_id).get_block_ids_of_group(0)

    def prefill(self, req: Request, hit: int) -> torch.Tensor:
        return self.model.forward(req.all_token_ids[hit:], hit, self.table(req), self.pool)

    def greedy(self, req: Request, logits: torch.Tensor, n: int) -> list[int]:
        """n greedy tokens: the first from the prefill's logits, each next one after a decode
        step that allocates through the manager and writes into the request's blocks."""
        out: list[int] = []
        for step in range(n):
            tok = int(torch.argmax(logits))
            out.append(tok)
            if step == n - 1:
                break  # as in vLLM, the last sampled token is never computed
            req.append_output_token_ids(tok)
            if self.sched.compute_pending(req) is None:
                raise RuntimeError("the pool has no room to decode")
            logits = self.model.forward([tok], req.num_tokens - 1, self.table(req), self.pool)
        return out


@dataclass
class PreparedPair:
    """B admitted twice, ready to run: once after A left its blocks in the cache (cached), once
    reading nothing from the cache (full). Running either again rewrites the same values into
    the request's own new blocks; the hit blocks are only read."""

    engine: PagedEngine
    b_tokens: list[int]
    hit_tokens: int
    a_table: list[int]  # A's blocks as A held them (empty without a hit)
    cached: Request
    full: Request
    cached_table: list[int]  # the prompt's block tables, fixed once admitted
    full_table: list[int]

    def __post_init__(self) -> None:
        # Token ids and tables go to the device once, so that a timed run is the model's work
        # and not the copying of its inputs.
        dev = self.engine.model.device
        self._suffix = torch.tensor(self.b_tokens[self.hit_tokens :], device=dev)
        self._prompt = torch.tensor(self.b_tokens, device=dev)
        self._cached_t = torch.tensor(self.cached_table, device=dev)
        self._full_t = torch.tensor(self.full_table, device=dev)

    @property
    def hit_block_ids(self) -> list[int]:
        return self.cached_table[: self.hit_tokens // BLOCK_SIZE]

    def run_cached(self) -> torch.Tensor:
        """Compute only the suffix; positions [0, hit) are read from the hit blocks."""
        return self.engine.model.forward(self._suffix, self.hit_tokens, self._cached_t, self.engine.pool)

    def run_full(self) -> torch.Tensor:
        return self.engine.model.forward(self._prompt, 0, self._full_t, self.engine.pool)


def prepare_pair(
    model: PagedLlama,
    prompt_tokens: int,
    hit_tokens: int,
    decode_tokens: int = 4,
    seed: int = 0,
    tokens: list[int] | None = None,
    progress: Progress | None = None,
) -> PreparedPair:
    """Steps 1 and 2 of the story (module docstring): A prefilled and freed, B looked up and
    allocated twice. Raises if the manager does not find exactly ``hit_tokens``."""
    say = progress or (lambda f, m: None)
    a_tokens, b_tokens = prompt_pair(model.cfg.vocab_size, prompt_tokens, hit_tokens, seed, tokens)
    eng = PagedEngine(model, pool_blocks_needed(prompt_tokens, decode_tokens))
    a_table: list[int] = []
    if hit_tokens:
        say(0.05, f"prefilling request A ({len(a_tokens)} tokens) into the pool")
        a, _ = eng.admit("A", a_tokens)
        a_table = eng.table(a)
        eng.prefill(a, 0)
        eng.sched.finish(a)  # A finishes; its full blocks stay cached with ref count 0
    b, got = eng.admit("B", b_tokens)
    if got != hit_tokens:
        raise RuntimeError(f"the manager found a {got}-token hit, expected {hit_tokens}")
    full, _ = eng.admit("B-full", b_tokens, read_cache=False)
    return PreparedPair(eng, b_tokens, hit_tokens, a_table, b, full, eng.table(b), eng.table(full))


def corrupted_block_effect(model: PagedLlama, prompt_tokens: int, hit_tokens: int, seed: int = 0) -> dict[str, float]:
    """Overwrite the first hit block in the pool with noise and rerun both prefills.

    The cached run reads that block, so its logits must move; the full run has its own blocks,
    so its logits must not. Proof that the cached run really reads the manager's blocks.
    """
    if hit_tokens < BLOCK_SIZE:
        raise ValueError("needs a hit of at least one block")
    pair = prepare_pair(model, prompt_tokens, hit_tokens, seed=seed)
    cached, full = pair.run_cached(), pair.run_full()
    kv = pair.engine.pool.kv
    block = pair.hit_block_ids[0]
    gen = torch.Generator(device=kv.device).manual_seed(seed + 1)
    noise = torch.randn(kv[:, :, block].shape, generator=gen, device=kv.device, dtype=kv.dtype)
    kv[:, :, block] = noise * 3.0
    return {
        "block_id": block,  # an int is a float to type checkers
        "cached_change": float((pair.run_cached() - cached).abs().max()),
        "full_change": float((pair.run_full() - full).abs().max()),
    }
