"""Typed errors the core raises for calls that vLLM would refuse or that make no sense.

All derive from `BadInput`, so the command line and the web app report them as one clear
line; the message says what was wrong.
"""


class BadInput(ValueError):
    """Input the explorer refuses (from a user, or a call vLLM would refuse), with a message
    meant for the user. Defined in the core so the core imports nothing else of the explorer;
    `explorer.errors` re-exports it for the rest."""


class ConfigError(BadInput):
    """An engine setting out of range: block size 0, fewer than 2 blocks, unknown hash."""


class RequestError(BadInput):
    """A request that cannot exist: empty prompt, too long, a bad image placeholder."""


class SchedulingError(BadInput):
    """A manager call that does not fit the request's state (nothing to compute, ...)."""
