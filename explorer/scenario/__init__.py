"""Scenarios: TOML in, validated ops, a replay through the core recorded as a Trace, and `run`."""
