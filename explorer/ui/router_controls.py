"""The router page's controls: their keys in st.session_state, and the mapping both ways
between a fleet file's config and their values.

No Streamlit calls here: both functions read and write a mapping (the page passes
st.session_state), so the mapping can be checked without a browser session.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import replace
from typing import Any

from explorer.router.config import FleetConfig
from explorer.router.failures import other_algo, other_block_size, other_seed

BASE = "router_base_key"  # the key of the fleet file the controls were last set from
UI_MAX_REQUESTS = 1000

W_LOAD = "router_load_weight"
W_TIE = "router_tie_break"
W_REQUESTS = "router_requests"
W_SEED = "router_seed"
W_INSTANCES = "router_instances"
W_ALGO = "router_f_algo"
W_SEEDF = "router_f_seed"
W_BS = "router_f_block_size"
W_FORM = "router_f_form"
W_XX = "router_f_xxhash"
W_SALT = "router_f_salt"
W_IGNORE = "router_f_ignore_salt"
W_DROP = "router_f_drop"
CONTROL_KEYS = (
    W_LOAD,
    W_TIE,
    W_REQUESTS,
    W_SEED,
    W_INSTANCES,
    W_ALGO,
    W_SEEDF,
    W_BS,
    W_FORM,
    W_XX,
    W_SALT,
    W_IGNORE,
    W_DROP,
)
KEPT = "router_kept"  # the page's widget values across a visit to another page (explorer.ui.kept)


def sync_controls(ss: MutableMapping[str, Any], base: FleetConfig) -> None:
    """Controls start from the fleet file whenever the file (not a control) changes."""
    key = base.key()
    if ss.get(BASE) == key:
        return
    ss[BASE] = key
    f = base.failures
    ss[W_LOAD] = float(base.router.load_weight)
    ss[W_TIE] = base.router.tie_break
    ss[W_REQUESTS] = min(base.workload.requests, UI_MAX_REQUESTS)
    ss[W_SEED] = base.workload.seed
    ss[W_INSTANCES] = base.fleet.instances
    ss[W_ALGO] = bool(f.router_hash_algo) and f.router_hash_algo != base.fleet.hash_algo
    ss[W_SEEDF] = f.router_hash_seed is not None
    ss[W_BS] = bool(f.router_block_size) and f.router_block_size != base.fleet.block_size
    ss[W_FORM] = f.router_wrong_hash_form
    ss[W_XX] = f.xxhash_unshared_seed
    ss[W_SALT] = f.tenant_salt
    ss[W_IGNORE] = f.router_ignores_salt
    ss[W_DROP] = float(f.drop_batches)


def apply_controls(ss: MutableMapping[str, Any], base: FleetConfig) -> FleetConfig:
    """The config the controls describe: the fleet file with the controls' router settings and
    failure switches. A switch that is on keeps the file's own wrong value where it gives one,
    else takes the usual wrong one (`other_algo`, `other_seed`, `other_block_size`)."""
    fl = base.fleet
    bf = base.failures
    failures = replace(
        bf,
        router_hash_algo=(
            bf.router_hash_algo
            if bf.router_hash_algo and bf.router_hash_algo != fl.hash_algo
            else other_algo(fl.hash_algo)
        )
        if ss[W_ALGO]
        else "",
        router_hash_seed=(bf.router_hash_seed if bf.router_hash_seed is not None else other_seed(fl.hash_seed))
        if ss[W_SEEDF]
        else None,
        router_block_size=(
            bf.router_block_size
            if bf.router_block_size and bf.router_block_size != fl.block_size
            else other_block_size(fl.block_size)
        )
        if ss[W_BS]
        else 0,
        router_wrong_hash_form=bool(ss[W_FORM]),
        xxhash_unshared_seed=bool(ss[W_XX]),
        tenant_salt=bool(ss[W_SALT]),
        router_ignores_salt=bool(ss[W_SALT] and ss[W_IGNORE]),
        drop_batches=round(float(ss[W_DROP]), 4),
    )
    return replace(
        base,
        fleet=replace(fl, instances=int(ss[W_INSTANCES])),
        router=replace(base.router, load_weight=float(ss[W_LOAD]), tie_break=ss[W_TIE]),
        workload=replace(base.workload, requests=int(ss[W_REQUESTS]), seed=int(ss[W_SEED])),
        failures=failures,
    )
