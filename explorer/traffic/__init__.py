"""Trace replay: Mooncake request traces through the faithful engine, and simulators to compare."""
