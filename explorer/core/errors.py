"""Typed errors the core raises for calls that vLLM would refuse or that make no sense.

All derive from `BadInput`, so the command line and the web app report them as one clear
line; the message says what was wrong.
"""

from explorer.errors import BadInput


class ConfigError(BadInput):
    """An engine setting out of range: block size 0, fewer than 2 blocks, unknown hash."""


class RequestError(BadInput):
    """A request that cannot exist: empty prompt, too long, a bad image placeholder."""


class SchedulingError(BadInput):
    """A manager call that does not fit the request's state (nothing to compute, ...)."""
