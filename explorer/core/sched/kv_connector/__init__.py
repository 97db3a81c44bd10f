"""KV connectors on the scheduler side: the base, the static test store, CPU offloading."""
