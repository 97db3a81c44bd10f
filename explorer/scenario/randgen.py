"""Random valid scenarios (design section 3), for conformance checks, `bench` and practice.

``random_scenario(seed, num_ops)`` returns the raw, TOML-shaped dict of a scenario
(``{"title", "engine", "steps"}``) whose every step is valid in the state the steps before it
leave: the generator replays its own steps as it goes (a lean `ScenarioEngine`) and draws each
op from what is possible now, so the engine never raises `BadInput` on its output. Failed
allocations, refused resets and evictions are valid outcomes and happen on purpose: small
pools, shared system prompts, repeated and extended prompts, chunked prefill, preemption,
resets under load, reused request ids, LoRA, images, cache salts and prompt logprobs.

The same seed gives the same dict. No ``expect`` is written: a comparison with another engine
is the check. No Streamlit, no module-level mutable state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from explorer.core.request import RequestStatus
from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.ops import Arrival, Generate, Sample
from explorer.scenario.parse import StepParser, parse_scenario_dict
from explorer.scenario.randgen_profiles import PROFILES, Profile, draw_engine, draw_groups
from explorer.scenario.spec import ENGINE_DEFAULTS, Scenario
from explorer.tokens import format_token_spec

__all__ = ["Profile", "PROFILES", "random_scenario", "scenario_tokens"]

_LORA_NAMES = ("sql", "chat", "math")
_SALTS = ("s1", "s2", "tenant-a", "")  # an empty salt adds no key, in vLLM as here


# ---- prompts ----------------------------------------------------------------------------------


@dataclass
class _Prompt:
    """A prompt with its extra-key inputs, kept so later prompts can share its prefix."""

    tokens: list[int]
    lora: str | None = None
    salt: str | None = None
    mm: list[tuple[str, int, int]] = field(default_factory=list)  # (id, offset, length)


class _Gen:
    def __init__(self, seed: int, profile: Profile, engine: dict[str, Any]) -> None:
        self.rng = random.Random(seed)
        self.p = profile
        self.bs = engine.get("block_size", ENGINE_DEFAULTS["block_size"])
        self.max_len = engine.get("max_model_len", ENGINE_DEFAULTS["max_model_len"])
        rng = self.rng
        # One path per LoRA name in a scenario: the default or an explicit one.
        self.lora_paths: dict[str, str | None] = {
            n: (None if rng.random() < 0.5 else f"adapters/{n}-v{rng.randint(1, 3)}") for n in _LORA_NAMES
        }
        self.next_token = rng.randint(0, 1000)
        self.images = 0
        self.history: list[_Prompt] = []
        self.systems = [
            self._fresh_prompt(rng.randint(*profile.system_blocks), with_features=rng.random() < 0.3)
            for _ in range(rng.randint(*profile.system_prompts))
        ]

    # ---- tokens --------------------------------------------------------------------------

    def _tokens(self, n: int) -> list[int]:
        """n fresh tokens: an ascending run, a repeat, or random ids."""
        rng = self.rng
        out: list[int] = []
        while len(out) < n:
            k = min(n - len(out), rng.randint(1, 3 * self.bs + 2))
            kind = rng.random()
            if kind < 0.4:
                start = self.next_token
                self.next_token += k
                out.extend(range(start, start + k))
            elif kind < 0.55:
                out.extend([rng.randint(0, 99)] * k)
            elif kind < 0.62:  # large ids: other pickle / CBOR integer encodings
                out.extend(rng.randint(1 << 16, (1 << 31) - 1) for _ in range(k))
            else:
                out.extend(rng.randint(0, 50_000) for _ in range(k))
        return out

    def _length(self, blocks: tuple[int, int]) -> int:
        return self.rng.randint(*blocks) * self.bs + self.rng.randint(0, self.bs - 1)

    def _draw_mm(self, lo: int, hi: int) -> list[tuple[str, int, int]]:
        """0-3 non-overlapping images inside [lo, hi)."""
        rng = self.rng
        if hi - lo < 2 or rng.random() >= self.p.p_mm:
            return []
        k = min(rng.randint(1, 3), (hi - lo) // 2)
        cuts = sorted(rng.sample(range(lo, hi + 1), 2 * k))
        out: list[tuple[str, int, int]] = []
        for i in range(k):
            # Identifiers repeat across prompts: the same image at another place.
            self.images += 1
            ident = f"img-{rng.randint(1, 4)}" if rng.random() < 0.6 else f"img-{self.images + 100}"
            if any(m[0] == ident for m in out):
                ident = f"{ident}-{i}"
            out.append((ident, cuts[2 * i], cuts[2 * i + 1] - cuts[2 * i]))
        return out

    def _features(self, prompt: _Prompt, lo: int) -> None:
        rng = self.rng
        if rng.random() < self.p.p_lora:
            prompt.lora = rng.choice(_LORA_NAMES)
        if rng.random() < self.p.p_salt:
            prompt.salt = rng.choice(_SALTS)
        prompt.mm.extend(self._draw_mm(lo, len(prompt.tokens)))

    def _fresh_prompt(self, blocks: int, with_features: bool = True) -> _Prompt:
        n = max(1, blocks * self.bs + self.rng.randint(0, self.bs - 1))
        prompt = _Prompt(self._tokens(min(n, self.max_len)))
        if with_features:
            self._features(prompt, 0)
        return prompt

    def _extend(self, base: _Prompt, cut: int, suffix: int) -> _Prompt:
        """base's first ``cut`` tokens (and the images inside them) + ``suffix`` fresh ones."""
        rng = self.rng
        cut = min(cut, len(base.tokens), self.max_len)
        suffix = min(suffix, self.max_len - cut)
        if cut + suffix == 0:
            suffix = 1
        p = _Prompt(base.tokens[:cut] + self._tokens(suffix))
        if rng.random() < 0.85:  # same adapter and salt, so the prefix can hit
            p.lora, p.salt = base.lora, base.salt
        else:
            self._features(p, len(p.tokens))
        p.mm = [m for m in base.mm if m[1] + m[2] <= cut]
        p.mm.extend(self._draw_mm(cut, len(p.tokens)))
        return p

    def new_prompt(self) -> _Prompt:
        rng, p = self.rng, self.p
        kind = rng.random()
        if kind < 0.35 and self.systems:
            base = rng.choice(self.systems)
            prompt = self._extend(base, len(base.tokens), self._length(p.suffix_blocks))
        elif kind < 0.5 and self.history:
            prompt = self._extend(rng.choice(self.history), 10**9, 0)  # the same prompt again
        elif kind < 0.7 and self.history:
            base = rng.choice(self.history)
            cut = rng.choice([rng.randint(0, len(base.tokens)), (len(base.tokens) // self.bs) * self.bs])
            prompt = self._extend(base, cut, self._length(p.suffix_blocks))
        else:
            prompt = self._fresh_prompt(rng.randint(*p.fresh_blocks))
        self.history.append(prompt)
        if len(self.history) > 24:
            self.history.pop(0)
        return prompt

    def arrive_step(self, rid: str) -> dict[str, Any]:
        rng = self.rng
        prompt = self.new_prompt()
        step: dict[str, Any] = {"op": "arrive", "id": rid}
        step["prompt"] = (
            format_token_spec(prompt.tokens) if rng.random() < self.p.p_spec_string else list(prompt.tokens)
        )
        if prompt.lora is not None:
            step["lora"] = prompt.lora
            path = self.lora_paths[prompt.lora]
            if path is not None:
                step["lora_path"] = path
        if prompt.salt is not None:
            step["cache_salt"] = prompt.salt
        if prompt.mm:
            items = [{"id": i, "offset": o, "length": n} for i, o, n in prompt.mm]
            if rng.random() < 0.3:
                rng.shuffle(items)  # the parser sorts them by offset
            step["mm"] = items
        if rng.random() < self.p.p_logprobs:
            step["prompt_logprobs"] = True
        return step

    def output_tokens(self, room: int) -> list[int] | str:
        n = min(room, self.rng.randint(*self.p.gen_tokens))
        toks = self._tokens(n)
        return format_token_spec(toks) if self.rng.random() < self.p.p_spec_string else toks


# ---- the generator ----------------------------------------------------------------------------


def random_scenario(
    seed: int,
    num_ops: int,
    *,
    profile: str | Profile = "mixed",
    engine: dict[str, Any] | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    """A random scenario of ``num_ops`` valid steps, as a raw TOML-shaped dict.

    ``profile`` picks the mix (`PROFILES`: "mixed" draws engine settings per seed, "bench" is
    one long serving-like run). ``engine`` overrides engine keys.
    """
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    rng = random.Random(f"{prof.name}:{seed}:engine")
    eng = dict(prof.engine) if prof.engine is not None else draw_engine(rng)
    if prof.extra.get("hybrid"):
        eng.update(draw_groups(rng, eng))
    if engine:
        eng.update(engine)
    gen = _Gen(seed, prof, eng)
    rng = gen.rng
    title = title or f"random {prof.name} scenario (seed {seed}, {num_ops} ops)"

    base = parse_scenario_dict({"title": title, "engine": eng, "steps": []}, "<random>")
    cfg = base.engine
    # The generator's own replay: hits decide how much is left to compute, so it must be the
    # real engine. A drawn xxhash seed is pinned: hits do not depend on the seed.
    seed_override = None
    if cfg.enable_prefix_caching and not cfg.hash_seed and cfg.hash_algo.startswith("xxhash"):
        seed_override = "0"
    sim = ScenarioEngine(base, seed_override, record=False)
    parser = StepParser("<random>", cfg)

    steps: list[dict[str, Any]] = []
    ids_ever: list[str] = []
    finished: list[str] = []
    counter = 0

    def new_id() -> str:
        nonlocal counter
        if finished and rng.random() < prof.p_reuse_id:
            rid = rng.choice(finished)
            finished.remove(rid)
            return rid
        counter += 1
        rid = chr(ord("A") + counter - 1) if counter <= 26 else f"r{counter}"
        ids_ever.append(rid)
        return rid

    for index in range(num_ops):
        reqs = sim.requests
        waiting = [r for r in reqs.values() if r.num_computed_tokens == 0]
        running = [r for r in reqs.values() if r.status == RequestStatus.RUNNING]
        partial = [r for r in running if r.num_computed_tokens < r.num_tokens]
        prefilling = [r for r in partial if r.num_computed_tokens < r.num_prompt_tokens]
        decodable = [r for r in running if r.num_computed_tokens >= r.num_prompt_tokens]
        choices: list[tuple[str, float]] = [
            ("arrive", prof.w_arrive if len(reqs) < prof.max_live else 0.0),
            ("admit", prof.w_admit if waiting else 0.0),
            ("continue", (prof.w_continue if prefilling else 0.0) + (0.3 if partial and not prefilling else 0.0)),
            ("output", prof.w_output if decodable else 0.0),
            ("finish", prof.w_finish if reqs else 0.0),
            ("preempt", prof.w_preempt if running else 0.0),
            ("reset", prof.w_reset),
        ]
        if not reqs:
            choices[0] = ("arrive", 1.0)
        kind = rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]
        step: dict[str, Any]
        if kind == "arrive":
            step = gen.arrive_step(new_id())
        elif kind in ("admit", "continue"):
            req = rng.choice(waiting if kind == "admit" else (prefilling or partial))
            step = {"op": "admit", "id": req.request_id}
            left = req.num_tokens - req.num_computed_tokens
            if rng.random() < prof.p_chunk:
                step["tokens"] = rng.choice(
                    [rng.randint(1, left), gen.bs * rng.randint(1, 3), left + rng.randint(0, 5)]
                )
        elif kind == "output":
            req = rng.choice(decodable)
            room = cfg.max_model_len - req.num_tokens
            pending = req.num_tokens - req.num_computed_tokens
            options = (["sample", "generate", "generate"] if room > 0 else []) + (
                ["decode", "decode"] if pending else []
            )
            if not options:  # at max_model_len with nothing pending: only finishing is left
                step = {"op": "finish", "id": req.request_id}
            else:
                op = rng.choice(options)
                step = {"op": op, "id": req.request_id}
                if op != "decode":
                    step["tokens"] = gen.output_tokens(room)
        elif kind == "finish":
            step = {"op": "finish", "id": rng.choice(list(reqs))}
        elif kind == "preempt":
            step = {"op": "preempt", "id": rng.choice(running).request_id}
        else:
            step = {"op": "reset"}
            if rng.random() < 0.5:
                step["running"] = True
            elif rng.random() < 0.3:
                step["running"] = False
        sim.apply(parser.parse(index, step))
        if step["op"] == "finish":
            finished.append(step["id"])
        steps.append(step)
    return {"title": title, "engine": eng, "steps": steps}


def scenario_tokens(scenario: Scenario) -> int:
    """Tokens a scenario pushes through the engine: prompts plus sampled / generated tokens."""
    total = 0
    for op in scenario.ops:
        if isinstance(op, Arrival):
            total += len(op.prompt)
        elif isinstance(op, (Sample, Generate)):
            total += len(op.tokens)
    return total
