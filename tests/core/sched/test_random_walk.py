"""A random walk over engine steps (both schedulers, small pools, budgets from 16 to 512):
arrivals sharing prefixes between steps, aborts, resets with and without running requests.
After every op the manager's invariants (tests/core/invariants.py), the event stream and the
scheduler's own invariants hold, and every request's sampled tokens are a prefix of its output."""

from __future__ import annotations

import random

import pytest

from explorer.core.request import Request
from tests.core.sched.helpers import Engine


def walk(seed: int) -> None:
    rng = random.Random(seed)
    bs = rng.choice((4, 8, 16))
    seqs = rng.randint(1, 6)
    budget = max(seqs, rng.choice((16, 32, 64, 128, 256, 512)))
    e = Engine(
        num_blocks=rng.randint(6, 40),
        block_size=bs,
        budget=budget,
        max_num_seqs=seqs,
        threshold=rng.choice((0, 0, 0, rng.randint(1, budget))),
        async_scheduling=rng.random() < 0.5,
        caching=rng.random() < 0.9,
    )
    docs = [[rng.randrange(1000) for _ in range(rng.randint(1, 80))] for _ in range(3)]
    every: dict[str, tuple[Request, list[int]]] = {}
    for n in range(rng.randint(40, 120)):
        x = rng.random()
        if x < 0.2:
            prompt = rng.choice(docs)[: rng.randint(1, 80)] + [
                rng.randrange(1000, 2000) for _ in range(rng.randint(0, 30))
            ]
            output = [rng.randrange(2000, 3000) for _ in range(rng.randint(1, 20))]
            rid = f"R{n}"
            every[rid] = (e.arrive(rid, prompt, output), output)
        elif x < 0.25 and every:
            e.core.abort_requests([rng.choice(sorted(every))])
        elif x < 0.28:
            e.core.reset_prefix_cache(reset_running_requests=rng.random() < 0.5)
        else:
            result = e.step()
            if result.scheduler_output is not None:
                assert result.scheduler_output.total_num_scheduled_tokens <= budget
                assert len(result.scheduler_output.num_scheduled_tokens) <= seqs
        e.check()
        for req, output in every.values():
            assert req.output_token_ids == output[: req.num_output_tokens], req


@pytest.mark.parametrize("seed", range(150))
def test_random_engine_steps_keep_every_invariant(seed):
    walk(seed)
