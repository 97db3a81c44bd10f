"""Prefix Cache Explorer: a faithful, step-by-step model of vLLM 0.31.0's prefix cache."""

__version__ = "0.1.0"
