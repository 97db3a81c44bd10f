"""A scenario's KV connector (design section 10): the core's connector and its played worker."""

from __future__ import annotations

from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase, KVTransferConfig
from explorer.core.sched.kv_connector.static import Held, StaticConnector, StaticWorker
from explorer.scenario.parse_connector import ConnectorSpec, ExternalSpec


def make_connector(spec: ConnectorSpec | None) -> tuple[KVConnectorBase | None, ConnectorWorker | None]:
    """The scheduler side and the played worker side of ``engine.kv_connector`` (kv_both)."""
    if spec is None:
        return None, None
    config = KVTransferConfig("kv_both", spec.failure_policy)
    if spec.kind == "static":
        return StaticConnector(config), StaticWorker()
    raise NotImplementedError(spec.kind)


def held(ext: ExternalSpec | None) -> Held:
    """What the static store holds for a request, from its `arrive` (nothing without keys)."""
    if ext is None:
        return Held(0, False)
    return Held(ext.tokens, ext.load == "async", ext.load_steps, ext.invalid_blocks)
