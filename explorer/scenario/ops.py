"""The ops of a scenario (design section 3), validated, one frozen class per op.

Manager-level scenarios have `Arrive`, `Admit`, `Sample`, `Decode`, `Generate`, `Finish`,
`Preempt` and `Reset`; engine-step scenarios (design section 7) have `EngineArrive` (with the
tokens the model samples), `StepOp`, `Abort` and `EngineReset` (with `external`). Each class
carries only its own fields; its `op` names it as the TOML, the JSON and the messages do.
`normalized()` is the JSON form the conformance oracles read and keys the disk cache of vLLM's
answers: its bytes must not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from explorer.scenario.parse_connector import ExternalSpec


@dataclass(frozen=True)
class LoraSpec:
    name: str
    id: int  # 1, 2, ... in order of first appearance in the scenario
    path: str


@dataclass(frozen=True)
class MMSpec:
    id: str
    offset: int
    length: int


@dataclass(frozen=True, kw_only=True)
class OpBase:
    """What every op has: its place in the scenario, the request it names (None for `reset`
    and `step`), its note and what it expects."""

    op: ClassVar[str]
    index: int  # 0-based position in the scenario
    id: str | None = None
    note: str | None = None
    expect: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How messages name this step: 1-based number, op and id (a long id cut short)."""
        who = "" if self.id is None else f" {self.id}" if len(self.id) <= 40 else f" {self.id[:40]}..."
        return f"step {self.index + 1} ({self.op}{who})"

    def normalized(self) -> dict[str, Any]:
        """The JSON form the conformance oracle reads (every spec already expanded)."""
        return {"op": self.op, "id": self.id}


@dataclass(frozen=True, kw_only=True)
class RequestOp(OpBase):
    """An op on one request."""

    id: str


@dataclass(frozen=True, kw_only=True)
class Arrival(RequestOp):
    """What both kinds of `arrive` carry: the request's prompt and extra keys."""

    op: ClassVar[str] = "arrive"
    prompt: tuple[int, ...] = ()
    lora: LoraSpec | None = None
    cache_salt: str | None = None
    prompt_logprobs: bool = False

    def _head(self) -> dict[str, Any]:
        lora = self.lora
        return {
            **super().normalized(),
            "prompt": list(self.prompt),
            "lora": None if lora is None else {"name": lora.name, "id": lora.id, "path": lora.path},
            "cache_salt": self.cache_salt,
        }


@dataclass(frozen=True, kw_only=True)
class Arrive(Arrival):
    """A manager-level `arrive`: a request is created (nothing is allocated)."""

    text: str | None = None  # the text the prompt was tokenized from, if given as text
    mm: tuple[MMSpec, ...] = ()

    def normalized(self) -> dict[str, Any]:
        mm = [{"id": m.id, "offset": m.offset, "length": m.length} for m in self.mm]
        return {**self._head(), "mm": mm, "prompt_logprobs": self.prompt_logprobs}


@dataclass(frozen=True, kw_only=True)
class EngineArrive(Arrival):
    """An engine-step `arrive` (``EngineCore.add_request``): no text, no images."""

    output: tuple[int, ...]  # the tokens the model samples
    ext: ExternalSpec | None = None  # what the static KV connector holds (design section 10)
    accepted: tuple[int, ...] | None = None  # drafts accepted per decode step (design section 9)

    def normalized(self) -> dict[str, Any]:
        d = {**self._head(), "prompt_logprobs": self.prompt_logprobs, "output": list(self.output)}
        if self.ext is not None:
            d.update(self.ext.as_dict())
        if self.accepted is not None:
            d["accepted"] = list(self.accepted)
        return d


@dataclass(frozen=True, kw_only=True)
class Admit(RequestOp):
    op: ClassVar[str] = "admit"
    tokens: int | None = None  # how many tokens to schedule; None: all that are left

    def normalized(self) -> dict[str, Any]:
        return {**super().normalized(), "tokens": self.tokens}


@dataclass(frozen=True, kw_only=True)
class Sample(RequestOp):
    op: ClassVar[str] = "sample"
    tokens: tuple[int, ...]  # the token ids sampled, appended to the request

    def normalized(self) -> dict[str, Any]:
        return {**super().normalized(), "tokens": list(self.tokens)}


@dataclass(frozen=True, kw_only=True)
class Decode(RequestOp):
    op: ClassVar[str] = "decode"
    draft_tokens: int | None = None  # drafts this step verifies (design section 9)

    def normalized(self) -> dict[str, Any]:
        d = super().normalized()
        if self.draft_tokens is not None:
            d["draft_tokens"] = self.draft_tokens
        return d


@dataclass(frozen=True, kw_only=True)
class Generate(RequestOp):
    op: ClassVar[str] = "generate"
    tokens: tuple[int, ...]  # decoded one at a time, each computed, then sampled

    def normalized(self) -> dict[str, Any]:
        return {**super().normalized(), "tokens": list(self.tokens)}


@dataclass(frozen=True, kw_only=True)
class Finish(RequestOp):
    op: ClassVar[str] = "finish"


@dataclass(frozen=True, kw_only=True)
class Preempt(RequestOp):
    op: ClassVar[str] = "preempt"


@dataclass(frozen=True, kw_only=True)
class Abort(RequestOp):
    """An engine-step `abort`: ``finish_requests(id, FINISHED_ABORTED)``."""

    op: ClassVar[str] = "abort"


@dataclass(frozen=True, kw_only=True)
class Reset(OpBase):
    """``reset_prefix_cache``; with ``running``, the running requests are preempted first."""

    op: ClassVar[str] = "reset"
    id: None = None
    running: bool = False

    def normalized(self) -> dict[str, Any]:
        return {"op": self.op, "running": self.running}


@dataclass(frozen=True, kw_only=True)
class EngineReset(Reset):
    """An engine-step `reset`; with ``external``, the KV connector's cache is reset too."""

    external: bool = False

    def normalized(self) -> dict[str, Any]:
        return {**super().normalized(), "external": self.external}


@dataclass(frozen=True, kw_only=True)
class StepOp(OpBase):
    """An engine-step `step`: one ``EngineCore.step()``."""

    op: ClassVar[str] = "step"
    id: None = None

    def normalized(self) -> dict[str, Any]:
        return {"op": self.op}


ManagerOp = Arrive | Admit | Sample | Decode | Generate | Finish | Preempt | Reset
EngineOp = EngineArrive | StepOp | Abort | EngineReset
Op = ManagerOp | EngineOp
