"""A sweep's grid on Ray: one task per cell, the prepared trace shared through the object store.

What runs where: the driver (the `sweep` command, or the replay page's worker process) parses
the trace and hashes it once per block size (`hashing.prepare`), packs it into numpy arrays
(`packed.py`) and puts them in Ray's object store once. Each cell is one Ray task, wherever the
cluster schedules it: it maps the arrays, rebuilds the prepared trace and runs `sweep.run_cell`,
the very code `replay` runs for that cell, so a cell's result equals a serial replay's. A cell is
an exact sequential replay and is never split; the parallelism is across cells.

Without an address the driver starts a local Ray instance for the command (``ray.init`` on
127.0.0.1 with as many CPUs as the machine has) and stops it at the end; ``auto`` or
``HOST:PORT`` joins a running cluster (``ray start --head``). Workers run at normal priority
(``RAY_worker_niceness=0``): by default Ray lowers its workers' priority, and then on a busy
machine the replays starve behind everything else. Ctrl-C (KeyboardInterrupt in the driver)
force-cancels every unfinished task (its worker process is killed) before the driver leaves.
Ray is imported here only, when a sweep starts, so the app and the other commands never need it.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import BadInput
from explorer.traffic.hashing import prepare
from explorer.traffic.packed import Packed, pack, unpack
from explorer.traffic.scheduled import SchedulerPolicy
from explorer.traffic.sweep import add_bounds, check_work, run_cell
from explorer.traffic.trace import RequestTrace

MAX_CELLS = 1024  # tasks one sweep submits
REPO = Path(__file__).resolve().parents[2]

# progress(cells done, cells in all, seconds since the first task was submitted)
CellProgress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Cell:
    block_size: int
    policy: str
    num_blocks: int | None  # None: unbounded, which has no cache size
    scheduler: str | None = None  # scheduler cells only: "async" or "sync"


@dataclass
class GridResult:
    results: list[dict[str, Any]]  # one per cell, in the grid's order
    backend: str  # "local" or "ray://HOST:PORT"
    seconds: float  # wall time, Ray's start included
    hash_seconds: float = 0.0  # parsing excluded, every block size
    blocks_hashed: int = 0


def plan_cells(
    block_sizes: Sequence[int], sizes: Sequence[int], policies: Sequence[str], schedulers: Sequence[str]
) -> list[Cell]:
    """The grid, block size outermost; unbounded once per block size, ``schedulers``
    multiplying only the scheduler cells."""
    cells: list[Cell] = []
    for bs in block_sizes:
        for p in policies:
            if p == "unbounded":
                cells.append(Cell(bs, p, None))
            elif p == "scheduler":
                cells.extend(Cell(bs, p, n, s) for s in schedulers for n in sizes)
            else:
                cells.extend(Cell(bs, p, n) for n in sizes)
    if len(cells) > MAX_CELLS:
        raise BadInput(f"the grid has {len(cells):,} cells; at most {MAX_CELLS:,}")
    return cells


def cell_result(cell: Cell, run: Any, prompt_tokens: int) -> dict[str, Any]:
    """A cell's JSON: the grid coordinates and the fields `replay --json` gives for it
    (the scheduler policy's figures under ``figures``: ``scheduler`` names the scheduler)."""
    d: dict[str, Any] = {
        "policy": cell.policy,
        "num_blocks": cell.num_blocks,
        "block_size": cell.block_size,
        "requests": run.requests,
        "skipped": run.skipped,
        "prompt_tokens": prompt_tokens,
        "hit_tokens": run.hit_tokens,
        "hit_rate": run.hit_rate,
        "tokens_per_s": round(prompt_tokens / run.seconds, 1) if run.seconds > 0 else 0.0,
        "seconds": round(run.seconds, 4),
    }
    if cell.scheduler is not None:
        d["scheduler"] = cell.scheduler
        d["figures"] = run.scheduler
    # The miss reasons and the bounds (design section 14), as `replay --json` gives them.
    for key in ("miss_tokens", "bound_infinite", "bound_belady"):
        if getattr(run, key, None) is not None:
            d[key] = getattr(run, key)
    return d


def run_packed_cell(
    packed: Packed, source: str, cell: Cell, mnbt: int, step_ms: float, with_hits: bool = False
) -> dict[str, Any]:
    """One task: rebuild the prepared trace from the shared arrays and replay the cell.
    Its ``seconds`` count the rebuild too (what the cell costs the worker); ``with_hits`` adds
    the hit tokens of every request (the replay page's time plot)."""
    t0 = time.perf_counter()
    prep = unpack(packed, source, need_output_hashes=True)
    policy = SchedulerPolicy(cell.scheduler or "async", mnbt, step_ms)
    run = run_cell(prep, cell.policy, cell.num_blocks, policy)
    run.seconds = time.perf_counter() - t0
    add_bounds(prep, [run])  # a cell's bounds, as a serial replay adds them (not in its seconds)
    d = cell_result(cell, run, prep.trace.prompt_tokens)
    if with_hits:
        d["hits"] = run.hits
    return d


def _check_reachable(address: str, named_by: str, timeout_s: float = 5.0) -> None:
    """Refuse a HOST:PORT where nothing accepts a connection: Ray itself would retry its GCS for
    minutes before giving up. ``auto`` is left to Ray (it finds the cluster on this machine)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        if address != "auto":
            raise BadInput(f"{named_by} {address}: not auto or HOST:PORT")
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise BadInput(f"{named_by} {address}: no Ray cluster there ({e.strerror or e})") from None


def _connect(address: str | None, named_by: str) -> str:
    """Start a local Ray instance (address None) or join a cluster; the backend's name.
    ``named_by`` says where the address came from, for the message when no cluster answers."""
    if address is not None:
        _check_reachable(address, named_by)  # before Ray's import: a refused address is told at once
    host = (address or "127.0.0.1").rsplit(":", 1)[0]
    if host in ("127.0.0.1", "localhost", "::1", "[::1]") or host.startswith("127."):
        # Ray turns a loopback address into this machine's outward IP ("remotely reachable")
        # unless it is told the cluster is single-machine; a loopback cluster stays on loopback.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 (Ray's own spelling; the raylet reads it)
    import ray

    # Workers import the explorer from this checkout (the same path on every machine of a cluster).
    runtime_env = {"env_vars": {"PYTHONPATH": str(REPO), "RAY_worker_niceness": "0"}}
    if address is None:
        for attempt in (1, 2):  # Ray gives its raylet a fixed 30 s to register: a busy machine may miss it once
            try:
                ray.init(
                    # a new instance, never a cluster that `ray start` left on this machine
                    # (Ray joins the one named in its temp folder when no address is given)
                    address="local",
                    num_cpus=os.cpu_count() or 1,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    log_to_driver=False,
                    runtime_env=runtime_env,
                )
                break
            except Exception as e:  # Ray raises a bare Exception when its processes start too slowly
                ray.shutdown()
                if attempt == 2:
                    raise BadInput(f"the local Ray instance did not start: {str(e).splitlines()[0][:300]}") from None
        return "local"
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise BadInput(f"{named_by} {address}: no Ray cluster there ({str(e).splitlines()[0][:200]})") from None
    return "ray://" + str(ray.get_runtime_context().gcs_address)


def run_grid(
    trace: RequestTrace,
    cells: Sequence[Cell],
    outputs: bool = False,
    max_num_batched_tokens: int = 2048,
    step_ms: float = 20.0,
    address: str | None = None,
    progress: CellProgress | None = None,
    max_blocks_hashed: int | None = None,
    max_output_tokens: int | None = None,
    with_hits: bool = False,
    address_named_by: str = "--ray",
) -> GridResult:
    """Every cell of the grid as a Ray task; results in the grid's order. ``address``: None
    starts a local Ray instance for this grid; ``auto`` or ``HOST:PORT`` joins a cluster
    (``address_named_by`` names where it came from in the message when none answers)."""
    block_sizes = sorted({c.block_size for c in cells})
    for bs in block_sizes:
        check_work(
            trace, bs, outputs, max_blocks_hashed, max_output_tokens, any(c.policy == "scheduler" for c in cells)
        )
    if any(c.policy == "scheduler" for c in cells):
        for s in {c.scheduler for c in cells if c.scheduler}:
            SchedulerPolicy(s, max_num_batched_tokens, step_ms).config()  # bad settings fail first
    t0 = time.perf_counter()
    backend = _connect(address, address_named_by)  # imports Ray itself, after setting what Ray reads on import
    import ray

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C reaches us, not Ray's handler
    pending: dict[Any, int] = {}
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_packed_cell)
        refs = {}
        hash_s, hashed = 0.0, 0
        for bs in block_sizes:  # hashed once per block size, shared by its cells
            prep = prepare(trace, bs, outputs)
            hash_s, hashed = hash_s + prep.seconds, hashed + prep.blocks_hashed
            refs[bs] = ray.put(pack(prep))
            del prep
        for i, c in enumerate(cells):
            pending[task.remote(refs[c.block_size], trace.source, c, max_num_batched_tokens, step_ms, with_hits)] = i
        results: list[dict[str, Any] | None] = [None] * len(cells)
        started = time.perf_counter()
        if progress is not None:
            progress(0, len(cells), 0.0)
        while pending:
            # a short timeout: a blocking wait would hold a Ctrl-C until the next cell ends
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                results[pending.pop(ref)] = ray.get(ref)
            if done and progress is not None:
                progress(len(cells) - len(pending), len(cells), time.perf_counter() - started)
    finally:
        for ref in pending:  # Ctrl-C or an error: no task goes on without us
            ray.cancel(ref, force=True)
        ray.shutdown()
    done_results = [r for r in results if r is not None]
    return GridResult(done_results, backend, time.perf_counter() - t0, hash_s, hashed)
