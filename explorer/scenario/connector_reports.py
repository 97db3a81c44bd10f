"""What the scheduler reports about the KV connector in a step (design section 10), one frozen
class per kind; `EngineStepRecord.connector` (trace.py) keeps them in report order. Each kind's
name (`kind`) is what the text form and the panels call it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ConnectorLookup:
    """The scheduler asked the connector about a waiting request: the local hit, the
    connector's offer after it (None: it cannot tell yet) and whether it loads asynchronously."""

    kind: ClassVar[str] = "lookup"
    request_id: str
    num_local_tokens: int
    num_external_tokens: int | None
    load_async: bool


@dataclass(frozen=True)
class ConnectorLoaded:
    """An async load finished: the request is cached up to ``num_tokens`` (after invalid blocks,
    ``failed``: only the valid prefix)."""

    kind: ClassVar[str] = "loaded"
    request_id: str
    num_tokens: int
    failed: bool


@dataclass(frozen=True)
class ConnectorLoadFailed:
    """A load reported invalid blocks: ``num_tokens`` stay valid, ``evicted`` lost their hashes."""

    kind: ClassVar[str] = "failed"
    request_id: str
    num_tokens: int
    evicted: tuple[int, ...]


@dataclass(frozen=True)
class CpuStore:
    """The offloading connector's store job for ``hashes``, evicting ``cpu_evicted`` from the
    CPU tier; ``refused``: too few chunks to evict, nothing stored."""

    kind: ClassVar[str] = "cpu_store"
    request_id: str
    hashes: tuple[bytes, ...]
    cpu_evicted: tuple[bytes, ...]
    refused: bool


@dataclass(frozen=True)
class CpuLoad:
    """The offloading connector's load job: ``hashes`` go into GPU blocks ``block_ids``."""

    kind: ClassVar[str] = "cpu_load"
    request_id: str
    hashes: tuple[bytes, ...]
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class CpuJobsDone:
    """The offloading worker's report for a step: chunks written, loads done (no one request)."""

    kind: ClassVar[str] = "cpu_done"
    request_id: ClassVar[str] = ""
    hashes: tuple[bytes, ...]  # chunks written to the CPU tier
    cpu_loaded: tuple[bytes, ...]  # chunks whose load into GPU blocks is done


# What the scheduler reported about the KV connector in a step (design section 10), one class a kind.
ConnectorReport = ConnectorLookup | ConnectorLoaded | ConnectorLoadFailed | CpuStore | CpuLoad | CpuJobsDone
