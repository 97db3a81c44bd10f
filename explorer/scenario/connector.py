"""A scenario's KV connector (design section 10): the core's connector and its played worker."""

from __future__ import annotations

from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase, KVTransferConfig
from explorer.core.sched.kv_connector.offloading import OffloadingConnector, OffloadingWorker
from explorer.core.sched.kv_connector.static import Held, StaticConnector, StaticWorker
from explorer.scenario.parse_connector import ConnectorSpec, ExternalSpec
from explorer.scenario.spec import EngineConfig


def make_connector(
    spec: ConnectorSpec | None, cfg: EngineConfig, release: VllmRelease = VLLM_0_31
) -> tuple[KVConnectorBase | None, ConnectorWorker | None]:
    """The scheduler side and the played worker side of ``engine.kv_connector`` (kv_both)."""
    if spec is None:
        return None, None
    config = KVTransferConfig("kv_both", spec.failure_policy)
    if spec.kind == "static":
        return StaticConnector(config), StaticWorker()
    assert spec.kind == "offloading", spec.kind
    connector = OffloadingConnector(
        config,
        spec.cpu_blocks,
        cfg.block_size,
        cfg.enable_prefix_caching,
        cfg.events,
        cfg.int_block_hashes,
        release,
    )
    return connector, OffloadingWorker()


def held(ext: ExternalSpec | None) -> Held:
    """What the static store holds for a request, from its `arrive` (nothing without keys)."""
    if ext is None:
        return Held(0, False)
    return Held(ext.tokens, ext.load == "async", ext.load_steps, ext.invalid_blocks)
