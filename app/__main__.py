"""``python -m shardscope.app`` opens the workbench (same as ``shardscope`` with no arguments)."""

import sys

from shardscope.app.window.main import main

# Guarded: the cacheability replay starts a spawned process, which imports this module again as
# __mp_main__; unguarded, that child opened a second window and the replay failed ("RuntimeError").
if __name__ == "__main__":
    sys.exit(main())
