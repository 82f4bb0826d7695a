"""The one error type the engine raises on purpose.

Every message names the file (or setting) and what is wrong with it, so the CLI can
print it as one line and the GUI can show it in a dialog without a traceback.
"""


class ShardscopeError(Exception):
    """A problem the user can act on: bad file, bad setting, refused budget."""


class RunStopped(ShardscopeError):
    """The run was stopped on request (Stop, Ctrl-C) before it finished: not a failure.

    Raised where a stop cuts a phase short (a cancelled load, an aborted prompt pass),
    so callers can tell it from a real error and write nothing that claims a round."""
