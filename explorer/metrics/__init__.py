"""Prometheus metrics and the log line as vLLM 0.31.0 exports them, recorded from engine-step replays."""
