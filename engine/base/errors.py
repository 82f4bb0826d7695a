"""The one error type the engine raises on purpose.

Every message names the file (or setting) and what is wrong with it, so the CLI can
print it as one line and the GUI can show it in a dialog without a traceback.
"""


class ShardscopeError(Exception):
    """A problem the user can act on: bad file, bad setting, refused budget."""
