"""The one error type that user input can raise.

Everything a user can type, upload or pass on the command line is checked, and a problem is
reported as a `BadInput` whose message names what was wrong (file, step, field). The CLI prints
that message on one line and exits 2; the UI shows it in an error element. Anything else that
escapes is a bug in the explorer, not in the input.
"""


class BadInput(ValueError):
    """User input that the explorer refuses, with a message meant for the user."""
